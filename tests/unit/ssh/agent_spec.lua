-- Specs of the private ssh-agent (cargoship.ssh.agent) with OpenSSH's real ssh-agent, ssh-add and ssh-keygen.
local agent = require "cargoship.ssh.agent"
local loop = require "cargoship.loop"
local util = require "cargoship.util"

local q = util.quote

local function run(fn)
  local r = table.pack(loop.run(fn))
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  p:close()
  return out
end

local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local stat = f:read("a")
  f:close()
  return not stat:match("%) [ZX]")
end

describe("ssh.agent", function()
  local dir, key
  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. q(dir)))
    key = dir .. "/k"
    assert(os.execute("ssh-keygen -q -t ed25519 -N 'pass phrase' -C cargoship-spec -f " .. q(key)))
  end)
  teardown(function() os.execute("rm -rf " .. q(dir)) end)

  it("decrypts the key into a private agent while other tasks go on; stop ends it all", function()
    local ticks, a, err = run(function()
      local n, done = 0, false
      local ticker = loop.spawn(function()
        while not done do loop.sleep(0.01); n = n + 1 end
      end)
      local r1, r2 = agent.start(key, "pass phrase")
      done = true
      ticker:join()
      return n, r1, r2
    end)
    assert.is_table(a, tostring(err))
    assert.is_true(ticks >= 3, "the loop was blocked while the agent started: " .. ticks .. " ticks")
    local listed = sh("SSH_AUTH_SOCK=" .. q(a.socket) .. " ssh-add -l")
    assert.matches("cargoship-spec (ED25519)", listed, 1, true)
    local sock_dir, pid = a.dir, a.pid
    assert.equal("700", sh("stat -c %a " .. q(sock_dir)):match("%d+"))
    a:stop()
    assert.is_false(alive(pid))
    assert.is_nil(io.open(sock_dir .. "/askpass"), "the agent's directory outlived stop()")
    assert.equal("0", sh("ls -d " .. q(sock_dir) .. " 2>/dev/null | wc -l"):match("%d+"))
    a:stop()   -- idempotent
  end)

  it("waits for the agent to listen, not only for its socket's file", function()
    -- a starter that binds the socket and keeps it unlistened 0.5 s (ssh-agent's bind-then-listen
    -- window, widened), then starts the real agent on it: a connection before then is refused
    local slow = dir .. "/slow-agent"
    local f = assert(io.open(slow, "w"))
    f:write("#!/usr/bin/python3\nimport os, socket, sys, time\n",
      "path = sys.argv[sys.argv.index('-a') + 1]\n",
      "s = socket.socket(socket.AF_UNIX); s.bind(path); time.sleep(0.5); s.close(); os.unlink(path)\n",
      "os.execvp('ssh-agent', ['ssh-agent'] + sys.argv[1:])\n")
    f:close()
    assert(os.execute("chmod 755 " .. q(slow)))
    agent.program = slow
    local ok, a, err = pcall(run, function() return agent.start(key, "pass phrase") end)
    agent.program = "ssh-agent"
    assert(ok, a)
    assert.is_table(a, tostring(err))
    assert.matches("cargoship-spec (ED25519)", sh("SSH_AUTH_SOCK=" .. q(a.socket) .. " ssh-add -l"), 1, true)
    a:stop()
  end)

  it("says so when the passphrase is wrong, leaving nothing behind", function()
    local a, err = run(function() return agent.start(key, "wrong") end)
    assert.is_nil(a)
    assert.matches("^ssh%-add " .. key:gsub("%p", "%%%0") .. ": ", err)
    -- neither the agent nor its watchdog is left among our children
    assert.equal("", sh("ps -o args= --ppid " .. util.getpid() .. " | grep -e '[s]sh-agent' -e '[k]ill -0' || true"))
  end)

  it("leaves nothing running when its task is cancelled midway", function()
    for _, delay in ipairs({ 0.01, 0.05, 0.15 }) do
      local code = run(function()
        local t = loop.spawn(function() return agent.start(key, "pass phrase") end)
        loop.sleep(delay)
        t:cancel()
        local ok, a, c = t:join()
        if ok and a then a:stop() end   -- it was quicker than the cancel
        return ok and "done" or c
      end)
      assert.is_truthy(code == "cancelled" or code == "done", tostring(code))
      assert.equal("", sh("ps -o args= --ppid " .. util.getpid() .. " | grep -e '[s]sh-a' -e '[k]ill -0' || true"))
    end
  end)

  it("refuses a passphrase with a line break", function()
    local a, err = run(function() return agent.start(key, "two\nlines") end)
    assert.is_nil(a)
    assert.matches("line break", err, 1, true)
  end)
end)

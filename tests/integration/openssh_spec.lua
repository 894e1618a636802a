-- Integration specs of what only the openSSH session kind does: ssh_config, ProxyCommand, masters' lifecycle.
--
-- The masters' directory of every run here is under a spec-own XDG_RUNTIME_DIR, so what is
-- left behind (processes, sockets) is this spec's alone to count.
local loop = require "cargoship.loop"
local util = require "cargoship.util"
local transport = require "cargoship.transport"
local lab = require "integration.lab"

local q = util.quote

local function run(fn)
  local ok, a, b, c, d = loop.run(fn)
  if not ok then error(a, 0) end
  return a, b, c, d
end

local xdg = os.tmpname()
os.remove(xdg)
assert(os.execute("mkdir -m 700 " .. q(xdg)))
local base = xdg .. "/cargoship-ssh"

local function cluster(path, blocks)
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata: {name: ossh}", "spec:",
    "  config: {loadbalancer: lb.lab.internal}", "  hosts:" }
  for i, b in ipairs(blocks) do
    lines[#lines + 1] = string.format("    - role: %s\n      hostname: h%d\n      %s",
      i == 1 and "controller" or "worker", i, b)
  end
  lab.write(path, table.concat(lines, "\n") .. "\n")
  return path
end

local function block(h, extra)
  return "openSSH: {address: " .. h.address .. ", user: root, keyPath: " .. lab.key .. (extra or "") .. "}"
end

local function cargoship(args)
  return lab.sh("XDG_RUNTIME_DIR=" .. q(xdg) .. " " .. lab.bin .. " " .. args)
end

-- The ssh masters of runs under our base directory, and the sockets there.
local function masters()
  -- "[-]M": the shell running pgrep has the pattern in its command line, and does not match it
  local _, out = lab.sh("pgrep -f -- " .. q("[-]M -N -S " .. base .. "/") .. " || true")
  local n = 0
  for _ in out:gmatch("%d+") do n = n + 1 end
  return n
end

local function sockets()
  local _, out = lab.sh("find " .. q(base) .. " -type s 2>/dev/null | wc -l")
  return tonumber(out:match("%d+"))
end

-- a process that has not ended (a zombie has)
local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local stat = f:read("a")
  f:close()
  return stat:match("^.*%) (%a)") ~= "Z"
end

local function wait_until(cond, seconds)
  local t0 = util.now()
  while util.now() - t0 < seconds do
    if cond() then return true end
    os.execute("sleep 0.1")
  end
  return false
end

describe("openSSH session kind", function()
  local work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. q(work)))
  teardown(function() os.execute("rm -rf " .. q(work) .. " " .. q(xdg)) end)

  it("jumps through a lab host with a ProxyCommand, and reaches a host by its ssh_config alias", function()
    local hosts = lab.hosts()
    run(function()
      local t = transport.new { known_hosts = lab.known_hosts, timeout = 20 }
      -- h3 reached only through h1: the ProxyCommand's own ssh logs in to h1 (ssh_config)
      local via = assert(t:connect({ kind = "openssh", address = hosts[3].address, user = "root", key_path = lab.key,
        options = { ProxyCommand = "ssh -F " .. lab.state .. "/ssh_config -W %h:%p h1" } }, "h3"))
      assert.are.equal(hosts[3].name .. "\n", (via:exec("hostname")))
      -- the sshd of h3 saw the connection come from h1's address
      local from = assert(via:exec("echo $SSH_CLIENT"))
      assert.matches("^" .. hosts[1].address:gsub("%.", "%%.") .. " ", from)
      -- "h2" is only a Host alias in the lab's ssh_config (HostName, User, IdentityFile there)
      local alias = assert(t:connect({ kind = "openssh", address = "h2", config_path = lab.state .. "/ssh_config" },
        "alias"))
      assert.are.equal("root", alias.user)
      assert.are.equal(hosts[2].name .. "\n", (alias:exec("hostname")))
      t:close_all()
    end)
  end)

  it("fails a host whose key does not match, naming it, and runs on the others", function()
    local hosts = lab.hosts()
    local fake = lab.write(work .. "/fake_known_hosts", hosts[2].address
      .. " ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBN8oVlYb0LJc1QDq0Yk0+4ZtOr7uYzQ4uMzTn0fUqo1\n")
    local path = cluster(work .. "/mismatch.yaml", { block(hosts[1]),
      block(hosts[2], ", options: {UserKnownHostsFile: " .. fake .. "}"), block(hosts[3]) })
    local code, out = cargoship("exec " .. path .. " --known-hosts " .. lab.known_hosts .. " -- hostname")
    assert.are.equal(1, code, out)
    assert.matches("h1 | h1", out, 1, true)
    assert.matches("h3 | h3", out, 1, true)
    assert.matches("h2: connect: [^\n]*Host key for " .. hosts[2].address:gsub("%.", "%%.") .. " has changed", out)
    assert.matches("3 hosts: 2 ok, 1 failed", out, 1, true)
    assert.are.equal(0, masters())
    assert.are.equal(0, sockets())
  end)

  it("runs each command over its own connection with disableMultiplexing, and starts no master", function()
    local hosts = lab.hosts()
    run(function()
      local t = transport.new { known_hosts = lab.known_hosts, timeout = 20 }
      local c = assert(t:connect({ kind = "openssh", address = hosts[1].address, user = "root", key_path = lab.key,
        disable_multiplexing = true }, "h1"))
      assert.is_nil(c.session:info().socket)
      assert.are.equal(0, masters())
      local ports = {}
      for i = 1, 2 do ports[i] = assert(c:exec("echo $SSH_CLIENT")):match("^%S+ (%d+)") end
      assert.are_not.equal(ports[1], ports[2])   -- two TCP connections
      -- each handshake is paced until ssh's LocalCommand says it is in; that line is ours,
      -- never part of the command's stderr
      local out, err, code = c:exec("echo out; echo err >&2")
      assert.are.same({ "out\n", "err\n", 0 }, { out, err, code })
      -- the session's check at connect and the three commands: four paced handshakes
      assert.are.equal(4, t.pacer:stats().opened)
      t:close_all()
    end)
  end)

  it("runs a localhost: true host's commands on this machine", function()
    local path = cluster(work .. "/local.yaml", { "localhost: true" })
    local code, out = cargoship("exec " .. path .. " -- 'echo $PWD; id -un'")
    assert.are.equal(0, code, out)
    assert.matches("h1 | " .. os.getenv("HOME") .. "\n", out, 1, true)
    assert.matches("h1 | root\n", out, 1, true)
  end)

  it("sends an ssh: host's uploads through an ssh master with upload_transport openssh", function()
    local h = lab.host(1)
    local src = lab.write(work .. "/via.bin", string.rep("via ", 300000))
    local sum = util.sha256_file(src)
    local r = {}
    run(function()
      local env = function(k) if k == "XDG_RUNTIME_DIR" then return xdg end return os.getenv(k) end
      local t = transport.new { known_hosts = lab.known_hosts, timeout = 20, env = env, upload_transport = "openssh" }
      local c = assert(t:connect({ kind = "ssh", address = h.address, user = "root", key_path = lab.key }, h.name))
      assert.is_nil(c.session.session)   -- no master before the first upload
      r.first = assert(c:upload(src, "/var/tmp/cs-via.bin", { mode = "0600" }))
      r.master = c.session.session and c.session.session:info().master_pid
      r.masters = masters()
      r.sum = (c:exec("sha256sum /var/tmp/cs-via.bin; rm -f /var/tmp/cs-via.bin")):match("^%x+")
      t:close_all()
    end)
    assert.is_false(r.first.skipped)
    assert.is_truthy(r.master)
    assert.are.equal(1, r.masters)
    assert.are.equal(sum, r.sum)
    assert.are.equal(0, masters())
  end)

  describe("leaves no ssh master or socket behind", function()
    local path
    setup(function()
      local hosts = lab.hosts()
      path = cluster(work .. "/three.yaml", { block(hosts[1]), block(hosts[2]), block(hosts[3]) })
    end)

    -- `sleep <this>` names this spec's commands on the hosts alone
    local SLEEP = string.format("60.%d", util.getpid())
    local started = {}
    after_each(function()
      for _, pid in ipairs(started) do os.execute("kill -KILL " .. pid .. " 2>/dev/null") end
      started = {}
    end)

    -- Starts `cargoship exec -- sleep 60` in the background -> its pid, once its 3 masters are up.
    local function start_sleeping(tag)
      local _, pid = lab.sh("XDG_RUNTIME_DIR=" .. q(xdg) .. " " .. lab.bin .. " exec " .. path .. " --known-hosts "
        .. lab.known_hosts .. " -- 'sleep " .. SLEEP .. "; echo " .. tag .. "' >" .. q(work .. "/" .. tag .. ".out")
        .. " 2>&1 & echo $!")
      pid = assert(tonumber(pid:match("%d+")))
      started[#started + 1] = pid
      assert.is_true(wait_until(function() return masters() == 3 end, 20), "the run's 3 masters did not come up")
      os.execute("sleep 0.5")
      return pid
    end

    local function sleepers()
      local _, out = lab.sh("ssh -F " .. q(lab.state .. "/ssh_config") .. " h1 "
        .. q("pgrep -c -x -f " .. q("sleep " .. SLEEP) .. " || true"))
      return tonumber(out:match("%d+"))
    end

    it("after a run", function()
      local code, out = cargoship("exec " .. path .. " --known-hosts " .. lab.known_hosts .. " -- true")
      assert.are.equal(0, code, out)
      assert.are.equal(0, masters())
      assert.are.equal(0, sockets())
    end)

    -- Ctrl-C, and every other signal cargoship handles the same way
    for _, sig in ipairs { "INT", "TERM", "HUP", "QUIT" } do
      it("after SIG" .. sig .. ": the commands ended on the hosts, then the masters", function()
        local pid = start_sleeping(sig:lower())
        assert.are.equal(1, sleepers())
        os.execute("kill -" .. sig .. " " .. pid)
        assert.is_true(wait_until(function() return not alive(pid) end, 20))
        assert.are.equal(0, masters())
        assert.are.equal(0, sockets())
        assert.are.equal(0, sleepers(), lab.read(work .. "/" .. sig:lower() .. ".out"))
      end)
    end

    it("after kill -9, by the next run", function()
      local pid = start_sleeping("kill")
      os.execute("kill -KILL " .. pid)
      assert.is_true(wait_until(function() return not alive(pid) end, 10))
      -- what SIGKILL leaves: the masters, their sockets, the run's directory
      assert.are.equal(3, masters())
      assert.are.equal(3, sockets())
      local code, out = cargoship("exec " .. path .. " --known-hosts " .. lab.known_hosts .. " -- true")
      assert.are.equal(0, code, out)
      assert.is_true(wait_until(function() return masters() == 0 end, 5), masters() .. " masters left")
      assert.are.equal(0, sockets())
      local _, left = lab.sh("ls -A " .. q(base))
      assert.are.equal("", left)
      for i = 1, 3 do
        -- SIGKILL left them running (docs/transport.md): end them, by pid
        lab.sh("ssh -F " .. q(lab.state .. "/ssh_config") .. " h" .. i .. " "
          .. q("kill $(pgrep -x -f " .. q("sleep " .. SLEEP) .. ")"))
      end
    end)
  end)
end)

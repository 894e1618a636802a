-- Specs of transport connections over a stand-in session: tags, long commands, ending commands on cancel and timeout.
local loop = require "cargoship.loop"
local transport = require "cargoship.transport"

-- A session that records every wire it is given. A wire running `sleep` blocks until the
-- kill script (recognised by its grep over /proc) has run, or until `timeout`; the kill
-- script answers `kill_exit`.
local function fake_session(o)
  o = o or {}
  local s = { wires = {}, stdins = {}, killed = false, log = {} }
  function s.exec(_, wire, opts)
    s.wires[#s.wires + 1] = wire
    s.stdins[#s.stdins + 1] = opts.stdin
    if wire:find("grep -lsxzF", 1, true) then
      s.log[#s.log + 1] = "kill"
      loop.sleep(0.05)
      s.killed = true
      return "", "\30cs-exit:" .. (o.kill_exit or 0) .. "\n", 0
    end
    if wire:find("sleep", 1, true) then
      s.log[#s.log + 1] = "sleep"
      local t0 = loop.now()
      while not s.killed do
        loop.sleep(0.01)
        if opts.timeout and loop.now() - t0 > opts.timeout then
          return nil, "h1: exec: timed out after " .. opts.timeout .. " s", "timeout"
        end
      end
      return "", "\30cs-exit:143\n", 0
    end
    s.log[#s.log + 1] = "other"
    return "out\n", "\30cs-exit:0\n", 0
  end
  function s.state() return "ready" end
  function s.close() end
  return s
end

local function connection(session, root)
  local user = root == false and "tb" or "root"
  local c = transport.connection(session, { name = "h1", user = user, run_id = "r1", seq = 1 })
  c.sudo_ok = true
  return c
end

local function run(fn)
  local ok, a, b, c = loop.run(fn)
  assert(ok, a)
  return a, b, c
end

describe("transport connections", function()
  it("run each command with its own tag in the environment, under sudo when asked", function()
    local s = fake_session()
    run(function()
      local c = connection(s, false)
      assert.are.equal("out\n", (c:exec("echo hi")))
      assert.are.equal("out\n", (c:exec("id -un", { sudo = true })))
    end)
    assert.matches("env CARGOSHIP_CMD=r1.1.1 sh -c", s.wires[1], 1, true)
    assert.matches("sudo -n env CARGOSHIP_CMD=r1.1.2 sh -c", s.wires[2], 1, true)
  end)

  it("send a command beyond MAX_INLINE over stdin, and refuse one that has stdin of its own", function()
    local s = fake_session()
    local long = "echo " .. string.rep("x", transport.MAX_INLINE)
    local err, code
    run(function()
      local c = connection(s)
      assert.are.equal("out\n", (c:exec(long)))
      err, code = select(2, c:exec(long, { stdin = "data" }))
    end)
    assert.are.equal(1, #s.wires)
    assert.is_true(#s.wires[1] < 200, "the wire still carries the script: " .. #s.wires[1] .. " bytes")
    assert.matches("eval", s.wires[1], 1, true)
    assert.are.equal(long, s.stdins[1])
    assert.are.equal("io", code)
    assert.matches("commands over " .. transport.MAX_INLINE .. " bytes travel over stdin", err, 1, true)
  end)

  it("end a timed-out command's processes before exec returns", function()
    local s = fake_session()
    local out, err, code = run(function()
      return connection(s):exec("sleep 300", { timeout = 0.1 })
    end)
    assert.is_nil(out)
    assert.are.equal("timeout", code)
    assert.matches("; its processes on the host were ended", err, 1, true)
    assert.are.same({ "sleep", "kill" }, s.log)
    assert.matches("CARGOSHIP_CMD=r1.1.1", s.wires[2], 1, true)
  end)

  it("finish ending a timed-out command when the task is cancelled meanwhile", function()
    local s = fake_session()
    local running
    run(function()
      local c = connection(s)
      local t = loop.spawn(function() return c:exec("sleep 300", { timeout = 0.05 }) end)
      loop.sleep(0.08)   -- the kill is under way now
      t:cancel()
      t:join()
      running = c:running()
    end)
    assert.are.same({ "sleep", "kill" }, s.log)
    assert.is_true(s.killed)
    assert.are.equal(0, running)
  end)

  it("say so when the processes could not be confirmed ended", function()
    local s = fake_session { kill_exit = 1 }
    local _, err = run(function()
      return connection(s):exec("sleep 300", { timeout = 0.1 })
    end)
    assert.matches("ending its processes on the host failed: h1: processes of the command still ran", err, 1, true)
  end)

  it("end a cancelled command, and a later command on the connection waits for that", function()
    local s = fake_session()
    local code
    run(function()
      local c = connection(s)
      local t = loop.spawn(function() return c:exec("sleep 300") end)
      loop.sleep(0.02)
      t:cancel()
      -- started before the cancelled task even resumed: must still come after the kill
      c:exec("rm -rf /run/lock/x")
      code = select(3, t:join())
      assert.are.equal(0, c:running())
    end)
    assert.are.equal("cancelled", code)
    assert.are.same({ "sleep", "kill", "other" }, s.log)
  end)

  it("start no command in a task being cancelled, but still in its destructors", function()
    local s = fake_session()
    local code, in_destructor
    run(function()
      local c = connection(s)
      local t = loop.spawn(function()
        loop.defer(function() in_destructor = c:exec("echo release") end)
        return c:exec("echo tick")
      end)
      -- cancelled before it first ran: it still runs up to its first wait
      t:cancel()
      code = select(3, t:join())
    end)
    assert.are.equal("cancelled", code)
    assert.are.equal("out\n", in_destructor)
    assert.are.equal(1, #s.wires, table.concat(s.wires, " | "))
    assert.matches("echo release", s.wires[1], 1, true)
  end)

  it("kill_all ends the commands of every task and returns once the kill is confirmed", function()
    local s = fake_session()
    run(function()
      local c = connection(s)
      local tasks = {}
      for i = 1, 2 do tasks[i] = loop.spawn(function() return c:exec("sleep 300") end) end
      loop.sleep(0.02)
      assert.are.equal(2, c:running())
      assert.is_true(c:kill_all())
      assert.is_true(s.killed)
      for i = 1, 2 do assert.are.equal(143, select(4, tasks[i]:join())) end
    end)
    assert.matches("CARGOSHIP_CMD=r1.1.1", s.wires[3], 1, true)
    assert.matches("CARGOSHIP_CMD=r1.1.2", s.wires[3], 1, true)
  end)
end)

describe("a failed command's error text", function()
  it("keeps every line of a short stderr, blank lines dropped", function()
    assert.are.equal("Error: nothing provides libfoo\n(try --skip-broken)",
      transport.error_text("\nError: nothing provides libfoo\n\n(try --skip-broken)\n"))
    assert.is_nil(transport.error_text(" \n\n"))
  end)
  it("keeps the first and the last lines of a long one, saying how many it left out", function()
    local lines = {}
    for i = 1, 30 do lines[i] = "line " .. i end
    local text = transport.error_text(table.concat(lines, "\n"))
    local got = {}
    for l in text:gmatch("[^\n]+") do got[#got + 1] = l end
    assert.are.equal(12, #got)
    assert.are.same({ "line 1", "[... 19 lines ...]", "line 21" }, { got[1], got[2], got[3] })
    assert.are.equal("line 30", got[12])
  end)
  it("puts stdout's last lines before stderr: apt says why on stdout and only that it failed on stderr", function()
    -- the real apt-get's streams of a simulation with an unmet dependency (tests/fixtures/predict)
    local dir = (os.getenv("CARGOSHIP_SOURCE_DIR") or ".") .. "/tests/fixtures/predict/"
    local function read(p) local f = assert(io.open(dir .. p)); local s = f:read("a"); f:close(); return s end
    local text = transport.failure_text(read("apt-satisfy-unmet.stdout"), read("apt-satisfy-unmet.stderr"))
    assert.matches("Depends: cs-nonexistent-xyz (>= 1) but it is not installable", text, 1, true)
    assert.matches("\nE: Unable to correct problems, you have held broken packages.$", text)
    local n = select(2, text:gsub("\n", "")) + 1
    assert.is_true(n <= 9, n)
    assert.are.equal("only stderr", transport.failure_text("", "only stderr\n"))
    assert.are.equal("only stdout", transport.failure_text("only stdout\n", nil))
    assert.is_nil(transport.failure_text(" \n", ""))
  end)
end)

-- Integration specs of ending what a run started: commands ended on cancel and timeout, long commands, keepalive.
--
-- Every check of a host's process table goes through a connection of its own (a separate
-- loop.run), never the one whose commands were ended.
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

local function new_transport(over)
  local o = { known_hosts = lab.known_hosts, timeout = 20 }
  for k, v in pairs(over or {}) do o[k] = v end
  return transport.new(o)
end

-- A number no other test uses, so `sleep <n>` names this test's processes alone.
local serial = 0
local function marker()
  serial = serial + 1
  return string.format("%d%03d", 3000 + (util.getpid() % 1000), serial)
end

-- How many processes on host i run exactly `sleep <n>` (counted through /proc).
local function sleepers(i, n)
  local h = lab.host(i)
  return run(function()
    local t = new_transport()
    local c = assert(t:connect(lab.conn(h), h.name))
    local out = assert(c:exec("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done"
      .. " | grep -c -x " .. q("sleep " .. n .. " ") .. "; true"))
    t:close_all()
    return tonumber(out:match("%d+"))
  end)
end

describe("ending remote commands", function()
  it("ends a command at its timeout, before exec returns", function()
    local n = marker()
    local out, err, code, took = run(function()
      local h = lab.host(1)
      local t = new_transport()
      local c = assert(t:connect(lab.conn(h), h.name))
      local t0 = util.now()
      local a, b, d = c:exec("sleep " .. n .. "; echo not reached", { timeout = 1 })
      local dt = util.now() - t0
      t:close_all()
      return a, b, d, dt
    end)
    assert.is_nil(out)
    assert.are.equal("timeout", code)
    assert.matches("timed out after 1 s; its processes on the host were ended", err, 1, true)
    assert.is_true(took < 5, "took " .. took .. " s")
    assert.are.equal(0, sleepers(1, n))
  end)

  it("ends a cancelled command, as root through sudo too, and a later command waits for that", function()
    local n1, n2 = marker(), marker()
    local seen
    run(function()
      local h = lab.host(2)
      local t = new_transport()
      local c = assert(t:connect(lab.conn(h), h.name))
      local tb = assert(t:connect(lab.conn(h, { user = "tb" }), h.name))
      local a = loop.spawn(function() return c:exec("sleep " .. n1) end)
      local b = loop.spawn(function() return tb:exec("sleep " .. n2, { sudo = true }) end)
      loop.sleep(1)
      a:cancel()
      b:cancel()
      -- the next command on each connection starts only once the cancelled one is gone
      seen = {
        (c:exec("ps -eo args | grep -c -x " .. q("sleep " .. n1) .. "; true")),
        (tb:exec("ps -eo args | grep -c -x " .. q("sleep " .. n2) .. "; true", { sudo = true })),
      }
      local ok, err, code = a:join()
      assert.is_false(ok)
      assert.are.equal("cancelled", code, tostring(err))
      t:close_all()
    end)
    assert.are.same({ "0\n", "0\n" }, seen)
    assert.are.equal(0, sleepers(2, n1))
    assert.are.equal(0, sleepers(2, n2))
  end)

  it("kill_all ends every command of a connection and returns once they are gone", function()
    local n = marker()
    local results
    run(function()
      local h = lab.host(3)
      local t = new_transport()
      local c = assert(t:connect(lab.conn(h), h.name))
      local tasks = {}
      for i = 1, 3 do tasks[i] = loop.spawn(function() return c:exec("sleep " .. n .. "; echo after") end) end
      loop.sleep(1)
      assert.are.equal(3, c:running())
      assert.is_true(c:kill_all())
      results = {}
      for i = 1, 3 do results[i] = { select(2, tasks[i]:join()) } end
      assert.are.equal(0, c:running())
      t:close_all()
    end)
    for i = 1, 3 do
      assert.are.equal("", results[i][1])        -- TERM ended sleep: no "after" either, the shell went too
      assert.are.equal(143, results[i][3])
    end
    assert.are.equal(0, sleepers(3, n))
  end)
end)

describe("long commands", function()
  it("runs a 100 KB script (beyond one SSH packet) over stdin, exit status and output intact", function()
    local lines = {}
    for i = 1, 2000 do lines[i] = string.format("echo 'line %04d of a long script, quoted: '\\''x'\\'''", i) end
    lines[#lines + 1] = "exit 3"
    local script = table.concat(lines, "\n")
    assert.is_true(#script > 100000, #script)
    local out, err, code = run(function()
      local h = lab.host(1)
      local t = new_transport()
      local c = assert(t:connect(lab.conn(h, { user = "tb" }), h.name))
      local a, b, d = c:exec(script, { sudo = true })
      t:close_all()
      return a, b, d
    end)
    assert.are.equal("", err)
    assert.are.equal(3, code)
    local got = {}
    for l in out:gmatch("[^\n]+") do got[#got + 1] = l end
    assert.are.equal(2000, #got)
    assert.are.equal("line 0001 of a long script, quoted: 'x'", got[1])
    assert.are.equal("line 2000 of a long script, quoted: 'x'", got[2000])
  end)

  it("is refused by session:exec itself over 32768 bytes, naming the limit, the session still usable", function()
    local out, err, code, after = run(function()
      local h = lab.host(1)
      local kh = assert(require("cargoship.ssh").known_hosts(lab.known_hosts))
      local s = assert(require("cargoship.ssh").connect { address = h.address, user = "root", key_path = lab.key,
        known_hosts = kh, name = h.name })
      local a, b, d = s:exec(": " .. string.rep("x", 40000))
      local e = s:exec("echo fine")
      s:close()
      return a, b, d, e
    end)
    assert.is_nil(out)
    assert.are.equal("io", code)
    assert.are.equal(lab.host(1).name .. ": exec: the command is 40002 bytes, over the 32768 an exec request holds; "
      .. "send a longer script over stdin", err)
    assert.are.equal("fine\n", after)
  end)

  it("refuses a long command that has stdin of its own, naming the limit", function()
    local out, err, code = run(function()
      local h = lab.host(1)
      local t = new_transport()
      local c = assert(t:connect(lab.conn(h), h.name))
      local a, b, d = c:exec("cat >/dev/null; : " .. string.rep("x", 40000), { stdin = "data" })
      t:close_all()
      return a, b, d
    end)
    assert.is_nil(out)
    assert.are.equal("io", code)
    assert.matches("has stdin of its own; commands over " .. transport.MAX_INLINE .. " bytes", err, 1, true)
  end)
end)

describe("keepalive", function()
  it("fails a command on a host that went silent after count_max rounds, the others unharmed", function()
    local hosts = lab.hosts()
    local results, took
    run(function()
      local t = new_transport { keepalive = 1, keepalive_count_max = 3 }
      local conns = {}
      for i = 1, 3 do conns[i] = assert(t:connect(lab.conn(hosts[i]), hosts[i].name)) end
      local tasks = {}
      for i = 1, 3 do
        tasks[i] = loop.spawn(function() return conns[i]:exec("sleep 8; echo done", { timeout = 60 }) end)
      end
      loop.sleep(0.5)
      lab.lab("link 2 down")
      local t0 = util.now()
      results = {}
      results[2] = { select(2, tasks[2]:join()) }
      took = util.now() - t0
      lab.lab("link 2 up")
      for i = 1, 3, 2 do results[i] = { select(2, tasks[i]:join()) } end
    end)
    assert.is_nil(results[2][1])
    assert.are.equal("closed", results[2][3])
    assert.matches(hosts[2].name .. ": exec: connection lost: no answer from the host for 3 s", results[2][2], 1, true)
    assert.is_true(took < 6, "took " .. took .. " s")
    assert.are.equal("done\n", results[1][1])
    assert.are.equal("done\n", results[3][1])
  end)

  it("keeps a silent but live command's session: keepalive answers count", function()
    local out = run(function()
      local h = lab.host(1)
      local t = new_transport { keepalive = 1, keepalive_count_max = 2 }
      local c = assert(t:connect(lab.conn(h), h.name))
      local a = c:exec("sleep 5; echo alive")
      t:close_all()
      return a
    end)
    assert.are.equal("alive\n", out)
  end)
end)

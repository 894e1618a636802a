-- Specs of child processes on the loop (runtime/proc.c) through their Lua face, cargoship.subprocess.
local loop = require "cargoship.loop"
local proc = require "cargoship.proc"
local subprocess = require "cargoship.subprocess"

-- fn in a loop task -> its results; its error raised
local function run(fn)
  local r = table.pack(loop.run(fn))
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

-- true while pid runs (not a zombie)
local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local stat = f:read("a")
  f:close()
  return not stat:match("%) [ZX]")
end

-- true once pid has stopped running, within a second (a killed orphan takes a moment)
local function gone(pid)
  for _ = 1, 100 do
    if not alive(pid) then return true end
    os.execute("sleep 0.01")
  end
  return false
end

-- Ticks a task makes while fn runs in another: a primitive that blocks the loop allows none.
local function ticks_during(fn)
  return run(function()
    local ticks, done = 0, false
    local ticker = loop.spawn(function()
      while not done do
        loop.sleep(0.01)
        ticks = ticks + 1
      end
    end)
    local r = table.pack(fn())
    done = true
    ticker:join()
    return ticks, table.unpack(r, 1, r.n)
  end)
end

describe("subprocess.run", function()
  it("returns stdout, stderr and the exit code; a non-zero exit is no error", function()
    local out, err, code, sig = run(function()
      return subprocess.run({ "sh", "-c", "printf 'out'; printf 'err' >&2; exit 3" })
    end)
    assert.same({ "out", "err", 3 }, { out, err, code })
    assert.is_nil(sig)
  end)

  it("yields while the program runs: another task keeps ticking", function()
    local ticks, out = ticks_during(function() return subprocess.run({ "sh", "-c", "sleep 0.3; echo done" }) end)
    assert.equal("done\n", out)
    assert.is_true(ticks >= 10, "only " .. ticks .. " ticks in 0.3 s")
  end)

  it("feeds stdin and reads large stdout and stderr at once without deadlock", function()
    local data = string.rep("cargoship\n", 300000)   -- 3 MB, far past a pipe's 64 KiB
    local out, err, code = run(function()
      return subprocess.run({ "sh", "-c", "tee /dev/stderr" }, { stdin = data })
    end)
    assert.equal(0, code)
    assert.is_true(out == data, "stdout differs: " .. #out .. " bytes")
    assert.is_true(err == data, "stderr differs: " .. #err .. " bytes")
  end)

  it("streams stdout to on_stdout; stderr can be merged into it", function()
    local chunks = {}
    local out, err, code = run(function()
      return subprocess.run({ "sh", "-c", "echo a; echo b >&2" }, { stderr = "stdout",
        on_stdout = function(c) chunks[#chunks + 1] = c end })
    end)
    assert.same({ "", "", 0 }, { out, err, code })
    assert.equal("a\nb\n", table.concat(chunks))
  end)

  it("kills the process group at the timeout, grandchildren too", function()
    local grandchild
    local t0 = os.time()
    local out, why, code = run(function()
      return subprocess.run({ "sh", "-c", "sleep 30 & echo $!; sleep 30" }, { timeout = 0.3,
        on_stdout = function(c) grandchild = tonumber(c:match("%d+")) end })
    end)
    assert.is_nil(out)
    assert.equal("timeout", code)
    assert.matches("sh: timed out after 0.3 s", why, 1, true)
    assert.is_true(os.time() - t0 < 5)
    assert.is_truthy(grandchild)
    assert.is_true(gone(grandchild), "the grandchild survived the timeout")
  end)

  it("names a program that does not exist, with the code \"missing\"", function()
    local out, why, code = run(function() return subprocess.run({ "cargoship-no-such-program" }) end)
    assert.is_nil(out)
    assert.equal("missing", code)
    assert.matches("cargoship-no-such-program: spawn: ", why, 1, true)
  end)

  it("kills the program when on_stdout raises, and the error goes on", function()
    local pid
    local ok, err = loop.run(function()
      return subprocess.run({ "sh", "-c", "echo $$; exec sleep 30" }, {
        on_stdout = function(c)
          pid = tonumber(c:match("%d+"))
          error("the consumer gave up")
        end })
    end)
    assert.is_false(ok)
    assert.matches("the consumer gave up", err, 1, true)
    assert.is_true(gone(pid))
  end)

  it("kills the program when its task is cancelled", function()
    local pid
    local cancelled = run(function()
      local t = loop.spawn(function()
        return subprocess.run({ "sh", "-c", "echo $$; exec sleep 30" }, {
          on_stdout = function(c) pid = tonumber(c:match("%d+")) end })
      end)
      loop.sleep(0.2)
      t:cancel()
      local ok, _, code = t:join()
      return not ok and code
    end)
    assert.equal("cancelled", cancelled)
    assert.is_truthy(pid)
    assert.is_true(gone(pid))
  end)
end)

describe("proc.spawn", function()
  it("is a process object with read, write, wait, kill and close", function()
    local got = run(function()
      local p <close> = assert(proc.spawn { argv = { "cat" }, stdin = "pipe", stderr = "null" })
      assert(p:write("hello"))
      p:close_stdin()
      local out = assert(p:read("stdout"))
      assert.equal("", p:read("stdout"))
      assert.equal(0, p:wait(5))
      assert.matches("^process %d+ %(cat%) ended$", tostring(p))
      return out
    end)
    assert.equal("hello", got)
  end)

  it("raises on misuse: waiting outside a task, a stream that is not a pipe", function()
    local p = assert(proc.spawn { argv = { "true" }, stdout = "null" })
    assert.has_error(function() p:wait() end)
    run(function()
      assert.has_error(function() p:read("stdout") end, "true: read: stdout is not a pipe")
    end)
    p:close()
    assert.has_error(function() p:pid() end, "attempt to use a closed process")
  end)
end)

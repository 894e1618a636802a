-- Specs of the loop's signal handling in a real process: the second SIGINT leaves at once.
local function script(body)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write('package.cpath = "', os.getenv("CARGOSHIP_BUILD_DIR"), '/lib/?.so;" .. package.cpath\n', body)
  f:close()
  return path
end

-- Runs lua5.4 path in the background, sends the signals with pauses, returns exit code and
-- seconds from the last signal to the exit.
local function run_with_signals(path, signals)
  local sh = { "lua5.4 " .. path .. " > " .. path .. ".out 2>&1 & p=$!", "sleep 0.5" }
  for _, s in ipairs(signals) do
    sh[#sh + 1] = "kill -" .. s .. " $p; sleep 0.2"
  end
  sh[#sh + 1] = "t0=$(date +%s%N); wait $p; rc=$?; t1=$(date +%s%N)"
  sh[#sh + 1] = "echo $rc $(( (t1 - t0) / 1000000 ))"
  local p = io.popen(table.concat(sh, "\n"))
  local rc, ms = p:read("a"):match("(%d+) (%d+)")
  p:close()
  return tonumber(rc), tonumber(ms) / 1000, io.open(path .. ".out"):read("a")
end

describe("signals", function()
  local body = [[
local loop = require "cargoship.loop"
local ok, err, code = loop.run(function()
  loop.defer(function() io.stdout:write("cleaning up\n"); io.stdout:flush(); loop.sleep(30) end)
  loop.sleep(60)
end)
io.stdout:write("run returned ", tostring(code), " interrupted=", tostring(loop.interrupted()), "\n")
os.exit(loop.interrupted() and 130 or 0)
]]

  it("cancels every task on the first SIGINT and lets the destructors run", function()
    local path = script(body:gsub("loop.sleep%(30%)", "loop.sleep(0.1)"))
    local rc, _, out = run_with_signals(path, { "INT" })
    assert.are.equal(130, rc, out)
    assert.matches("cleaning up", out, 1, true)
    assert.matches("run returned cancelled interrupted=2", out, 1, true)
    os.remove(path); os.remove(path .. ".out")
  end)

  it("leaves at once, exit 130, on a second SIGINT while destructors still wait", function()
    local path = script(body)
    local rc, secs, out = run_with_signals(path, { "INT", "INT" })
    assert.are.equal(130, rc, out)
    assert.matches("cleaning up", out, 1, true)
    assert.is_nil(out:find("run returned", 1, true))
    assert.is_true(secs < 5, "took " .. secs .. " s after the second SIGINT")
    os.remove(path); os.remove(path .. ".out")
  end)

  it("treats SIGTERM like the first SIGINT", function()
    local path = script(body:gsub("loop.sleep%(30%)", "loop.sleep(0.1)"))
    local rc, _, out = run_with_signals(path, { "TERM" })
    assert.are.equal(130, rc, out)
    assert.matches("interrupted=15", out, 1, true)
    os.remove(path); os.remove(path .. ".out")
  end)

  it("treats SIGHUP and SIGQUIT like SIGTERM: cancel, destructors run", function()
    for _, sig in ipairs { "HUP", "QUIT" } do
      local path = script(body:gsub("loop.sleep%(30%)", "loop.sleep(0.1)"))
      local rc, _, out = run_with_signals(path, { sig })
      assert.are.equal(130, rc, sig .. ": " .. out)
      assert.matches("cleaning up", out, 1, true)
      assert.matches("run returned cancelled interrupted=" .. (sig == "HUP" and 1 or 3), out, 1, true)
      os.remove(path); os.remove(path .. ".out")
    end
  end)

  it("honours SIGTERM while a task is busy in Lua, even one whose pcall swallows the first raise", function()
    for _, spin in ipairs { "while true do end",
                            "while true do pcall(function() for _ = 1, 1e6 do end end) end" } do
      local path = script(body:gsub("loop.sleep%(30%)", "loop.sleep(0.1)"):gsub("loop.sleep%(60%)", spin))
      local rc, secs, out = run_with_signals(path, { "TERM" })
      assert.are.equal(130, rc, out)
      assert.matches("cleaning up", out, 1, true)
      assert.matches("run returned cancelled interrupted=15", out, 1, true)
      assert.is_true(secs < 2, "took " .. secs .. " s after SIGTERM")
      os.remove(path); os.remove(path .. ".out")
    end
  end)

  it("survives SIGPIPE: a write to a closed pipe fails with EPIPE instead of killing the run", function()
    local path = script([[
local loop = require "cargoship.loop"
loop.run(function()
  loop.sleep(0.3)   -- the reader has gone by now
  local ok, err = io.stdout:write(string.rep("x", 1 << 20))
  if ok then ok, err = io.stdout:flush() end
  io.stderr:write("write: ", tostring(err), "\n")
end)
io.stderr:write("still alive\n")
]])
    local p = io.popen("bash -c 'lua5.4 " .. path .. " 2>" .. path .. ".err | true; echo ${PIPESTATUS[0]}'")
    local rc = tonumber(p:read("a"):match("%d+"))
    p:close()
    local err = io.open(path .. ".err"):read("a")
    assert.are.equal(0, rc, err)
    assert.matches("Broken pipe", err, 1, true)
    assert.matches("still alive", err, 1, true)
    os.remove(path); os.remove(path .. ".err")
  end)
end)


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
end)

-- Specs of the heap profile (cargoship.pipeline.heap): sizes by Lua 5.4's layout, per-host attribution.
local heap = require "cargoship.pipeline.heap"
local loop = require "cargoship.loop"

-- Runs fn with the profile's lines captured -> what it wrote
local function stderr_of(fn)
  local path = os.tmpname()
  local saved = heap.out
  local f = assert(io.open(path, "w"))
  heap.out = f
  local ok, err = pcall(fn)
  heap.out = saved
  f:close()
  local r = assert(io.open(path)):read("a")
  os.remove(path)
  assert(ok, err)
  return r
end

describe("pipeline.heap", function()
  it("sizes long strings and tables by Lua 5.4's layout, short strings as shared", function()
    assert.equal(25 + 100, heap.size(("x"):rep(100), {}))
    assert.equal(0, heap.size("short", {}))
    -- 3 array slots -> 4 (16 each); no hash part
    assert.equal(56 + 16 * 4, heap.size({ 1, 2, 3 }, {}))
    -- 3 hash entries -> 4 slots (32 each), one long string value
    assert.equal(56 + 32 * 4 + 25 + 50, heap.size({ a = 1, b = 2, c = ("y"):rep(50) }, {}))
    local seen, t = {}, { ("z"):rep(60) }
    assert.is_true(heap.size(t, seen) > 0)
    assert.equal(0, heap.size(t, seen), "counted twice")
  end)

  it("gives each host only what it alone holds, by field, and the sampler's peak", function()
    local shared = { blob = ("s"):rep(4000) }
    local hosts = {}
    for i = 1, 4 do
      hosts[i] = { name = "h" .. i, facts = { out = ("f"):rep(1000 + i) }, cluster = shared }
    end
    local ctx = { hosts = hosts, cluster = shared }
    local line = stderr_of(function()
      loop.run(function()
        local s = heap.sample()
        loop.sleep(0.02)
        s:cancel()
        heap.after_phase(ctx, "probe", { report = { ("r"):rep(400) } })
      end)
    end)
    assert.matches("^heap after probe: RSS %d+ KiB %(peak %d+%); Lua heap peak [%d.]+ KiB", line)
    -- facts: a table (56 + 32) and a ~1 KiB string per host; the shared cluster not at all
    local facts = tonumber(line:match("facts ([%d.]+)"))
    assert.is_true(facts > 1.0 and facts < 1.2, line)
    assert.is_nil(line:find("cluster", 1, true), line)
    assert.matches("%(report%) 0%.1", line)
  end)
end)

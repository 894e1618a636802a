-- Spec of -w/--work-concurrency: what it bounds (the batches phase 22 starts workers in), as the Go tool's does.
local order = require "cargoship.phases.lib.order"
local support = require "unit.commands.support"

local function hosts(n, profile_of)
  local list = {}
  for i = 1, n do list[i] = { name = "w" .. i, config = { profile = profile_of and profile_of(i) or nil } } end
  return list
end

-- The batches as lists of names, e.g. { "w1,w2", "w3" }.
local function names(batches)
  local out = {}
  for i, b in ipairs(batches) do
    local n = {}
    for j, h in ipairs(b) do n[j] = h.name end
    out[i] = table.concat(n, ",")
  end
  return out
end

describe("-w/--work-concurrency", function()
  it("sizes the worker batches of hosts whose profile sets no concurrency", function()
    local ctx = { cluster = { profiles = {} }, options = { concurrency = 30, work_concurrency = "2" } }
    assert.same({ "w1,w2", "w3,w4", "w5" }, names(order.batches(ctx, hosts(5))))
    ctx.options.work_concurrency = "50%"
    assert.same({ "w1,w2", "w3,w4" }, names(order.batches(ctx, hosts(4))))
    ctx.options.work_concurrency = "0"
    assert.same({ "w1,w2,w3,w4,w5" }, names(order.batches(ctx, hosts(5))))
  end)

  it("gives way to a profile's own concurrency, and falls back to --concurrency when not given", function()
    local ctx = { cluster = { profiles = { big = { name = "big", concurrency = { kind = "fixed", value = 3 } } } },
      options = { concurrency = 1, work_concurrency = "2" } }
    local list = hosts(5, function(i) return i <= 3 and "big" or nil end)
    assert.same({ "w1,w2,w3", "w4,w5" }, names(order.batches(ctx, list)))
    ctx.options.work_concurrency = nil
    assert.same({ "w1,w2,w3", "w4", "w5" }, names(order.batches(ctx, list)))
  end)

  it("is said in apply --help: what it bounds, not 'recorded only'", function()
    local _, out = support.run { "apply", "--help" }
    local line = out:match("\n(%s+%-w, %-%-work%-concurrency[^\n]*)")
    assert.matches("batch size of the workers started together (phase 22)", line, 1, true)
    assert.is_nil(line:find("recorded only", 1, true))
  end)
end)

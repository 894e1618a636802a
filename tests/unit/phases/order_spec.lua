-- Specs for phases.lib.order: leader first and serial, or per-profile batches; a failure stops what comes after.
local order = require "cargoship.phases.lib.order"

local function host(name, profile) return { name = name, config = { profile = profile } } end

local function names(list)
  local out = {}
  for i, h in ipairs(list) do out[i] = h.name end
  return table.concat(out, ",")
end

-- A context with the sequential each the phases' specs use (support.ctx's contract).
local function ctx_of(leader, o)
  o = o or {}
  local ctx = { leader = leader, cluster = { profiles = o.profiles or {} }, options = { concurrency = o.concurrency },
                batches = {} }
  function ctx.each(self, list, fn)
    self.batches[#self.batches + 1] = names(list)
    local failures = {}
    for _, h in ipairs(list) do
      local ok, err = fn(h)
      if not ok then failures[#failures + 1] = { host = h, err = err } end
    end
    if #failures > 0 then return nil, failures end
    return true
  end
  return ctx
end

describe("order.leader_first", function()
  it("puts the leader first and keeps the others in order", function()
    local a, b, c = host("a"), host("b"), host("c")
    assert.equal("b,a,c", names(order.leader_first(ctx_of(b), { a, b, c })))
    assert.equal("a,b,c", names(order.leader_first(ctx_of(host("x")), { a, b, c })))
  end)
end)

describe("order.batches", function()
  it("groups by profile in order of first appearance, each cut to its concurrency", function()
    local hs = { host("w1", "small"), host("w2"), host("w3", "small"), host("w4", "small"), host("w5") }
    local ctx = ctx_of(nil, { profiles = { small = { concurrency = { kind = "fixed", value = 2 } } },
                              concurrency = 10 })
    local out = {}
    for i, b in ipairs(order.batches(ctx, hs)) do out[i] = names(b) end
    assert.same({ "w1,w3", "w4", "w2,w5" }, out)
  end)
end)

describe("order.run", function()
  it("serial: the leader first, one at a time, and nothing after the first failure", function()
    local a, b, c = host("a"), host("b"), host("c")
    local seen = {}
    local ok, err = order.run(ctx_of(b), { a, b, c }, "serial", function(h)
      seen[#seen + 1] = h.name
      if h == a then return nil, "a failed" end
      return true
    end)
    assert.same({ nil, "a failed" }, { ok, err })
    assert.same({ "b", "a" }, seen)
  end)

  it("batches: a batch at a time, stopping after a batch with a failure", function()
    local hs = { host("w1", "p"), host("w2", "p"), host("w3", "p") }
    local ctx = ctx_of(nil, { profiles = { p = { concurrency = { kind = "fixed", value = 1 } } } })
    local ok, failures = order.run(ctx, hs, "batches", function(h)
      if h.name == "w2" then return nil, "w2 failed" end
      return true
    end)
    assert.is_nil(ok)
    assert.equal("w2 failed", failures[1].err)
    assert.same({ "w1", "w2" }, ctx.batches)
    assert.is_true(order.run(ctx_of(nil), hs, "batches", function() return true end))
  end)

  it("refuses an order it does not know", function()
    assert.has_error(function() order.run(ctx_of(nil), {}, "random", function() end) end,
      'order.run: how is "serial" or "batches", not random')
  end)
end)

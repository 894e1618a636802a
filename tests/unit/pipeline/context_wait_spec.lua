-- Specs for what the context gives phases instead of the runtime: waiting, randomness, the shared leader listing.
local context = require "cargoship.pipeline.context"
local loop = require "cargoship.loop"
local support = require "unit.phases.support"

local function run(fn)
  local ok, a, b, c = loop.run(fn)
  assert(ok, a)
  return a, b, c
end

local function ctx_of(o)
  o = o or {}
  return context.new { cluster = { hosts = {} }, hosts = o.hosts or {}, random = o.random, run_id = "spec" }
end

describe("ctx:wait_until", function()
  it("returns check's values once it is done, checking every interval", function()
    local ctx, n = ctx_of(), 0
    local started = loop.now()
    local a, b = run(function()
      return ctx:wait_until(function()
        n = n + 1
        if n < 3 then return nil, "not yet " .. n end
        return "done", n
      end, { timeout = 5, interval = 0.02 })
    end)
    assert.same({ "done", 3 }, { a, b })
    assert.is_true(loop.now() - started >= 0.035, "two intervals were waited")
  end)

  it("checks at once, without sleeping, when the first answer is done", function()
    local ctx = ctx_of()
    local slept = false
    function ctx.sleep() slept = true end
    assert.equal(1, run(function() return ctx:wait_until(function() return 1 end, { timeout = 0 }) end))
    assert.is_false(slept)
  end)

  it("gives up after the timeout with the last why-not-yet", function()
    local ctx, n = ctx_of(), 0
    local ok, why, code = run(function()
      return ctx:wait_until(function() n = n + 1; return nil, "still " .. n end, { timeout = 0.05, interval = 0.01 })
    end)
    assert.is_nil(ok)
    assert.equal("still " .. n, why)
    assert.equal("timeout", code)
    assert.is_true(n >= 3 and n <= 10, "checked " .. n .. " times")
  end)

  it("lets check's error through", function()
    local ctx = ctx_of()
    local function boom() error("boom", 0) end
    assert.same({ false, "boom" }, { run(function() return pcall(ctx.wait_until, ctx, boom) end) })
  end)
end)

describe("ctx:random", function()
  it("takes the bytes from the function the context was given (specs pin it)", function()
    local asked
    local ctx = ctx_of { random = function(n) asked = n; return string.rep("\7", n) end }
    assert.equal(string.rep("\7", 16), ctx:random(16))
    assert.equal(16, asked)
  end)

  it("reads the CSPRNG otherwise", function()
    local ctx = ctx_of()
    local a, b = ctx:random(32), ctx:random(32)
    assert.equal(32, #a)
    assert.are_not.equal(a, b)
  end)
end)

describe("ctx:leader_nodes", function()
  it("lists the cluster's nodes with the engine's kubectl on the leader, parsed", function()
    local cmds = {}
    local leader = support.host({ name = "cp1" }, { function(cmd)
      cmds[#cmds + 1] = cmd
      return support.fixture("facts/kubectl-get-nodes.json"), "", 0
    end })
    local ctx = ctx_of { hosts = { leader } }
    ctx.engine = require("distros.engine").load("rke2"):new {}
    local nodes = run(function() return ctx:leader_nodes() end)
    assert.same({ ctx.engine:get_nodes() }, cmds)
    assert.is_true(#nodes > 0)
    assert.same(context.parse_nodes(support.fixture("facts/kubectl-get-nodes.json")), nodes)
  end)

  it("says why when kubectl fails", function()
    local leader = support.host({ name = "cp1" }, { function() return "", "connection refused\nmore", 1 end })
    local ctx = ctx_of { hosts = { leader } }
    ctx.engine = require("distros.engine").load("k3s"):new {}
    assert.same({ nil, "kubectl exited 1: connection refused" }, { run(function() return ctx:leader_nodes() end) })
  end)
end)

-- Specs of the context's phase API around action records and lost hosts: ctx:planned, ctx:apply, ctx:host_lost.
local action = require "cargoship.action"
local S = require "unit.pipeline.support"

describe("context", function()
  it("declares what phases hand on as fields, the leader being the first controller to begin with", function()
    local ctx = S.ctx { hosts = { { name = "w", role = "worker" }, { name = "c", role = "controller" } } }
    assert.are.equal(ctx.hosts[2], ctx.leader)
    assert.are.same({}, ctx.locks)
    assert.are.same({}, ctx.lock_conflicts)
    assert.is_false(ctx.engine_running)
    assert.is_nil(ctx.nodes)
  end)

  it("gives every host the command's transport", function()
    local t = {}
    local ctx = require("cargoship.pipeline.context").new { cluster = S.cluster(), transport = t }
    for _, h in ipairs(ctx.hosts) do assert.are.equal(t, h.transport) end
  end)

  it("ctx:apply executes the planned records of a host and records each outcome", function()
    local ctx = S.ctx()
    local h = ctx.hosts[1]
    local one, two = action.run { cmd = "echo one" }, action.run { cmd = "echo two" }
    ctx._planned, ctx._outcomes = { [h] = { one, two } }, {}
    assert.are.same({ one, two }, ctx:planned(h))
    assert.are.same({}, ctx:planned(ctx.hosts[2]))
    assert.is_true(ctx:apply(h, { two }))
    assert.are.equal("done", ctx._outcomes[h][two].status)
    assert.is_nil(ctx._outcomes[h][one], "only what was asked")
    assert.has_error(function() ctx:apply(h, { action.run { cmd = "echo three" } }) end)
  end)

  it("ctx:host_lost fails the host in the running phase once, and remembers it", function()
    local ctx = S.ctx()
    local h = ctx.hosts[2]
    ctx._failures = {}
    ctx:host_lost(h, "ctrl-2: lost the lock")
    ctx:host_lost(h, "ctrl-2: lost the lock again")
    assert.are.same({ { host = h, err = "ctrl-2: lost the lock" } }, ctx._failures)
    assert.are.equal("ctrl-2: lost the lock", ctx._lost[h])
    -- outside a phase it is only remembered: the runner fails the host in the next phase
    local other = S.ctx()
    other:host_lost(other.hosts[1], "gone")
    assert.are.equal("gone", other._lost[other.hosts[1]])
  end)

  it("after ctx:host_lost, ctx:each and ctx:apply send nothing to the host, except in the cleanup", function()
    local loop = require "cargoship.loop"
    local ctx = S.ctx()
    local h = ctx.hosts[2]
    local r = action.run { cmd = "echo one" }
    ctx._planned, ctx._outcomes = { [h] = { r } }, {}
    ctx:host_lost(h, "ctrl-2: lost the lock")
    local called = {}
    local ok, a, b = loop.run(function()
      return ctx:each(ctx.hosts, function(x)
        called[#called + 1] = x.name
        return x:probe("true")
      end)
    end)
    assert.is_true(ok)
    assert.is_nil(a)
    assert.are.same({ { host = h, err = "ctrl-2: lost the lock" } }, b)
    assert.are.same({ "ctrl-1", "worker-1" }, called)
    assert.are.same({ nil, "ctrl-2: lost the lock" }, { ctx:apply(h) })
    assert.are.same({}, h.conn.calls)
    -- the runner's cleanup (a lock that went silent may still be ours) still reaches it
    ctx._cleanup = true
    assert.is_true((loop.run(function() return assert(ctx:each({ h }, function(x) return x:probe("true") end)) end)))
    assert.are.equal(1, #h.conn.calls)
  end)
end)

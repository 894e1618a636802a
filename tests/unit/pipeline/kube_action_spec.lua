-- Specs of a kubectl operation on the leader as an action: in the plan, refused in a dry run, a write in the report.
local action = require "cargoship.action"
local cjson = require "cjson"
local report = require "cargoship.pipeline.report"
local S = require "unit.pipeline.support"

local DRAIN = "env KUBECONFIG='/etc/kubernetes/admin.conf' 'kubectl' 'drain' 'worker-1' '--ignore-daemonsets'"

-- A phase whose assess plans one drain of worker-1 on the leader (ctrl-1) and nothing elsewhere;
-- without run, so the runner executes the records through host:apply.
local function drainer()
  local p = S.phase({}, "drain_worker", {
    assess = function(_, h)
      if h.name ~= "ctrl-1" then return {} end
      return { action.kube { verb = "drain", node = "worker-1", cmd = DRAIN, timeout = 400 } }
    end,
  })
  p.run = nil
  return p
end

local function commands(h)
  local out = {}
  for _, c in ipairs(h.conn.calls) do out[#out + 1] = c.cmd end
  return out
end

describe("a kube action on the leader", function()
  it("shows in the plan with its verb and node, on the leader only, and sends nothing", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, { drainer() })
    local p = rep.phases[1]
    assert.are.equal("would_act", p.verdict)
    assert.are.same({ { kind = "kube", say = "kubectl drain node worker-1", verb = "drain", node = "worker-1",
      cmd = DRAIN } }, S.host_of(p, "ctrl-1").actions)
    assert.are.same({}, S.host_of(p, "worker-1").actions)
    assert.matches("kubectl drain node worker%-1", report.text(rep), 1)
    local doc = cjson.decode(report.json(rep))
    local a = doc.phases[1].hosts[1].actions[1]
    assert.are.same({ "kube", "drain", "worker-1", cjson.null }, { a.kind, a.verb, a.node, a.outcome })
    for _, h in ipairs(ctx.hosts) do
      assert.are.same({}, commands(h))
      assert.are.equal(0, h.writes_sent)
    end
  end)

  it("is refused in a dry run: a phase that executes it while it should only report fails there", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, { S.phase({}, "sneaky", {
      dry_run = "read_only",
      run = function(c)
        local leader = c.hosts[1]
        return leader:apply({ action.kube { verb = "drain", node = "worker-1", cmd = DRAIN } })
      end,
    }) })
    assert.are.equal("failed", rep.phases[1].verdict)
    assert.are.equal("dry run: refused to apply 1 action", S.host_of(rep.phases[1], "ctrl-1").error)
    assert.are.same({}, commands(ctx.hosts[1]))
  end)

  it("runs on the leader in the real run and counts there as a write", function()
    local ctx = S.ctx()
    local rep = S.run(ctx, { drainer() })
    local p = rep.phases[1]
    assert.are.equal("ran", p.verdict)
    local leader = S.host_of(p, "ctrl-1")
    assert.are.equal("done", leader.actions[1].outcome)
    assert.are.equal(1, leader.writes)
    assert.are.equal(0, S.host_of(p, "worker-1").writes)
    assert.are.equal(1, p.writes)
    assert.are.same({ DRAIN }, commands(ctx.hosts[1]))
    assert.are.same({}, commands(ctx.hosts[3]))
    assert.are.equal(400, ctx.hosts[1].conn.calls[1].opts.timeout)
    local doc = cjson.decode(report.json(rep))
    assert.are.same({ 1, 1, "done" }, { doc.phases[1].writes, doc.phases[1].hosts[1].writes,
      doc.phases[1].hosts[1].actions[1].outcome })
  end)
end)

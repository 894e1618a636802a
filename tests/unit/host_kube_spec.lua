-- Specs of host:apply with kube actions: kubectl on the leader through the write gate, apply retried, drain explained.
local action = require "cargoship.action"
local host_mod = require "cargoship.host"
local loop = require "cargoship.loop"

-- A connection answering each exec from `script` in turn ({out, err, code}), recording the commands.
local function scripted(script)
  local c = { sent = {}, opts = {} }
  function c.exec(_, cmd, opts)
    c.sent[#c.sent + 1] = cmd
    c.opts[#c.opts + 1] = opts
    local r = table.remove(script, 1) or { "", "", 0 }
    return r[1], r[2], r[3]
  end
  return c
end

local function new_host(dry_run, script)
  local h = host_mod.new { config = { index = 1, name = "cp1", role = "controller" }, dry_run = dry_run }
  h:attach(scripted(script or {}))
  return h
end

local function in_loop(fn)
  local ok, a, b = loop.run(fn)
  assert(ok, a)
  return a, b
end

-- What Debian's kubectl (1.20) printed when a PodDisruptionBudget blocked a drain until --timeout
-- (tests/lab/standin: test_drain_evicts_through_budgets), retries cut to one round.
local BLOCKED_OUT = "node/w1 cordoned\nevicting pod demo/web-b0aea00558-mideo\nevicting pod demo/web-b0aea00558-1pkhc\n"
local BLOCKED_ERR = assert(require("unit.files").read("tests/fixtures/kubectl/drain_blocked.stderr"))
local BUDGET = "Cannot evict pod as it would violate the pod's disruption budget."

describe("host:apply with kube actions", function()
  local interval
  before_each(function() interval = host_mod.KUBE_RETRY_INTERVAL; host_mod.KUBE_RETRY_INTERVAL = 0 end)
  after_each(function() host_mod.KUBE_RETRY_INTERVAL = interval end)

  it("runs the engine's command on the host it is applied to, under sudo, and counts it as a write", function()
    local h = new_host(false)
    local a = action.kube { verb = "cordon", node = "w1", cmd = "kubectl cordon 'w1'" }
    local outcomes, err = in_loop(function() return h:apply({ a }) end)
    assert.is_nil(err)
    assert.are.same({ { status = "done" } }, outcomes)
    assert.are.same({ "kubectl cordon 'w1'" }, h.conn.sent)
    assert.is_true(h.conn.opts[1].sudo)
    assert.are.equal(1, h.writes_sent)
    assert.are.equal(0, h.probes_sent)
  end)

  it("is refused in a dry run before the command reaches the leader", function()
    local h = new_host(true)
    local ok, err = pcall(h.apply, h, { action.kube { verb = "drain", node = "w1", cmd = "kubectl drain w1" } })
    assert.is_false(ok)
    assert.matches("^cp1: dry run: refused to apply 1 action", err)
    assert.are.same({}, h.conn.sent)
    assert.are.equal(0, h.writes_sent)
  end)

  it("retries apply while the API settles, and gives up naming the manifest and kubectl's last line", function()
    local refused = { "", "The connection to the server 10.0.0.1:6443 was refused\n", 1 }
    local h = new_host(false, { refused, refused, { "namespace/x created\n", "", 0 } })
    local a = action.kube { verb = "apply", path = "/m/cni.yaml", node = "cp1", cmd = "kubectl apply -f /m/cni.yaml" }
    local outcomes = in_loop(function() return h:apply({ a }) end)
    assert.are.same({ { status = "done" } }, outcomes)
    assert.are.equal(3, #h.conn.sent)

    local h2 = new_host(false, { refused, refused, refused })
    local b = action.kube { verb = "apply", path = "/m/cni.yaml", node = "cp1", cmd = "kubectl apply", retries = 3 }
    local _, err = in_loop(function() return h2:apply({ b }) end)
    assert.are.equal("cp1: kubectl apply -f /m/cni.yaml failed (exit 1): The connection to the server"
      .. " 10.0.0.1:6443 was refused", err)
    assert.are.equal(3, #h2.conn.sent)
  end)

  it("does not retry a drain, and its failure names the node and the pod that blocked it", function()
    local h = new_host(false, { { BLOCKED_OUT, BLOCKED_ERR, 1 } })
    local a = action.kube { verb = "drain", node = "w1", cmd = "kubectl drain w1" }
    local outcomes, err = in_loop(function() return h:apply({ a, action.kube { verb = "uncordon", node = "w1",
      cmd = "kubectl uncordon w1" } }) end)
    assert.are.same({ "failed", "not_run" }, { outcomes[1].status, outcomes[2].status })
    assert.are.equal(1, #h.conn.sent)
    assert.are.equal("cp1: drain node w1 failed: pods demo/web-b0aea00558-mideo, demo/web-b0aea00558-1pkhc could"
      .. " not be evicted: " .. BUDGET .. ' (kubectl: error when evicting pods/"web-b0aea00558-1pkhc" -n "demo":'
      .. " global timeout reached: 12s)", err)
  end)

  it("reads the blocking pods out of kubectl drain's output", function()
    assert.are.same({ { "demo/web-b0aea00558-mideo", "demo/web-b0aea00558-1pkhc" }, BUDGET },
      { host_mod.drain_blockers(BLOCKED_ERR) })
    local pods, why = host_mod.drain_blockers('error when evicting pods/"a" -n "x": global timeout reached: 5s\n'
      .. 'error when evicting pods/"b" -n "y": global timeout reached: 5s\n')
    assert.are.same({ "x/a", "y/b" }, pods)
    assert.is_nil(why)
    assert.are.same({}, (host_mod.drain_blockers("error: node \"w9\" not found")))
  end)
end)

-- Specs of cargoship.facts.kube: one `kubectl get nodes -o json` read into node records (fixtures).
local kube = require "cargoship.facts.kube"
local files = require "unit.files"

local function fixture(name) return assert(files.read("tests/fixtures/facts/" .. name)) end

describe("facts.kube", function()
  it("reads names, addresses, kubelet version, labels, role and Ready with its heartbeat", function()
    local nodes, by_name = kube.parse(fixture("kubectl-get-nodes.json"))
    assert.are.equal(6, #nodes)
    local w2 = by_name.w2
    assert.are.same({ "10.250.0.22", "fd00:250::22", "w2" }, w2.addresses)
    assert.are.same({ "10.250.0.22", "fd00:250::22" }, w2.by_type.InternalIP)
    assert.are.same({ "v1.35.4+rke2r1", "worker", true, "True" },
      { w2.kubelet_version, w2.role, w2.ready, w2.ready_status })
    assert.are.equal("controller", by_name.cp1.role)
    assert.are.equal("true", by_name.cp1.labels["node-role.kubernetes.io/etcd"])
    assert.are.same({ false, "Unknown" }, { by_name["old-w9"].ready, by_name["old-w9"].ready_status })
    assert.is_false(by_name.cp1.unschedulable)
    assert.are.same({}, by_name.cp1.taints)
  end)

  it("reads taints, a cordon, an unknown Ready and a node that has reported nothing yet", function()
    local nodes, by_name = kube.parse(fixture("kubectl-get-nodes-cordoned.json"))
    assert.are.same({ "cp1", "w1", "w2" }, { nodes[1].name, nodes[2].name, nodes[3].name })
    assert.are.same({ { key = "node-role.kubernetes.io/control-plane", effect = "NoSchedule" } }, by_name.cp1.taints)
    assert.are.same({ true, "2026-11-30T10:40:02Z", "controller" },
      { by_name.cp1.ready, by_name.cp1.heartbeat, by_name.cp1.role })
    local w1 = by_name.w1
    assert.is_true(w1.unschedulable)
    assert.are.same({ key = "gpu", value = "yes", effect = "NoSchedule" }, w1.taints[2])
    assert.are.same({ false, "Unknown", "2026-11-30T10:39:58Z", "v1.35.2", "blue" },
      { w1.ready, w1.ready_status, w1.heartbeat, w1.kubelet_version, w1.labels.pool })
    assert.are.same({ name = "w2", addresses = {}, by_type = {}, labels = {}, taints = {}, unschedulable = false,
      ready = false, role = "worker" }, by_name.w2)
  end)

  it("refuses what is not a node list", function()
    assert.are.same({ nil, "kubectl printed no node list" },
      { kube.parse("error: the server doesn't have a resource") })
    assert.are.same({ nil, "kubectl printed no node list" }, { kube.parse('{"kind": "Status"}') })
  end)

  it("lists through the engine's command on the leader, a read", function()
    local sent
    local leader = { name = "cp1",
      probe = function(_, cmd) sent = cmd return fixture("kubectl-get-nodes.json"), "", 0 end }
    local engine = { get_nodes = function() return "kubectl get nodes -o json" end }
    local nodes = kube.gather(leader, engine)
    assert.are.equal(6, #nodes)
    assert.are.equal("kubectl get nodes -o json", sent)
    leader.probe = function() return "", "The connection to the server was refused\n", 1 end
    assert.are.same({ nil, "cp1: kubectl get nodes failed (exit 1): The connection to the server was refused" },
      { kube.gather(leader, engine) })
  end)
end)

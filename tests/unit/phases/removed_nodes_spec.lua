-- Specs for "Checking for nodes no longer in the config": `kubectl get nodes -o json` in, unmanaged nodes out.
local phase = require "cargoship.phases.removed_nodes"
local context = require "cargoship.pipeline.context"
local engine = require "distros.engine"
local support = require "unit.phases.support"

local NODES = support.fixture("facts/kubectl-get-nodes.json")

-- kubectl answers: a function(cmd, opts) -> out, err, code for single commands
local function leader_answers(out, err, code)
  return { function(cmd, opts)
    assert.is_true(opts.sudo)
    assert.equal("env KUBECONFIG='/etc/rancher/rke2/rke2.yaml' '/var/lib/rancher/rke2/bin/kubectl' 'get' 'nodes'"
      .. " '-o' 'json'", cmd)
    return out, err or "", code or 0
  end }
end

local function host(name, facts, cfg, answers)
  cfg = cfg or {}
  cfg.name = name
  local h = support.host(cfg, answers or {})
  for k, v in pairs(facts) do h.facts[k] = v end
  return h
end

-- The fixture's cluster: cp1, cp2, w1.example.internal, w2 (with an IPv6 address), and the
-- gone old-cp3 and old-w9. Each host matches in a different way.
local function cluster(answers)
  return {
    -- by node name against the machine's hostname
    host("cp1", { hostname = "cp1", node_name = "cp1", engine = { type = "rke2", running = true } },
      { role = "controller" }, answers),
    -- by the private address only (the machine calls itself something else)
    host("cp2", { hostname = "ip-10-250-0-12", private_address = "10.250.0.12" }, { role = "controller" }),
    -- by the short form of the node's FQDN, case-insensitively
    host("w1", { hostname = "W1" }, { role = "worker" }),
    -- by an IPv6 node address written differently
    host("w2", { hostname = "worker-two", addresses = { "FD00:250:0::22" } }, { role = "worker" }),
  }
end

local function ctx_for(hosts, options)
  return support.ctx(hosts, { options = options,
    fields = { engine_running = true, leader = hosts[1], engine_type = "rke2", engine = engine.load("rke2") } })
end

describe("phase removed_nodes", function()
  it("parses a real node list with roles", function()
    local nodes = context.parse_nodes(NODES)
    assert.equal(6, #nodes)
    assert.same({ name = "cp1", addresses = { "10.250.0.11", "cp1" }, role = "controller", ready = "True",
      heartbeat = "2025-11-03T10:01:12Z" }, nodes[1])
    assert.same({ name = "w2", addresses = { "10.250.0.22", "fd00:250::22", "w2" }, role = "worker", ready = "True",
      heartbeat = "2025-11-03T10:01:12Z" }, nodes[4])
    assert.equal("controller", nodes[5].role)
  end)

  it("reads nulls and values of the wrong type as absent (found by fuzz/kube)", function()
    local nodes = context.parse_nodes('{"items":[1,null,{"metadata":null,"status":{"addresses":[null,{"address":7},'
      .. '{"address":"10.0.0.9"}]}},{"metadata":{"name":"n1"},"status":7}]}')
    assert.same({ { name = "n1", addresses = {}, role = "worker" } }, nodes)
  end)

  it("stops the apply listing each node no host matches, with its role", function()
    local hosts = cluster(leader_answers(NODES))
    local ctx = ctx_for(hosts)
    assert.same({ hosts[1] }, phase.prepare(ctx))
    local ok, err = phase.run(ctx, phase.prepare(ctx))
    assert.is_nil(ok)
    assert.equal("the cluster has 2 nodes that no host in the config manages:\n"
      .. "  old-cp3 (controller, 10.250.0.13, old-cp3)\n"
      .. "  old-w9 (worker, 10.250.0.29, old-w9)\n"
      .. "apply never removes a node: put the host back in the config, remove it with reset, or pass"
      .. " --allow-unmanaged-nodes to go on", err)
    -- each host learnt the name its node has in the cluster
    assert.same({ "cp1", "cp2", "w1.example.internal", "w2" },
      { hosts[1].facts.node, hosts[2].facts.node, hosts[3].facts.node, hosts[4].facts.node })
    assert.equal(1, hosts[1].probes_sent)
    assert.equal(0, hosts[1].writes_sent)
  end)

  it("matches by config hostname and connection address too", function()
    local nodes = context.parse_nodes(NODES)
    local hosts = {
      host("a", {}, { hostname = "CP1" }),
      host("b", {}, { connection = { kind = "ssh", address = "10.250.0.12" } }),
      host("c", { fqdn = "w1.example.internal" }),
      host("d", { private_ipv6 = "fd00:250::22" }),
      host("e", { node_name = "old-cp3" }),
      host("f", { private_ipv4 = "10.250.0.29" }),
    }
    assert.same({}, phase.match(nodes, hosts))
  end)

  it("only warns with --allow-unmanaged-nodes", function()
    local hosts = cluster(leader_answers(NODES))
    local ctx, log = ctx_for(hosts, { allow_unmanaged_nodes = true })
    local r = phase.run(ctx, phase.prepare(ctx))
    assert.same({ summary = "2 unmanaged node(s), allowed" }, r)
    assert.matches("warning: the cluster has 2 nodes", log(), 1, true)
    assert.equal(6, #ctx.nodes)
  end)

  it("passes when every node is managed", function()
    local hosts = cluster(leader_answers(NODES))
    hosts[#hosts + 1] = host("cp3", { private_address = "10.250.0.13" })
    hosts[#hosts + 1] = host("w9", { hostname = "old-w9" })
    local ctx = ctx_for(hosts)
    assert.same({ summary = "all 6 nodes are in the config" }, phase.run(ctx, phase.prepare(ctx)))
  end)

  it("only warns when the nodes cannot be listed", function()
    local hosts = cluster(leader_answers("", "The connection to the server 127.0.0.1:6443 was refused\n", 1))
    local ctx, log = ctx_for(hosts)
    local r = phase.run(ctx, phase.prepare(ctx))
    assert.same({ summary = "could not list the cluster's nodes on cp1: kubectl exited 1: The connection to the"
      .. " server 127.0.0.1:6443 was refused" }, r)
    assert.matches("warning: could not list", log(), 1, true)
    hosts = cluster(leader_answers("not json"))
    ctx = ctx_for(hosts)
    assert.matches("kubectl printed no node list", phase.run(ctx, phase.prepare(ctx)).summary)
  end)

  it("has nothing to check when no controller service runs, and says so", function()
    local hosts = cluster({})
    local ctx, log = support.ctx(hosts, { fields = { engine_running = false, leader = hosts[1] } })
    local work = phase.prepare(ctx)
    assert.same({}, work)
    assert.same({ summary = "no controller service is running: no cluster to compare, nothing to check" },
      phase.run(ctx, work))
    assert.matches("no controller service is running", log(), 1, true)
    assert.equal(0, hosts[1].probes_sent)
  end)
end)

-- Specs for "Gather host facts": hostname, private address, clock and firewall in one read; profile merge.
local phase = require "cargoship.phases.gather_facts"
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"

local function answers(set, o)
  o = o or {}
  return {
    hostname = o.hostname or "h1\n",
    fqdn = o.fqdn or { out = "", code = 1 },
    addr = support.fixture("facts/" .. set .. "-addr.txt"),
    -- one `ip -o route show table all`: both families and the local table, as a host prints it
    routes = support.fixture("facts/" .. set .. "-route4.txt") .. "\n"
      .. "local 127.0.0.1 dev lo table local proto kernel scope host src 127.0.0.1\n"
      .. support.fixture("facts/" .. set .. "-route6.txt"),
    clock = o.clock or "1762160000.250000000\n",
    firewall = o.firewall or "",
  }
end

local function host(cfg, a)
  local h = support.host(cfg, a)
  h.os = os_registry.by_name(cfg.os_id or "debian"):new { service_manager = "systemd" }
  return h
end

describe("phase gather_facts", function()
  it("records hostname, node name, private address and why, in one round trip", function()
    local h = host({ name = "h1", connection = { kind = "ssh", address = "10.250.0.11" } }, answers("lab", {
      hostname = "H1.lab.internal\n", fqdn = "H1.lab.internal\n" }))
    local ctx, log = support.ctx({ h })
    assert.is_true(phase.run(ctx, phase.prepare(ctx)))
    local f = h.facts
    assert.equal("H1", f.hostname)
    assert.equal("H1.lab.internal", f.fqdn)
    assert.equal("h1", f.node_name)
    assert.equal("eth0", f.private_interface)
    assert.equal("10.250.0.11", f.private_address)
    assert.equal("10.250.0.11", f.private_ipv4)
    assert.same({ "10.250.0.11" }, f.addresses)
    assert.equal(1, h.probes_sent)
    assert.equal(0, h.writes_sent)
    assert.is_false(h.conn.commands[1].sudo)
    assert.matches("h1 | private address 10.250.0.11 on eth0: default route device, no global IPv4 on it other than"
      .. " the connection address, using that", log(), 1, true)
  end)

  it("takes the config hostname as the node name and honours privateInterface / privateAddress", function()
    local h1 = host({ name = "a", hostname = "cp-1", private_interface = "eth1",
                      connection = { kind = "ssh", address = "203.0.113.10" } }, answers("multihomed"))
    local h2 = host({ name = "b", private_address = "fd00:1::5",
                      connection = { kind = "ssh", address = "10.1.0.5" } }, answers("dualstack"))
    local ctx = support.ctx({ h1, h2 })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.equal("cp-1", h1.facts.node_name)
    assert.equal("h1", h1.facts.hostname)
    assert.equal("10.20.0.11", h1.facts.private_address)
    assert.equal("fd00:1::5", h2.facts.private_address)
    assert.equal("ens3", h2.facts.private_interface)
  end)

  it("records the host clock against the local midpoint of the round trip", function()
    local h = host({ name = "h1" }, answers("lab"))
    local t = 1762159990.0
    local ctx = support.ctx({ h }, { clock = function() t = t + 0.5 return t end })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.same({ remote = 1762160000.25, local_mid = 1762159990.75, rtt = 0.5 }, h.facts.clock)
  end)

  it("reads the firewall front ends and decides the backend by the OS's preference", function()
    local h = host({ name = "h1", os_id = "rocky" }, answers("lab", {
      firewall = "firewalld=running\nfirewalld_version=1.3.4\nzone=public\nzone=trusted\nnft=present\n" }))
    local ctx = support.ctx({ h })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.equal("firewalld", h.facts.firewall.backend)
    assert.same({ "public", "trusted" }, h.facts.firewall.zones)
  end)

  it("merges the host's profile into host.config and keeps the entry as written", function()
    local rule = { key = "node-exporter", name = "node-exporter", action = "allow", direction = "in" }
    local cluster = { profiles = { control = { name = "control",
      engine = { labels = { tier = "cp" }, taints = { "CriticalAddonsOnly=true:NoExecute" } },
      host = { ports = { { port = "6443", protocol = "tcp" } }, policy = {}, firewall = { rules = { rule } } } } } }
    local h = host({ name = "h1", profile = "control" }, answers("lab"))
    local declared = h.config
    local ctx = support.ctx({ h }, { cluster = cluster })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.equal(declared, h.config_declared)
    assert.same({ tier = "cp" }, h.config.engine.labels)
    assert.same({ "CriticalAddonsOnly=true:NoExecute" }, h.config.engine.taints)
    assert.equal("6443", h.config.host.ports[1].port)
    assert.equal(rule, h.config.host.firewall.rules[1])
    assert.same({}, declared.engine.labels)
    -- a second run merges from the entry as written, not from the merged one
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.equal(1, #h.config.host.firewall.rules)
  end)

  it("fails a host without iproute2 output, or with nothing to choose from", function()
    local a = answers("lab")
    a.addr = { out = "", code = 127 }
    local h1 = host({ name = "h1" }, a)
    local b = answers("lab")
    b.routes = ""
    local h2 = host({ name = "h2" }, b)
    local ctx = support.ctx({ h1, h2 })
    local ok, failures = phase.run(ctx, ctx.hosts)
    assert.is_nil(ok)
    assert.same({ "h1: h1: `ip -o addr show` printed nothing: is iproute2 installed?",
                  "h2: h2: cannot find a private interface: no route into a private range and no default route;"
                    .. " set privateInterface or privateAddress for this host" }, support.errors(failures))
  end)
end)

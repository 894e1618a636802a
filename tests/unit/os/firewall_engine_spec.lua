-- Specs that the firewall takes the engine's peer ports and cluster CIDRs as data: a fourth engine brings its own.
local engine = require "distros.engine"
local firewall = require "cargoship.os.firewall"
local phase = require "cargoship.phases.update_firewall"
local support = require "unit.phases.support"

-- A fourth engine: one new module's worth of fields, nothing in the OS layer knows it.
local Fourth = engine.Engine:extend {
  name = "fourth",
  peer_ports = { tcp = { "7001", "7100-7102" }, udp = { "7200" } },
}
function Fourth:cluster_cidrs(section)
  local conf = (section or (self.package and self.package.engine) or {}).config or {}
  return { conf.pods or "172.30.0.0/16", "fd0f::/56" }
end

local function run_ctx(o)
  local hosts = { support.host { name = "cp1", address = "192.0.2.1" },
                  support.host { name = "cp2", address = "192.0.2.2" } }
  hosts[1].facts.private_address = "10.9.0.11"
  hosts[2].facts.private_address = "10.9.0.12"
  local ctx = support.ctx(hosts, { fields = o })
  return ctx, hosts[1]
end

local function content_of(acts, path)
  for _, a in ipairs(acts) do
    if a.kind == "write" and a.path == path then return a.content end
  end
end

describe("firewall: the engine's ports and CIDRs come from the engine given", function()
  it("a fourth engine's peer ports and CIDRs reach the plan", function()
    local ctx, host = run_ctx { engine = Fourth:new {} }
    local plan = phase.plan(ctx, host)
    assert.same({ tcp = { "7001", "7100-7102" }, udp = { "7200" } }, plan.peer_ports)
    assert.same({ "10.9.0.12", "172.30.0.0/16", "fd0f::/56" }, plan.trust)
  end)

  it("the cluster CIDRs follow the package's engine section", function()
    local ctx, host = run_ctx { engine = Fourth:new {}, distro = { engine = { config = { pods = "172.16.0.0/12" } } } }
    assert.same({ "10.9.0.12", "172.16.0.0/12", "fd0f::/56" }, phase.plan(ctx, host).trust)
  end)

  it("nftables drops the fourth engine's ports for non-peers and names no other engine's", function()
    local ctx, host = run_ctx { engine = Fourth:new {} }
    local acts = assert(firewall.actions("nftables", phase.plan(ctx, host)))
    local text = assert(content_of(acts, firewall.NFT_FILE))
    local tag = ' drop comment "cargoship: engine ports, peers only"\n'
    assert.matches("    tcp dport { 7001, 7100-7102 }" .. tag, text, 1, true)
    assert.matches("    udp dport { 7200 }" .. tag, text, 1, true)
    assert.matches("elements = { 10.9.0.12, 172.30.0.0/16 }", text, 1, true)
    assert.matches("elements = { fd0f::/56 }", text, 1, true)
    for _, p in ipairs({ "6443", "9345", "10250", "8472" }) do
      assert.is_nil(text:find(p, 1, true), "port " .. p .. " is another engine's")
    end
  end)

  it("firewalld and ufw trust the fourth engine's CIDRs", function()
    local ctx, host = run_ctx { engine = Fourth:new {} }
    local plan = phase.plan(ctx, host)
    local fd = assert(firewall.actions("firewalld", plan))
    local sets = "/etc/firewalld/ipsets/"
    assert.matches("<entry>172.30.0.0/16</entry>", content_of(fd, sets .. "cargoship-trusted.xml"), 1, true)
    assert.matches("<entry>fd0f::/56</entry>", content_of(fd, sets .. "cargoship-trusted6.xml"), 1, true)
    local uf = assert(firewall.actions("ufw", plan))
    assert.equal("allow from 10.9.0.12\nallow from 172.30.0.0/16\nallow from fd0f::/56\n",
      content_of(uf, firewall.UFW_RECORD))
  end)

  it("an engine that declares no peer ports and no CIDRs gets no drop rule and trusts only peers", function()
    local ctx, host = run_ctx { engine = engine.Engine:extend { name = "bare" }:new {} }
    local plan = phase.plan(ctx, host)
    assert.same({ "10.9.0.12" }, plan.trust)
    local text = assert(firewall.nftables_ruleset(plan))
    assert.is_nil(text:find("drop", 1, true))
  end)

  it("with no engine known, every engine's peer ports stay peers-only, merged", function()
    local ctx, host = run_ctx {}
    local plan = phase.plan(ctx, host)
    assert.same({ "10.9.0.12" }, plan.trust)
    local want = { tcp = {}, udp = {} }
    for _, t in ipairs(engine.TYPES) do
      for proto, list in pairs(assert(engine.load(t)).peer_ports) do
        for _, p in ipairs(list) do want[proto][p] = true end
      end
    end
    -- every port of every engine is held by the merged set (a range may hold a narrower one)
    for proto, set in pairs(want) do
      for p in pairs(set) do
        local lo, hi = p:match("^(%d+)%-?(%d*)$")
        lo, hi = tonumber(lo), tonumber(hi) or tonumber(lo)
        local held = false
        for _, q in ipairs(plan.peer_ports[proto]) do
          local qlo, qhi = q:match("^(%d+)%-?(%d*)$")
          qlo, qhi = tonumber(qlo), tonumber(qhi) or tonumber(qlo)
          if qlo <= lo and hi <= qhi then held = true end
        end
        assert.is_true(held, proto .. " " .. p .. " is in the merged set")
      end
    end
  end)
end)

describe("firewall.merge_ports", function()
  it("keeps each port once, drops what a wider range holds, orders by first port", function()
    assert.same({ tcp = { "179", "2379-2381", "5001", "6443", "10250" }, udp = { "4789", "8472", "51820-51821" } },
      firewall.merge_ports {
        { tcp = { "6443", "2379-2380", "10250" }, udp = { "8472", "51820-51821" } },
        { tcp = { "179", "2379-2381", "6443" }, udp = { "4789", "8472" } },
        { tcp = { "5001", "2379-2380" } },
      })
  end)
end)

describe("engine cluster CIDRs", function()
  local function cidrs(t, config) return assert(engine.load(t)):cluster_cidrs({ config = config }) end
  it("rancher family: cluster-cidr and service-cidr, lists or comma-separated, else 10.42/10.43", function()
    for _, t in ipairs({ "rke2", "k3s" }) do
      assert.same({ "10.42.0.0/16", "10.43.0.0/16" }, cidrs(t, {}))
      assert.same({ "10.50.0.0/16", "fd01::/48", "10.51.0.0/16" },
        cidrs(t, { ["cluster-cidr"] = "10.50.0.0/16, fd01::/48", ["service-cidr"] = { "10.51.0.0/16" } }))
    end
  end)
  it("upstream: kubeadm networking.podSubnet (no default) and serviceSubnet (else 10.96.0.0/12)", function()
    assert.same({ "10.96.0.0/12" }, cidrs("upstream", {}))
    assert.same({ "10.60.0.0/16", "10.61.0.0/16" },
      cidrs("upstream", { networking = { podSubnet = "10.60.0.0/16", serviceSubnet = "10.61.0.0/16" } }))
  end)
  it("an engine instance reads its own package's engine section", function()
    local e = assert(engine.for_package { type = "k3s", engine = { config = { ["cluster-cidr"] = "10.70.0.0/16" } } })
    assert.same({ "10.70.0.0/16", "10.43.0.0/16" }, e:cluster_cidrs())
  end)
end)

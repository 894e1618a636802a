-- Specs for the firewall front-end actions: a node's plan (trusted addresses, open ports) in, action records out.
local firewall = require "cargoship.os.firewall"
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"

local PLAN = { trust = { "10.0.0.2", "10.42.0.0/16", "fd00::/64" },
               ports = { { port = "6443", protocol = "tcp" }, { port = "30000-32767" },
                         { port = "8472", protocol = "udp" } } }

local function kinds(acts)
  local k = {}
  for i, a in ipairs(acts) do k[i] = a.kind end
  return k
end

describe("firewall actions: firewalld", function()
  it("trusts ipsets in zone trusted and opens the ports as a service in public", function()
    local acts = assert(os_registry.by_name("rocky"):new({}):firewall_actions("firewalld", PLAN))
    assert.same({ "write", "write", "write", "run", "run", "run", "run", "run" }, kinds(acts))
    assert.equal("/etc/firewalld/ipsets/cargoship-trusted.xml", acts[1].path)
    assert.equal('<?xml version="1.0" encoding="utf-8"?>\n<ipset type="hash:net">\n  <short>cargoship-trusted</short>\n'
      .. "  <entry>10.0.0.2</entry>\n  <entry>10.42.0.0/16</entry>\n</ipset>\n", acts[1].content)
    assert.matches('<option name="family" value="inet6"/>\n  <entry>fd00::/64</entry>', acts[2].content, 1, true)
    assert.equal("/etc/firewalld/services/distro-exposed-ports.xml", acts[3].path)
    assert.matches('<port protocol="tcp" port="30000-32767"/>', acts[3].content, 1, true)
    assert.matches('<port protocol="udp" port="8472"/>', acts[3].content, 1, true)
    assert.equal("firewall-cmd --reload", acts[4].cmd)
    assert.equal("firewall-cmd --permanent --zone=trusted --add-source='ipset:cargoship-trusted'", acts[5].cmd)
    assert.equal("firewall-cmd --permanent --zone=trusted --add-source='ipset:cargoship-trusted6'", acts[6].cmd)
    assert.equal("firewall-cmd --permanent --zone=public --add-service='distro-exposed-ports'", acts[7].cmd)
    assert.equal("firewall-cmd --reload", acts[8].cmd)
  end)
  it("writes no empty ipset and no service without ports", function()
    local acts = assert(firewall.actions("firewalld", { trust = { "10.0.0.2" } }))
    assert.same({ "write", "run", "run", "run" }, kinds(acts))
  end)
end)

describe("firewall actions: ufw", function()
  it("adds tagged rules and the app profile, records the set, never enables ufw", function()
    local acts = assert(firewall.actions("ufw", PLAN))
    assert.same({ "write", "run", "run", "run", "run", "run", "write" }, kinds(acts))
    assert.equal("/etc/ufw/applications.d/cargoship", acts[1].path)
    assert.matches("\nports=6443/tcp|30000:32767/tcp|8472/udp\n", acts[1].content, 1, true)
    assert.equal("ufw app update 'cargoship-ports'", acts[2].cmd)
    assert.equal("'ufw' 'allow' 'from' '10.0.0.2' 'comment' 'cargoship:trust:10.0.0.2'", acts[3].cmd)
    assert.equal("'ufw' 'allow' 'cargoship-ports' 'comment' 'cargoship:ports'", acts[6].cmd)
    assert.same({ "/var/lib/cargoship/ufw.rules",
                  "allow from 10.0.0.2\nallow from 10.42.0.0/16\nallow from fd00::/64\nallow cargoship-ports\n" },
      { acts[7].path, acts[7].content })
    for _, a in ipairs(acts) do assert.is_nil((a.cmd or ""):find("enable", 1, true)) end
  end)
  it("deletes the rules a previous run recorded that the plan no longer has", function()
    local acts = assert(firewall.actions("ufw", { trust = { "10.0.0.2" },
      previous = "allow from 10.0.0.2\nallow from 10.0.0.9\nallow cargoship-ports\n" }))
    assert.equal("'ufw' 'delete' 'allow' 'from' '10.0.0.9'", acts[1].cmd)
    assert.equal("'ufw' 'delete' 'allow' 'cargoship-ports'", acts[2].cmd)
    assert.equal("'ufw' 'allow' 'from' '10.0.0.2' 'comment' 'cargoship:trust:10.0.0.2'", acts[3].cmd)
    assert.equal(4, #acts)
  end)
end)

describe("firewall actions: nftables", function()
  it("renders one table inet cargoship, loads it atomically and includes it at boot once", function()
    local plan = { trust = PLAN.trust, ports = PLAN.ports,
                   nftables_conf = { path = "/etc/nftables.conf", content = support.fixture("os/nftables.conf") } }
    local acts = assert(firewall.actions("nftables", plan))
    assert.same({ "write", "run", "write" }, kinds(acts))
    assert.same({ "/var/lib/cargoship/nftables.nft", support.fixture("os/nftables-cargoship.nft") },
      { acts[1].path, acts[1].content })
    assert.equal("nft -f '/var/lib/cargoship/nftables.nft'", acts[2].cmd)
    assert.same({ "/etc/nftables.conf", support.fixture("os/nftables-after.conf") }, { acts[3].path, acts[3].content })
    -- already included: no third write; and nothing under /etc/cargoship, which the sync phases prune
    plan.nftables_conf.content = acts[3].content
    assert.equal(2, #assert(firewall.actions("nftables", plan)))
    assert.is_nil(acts[1].path:find("^/etc/cargoship"))
  end)
end)

describe("firewall actions refuse what cannot be a rule", function()
  it("addresses, ports, protocols and unknown front ends", function()
    assert.same({ nil, 'firewall: "10.0.0.2; reboot" is not an address or CIDR' },
      { firewall.actions("ufw", { trust = { "10.0.0.2; reboot" } }) })
    assert.is_nil((firewall.actions("ufw", { ports = { { port = "6443/tcp" } } })))
    assert.is_nil((firewall.actions("ufw", { ports = { { port = "53", protocol = "sctp" } } })))
    assert.is_nil((firewall.actions("iptables", {})))
  end)
end)

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

describe("firewall: the operator's rules and cargoship's SSH session", function()
  local RULE = { name = "lockdown", action = "deny", direction = "in", source = "any", destination = "any",
                 protocol = "tcp", port = "20-30" }
  it("refuses a rule that would drop or reject the SSH port from where cargoship connects", function()
    assert.matches('firewall rule "lockdown" would close the SSH port 22 cargoship is connected through from 10.0.0.1',
      firewall.ssh_guard({ RULE }, { port = 22, client = "10.0.0.1" }), 1, true)
    local from_net = { name = "n", action = "reject", source = "10.0.0.0/8" }
    assert.matches('"n" would reject', firewall.ssh_guard({ from_net }, { port = 2222, client = "10.9.9.9" }))
  end)
  it("lets through rules that cannot touch the session", function()
    for _, r in ipairs {
      { name = "other-port", action = "deny", protocol = "tcp", port = "23" },
      { name = "udp", action = "deny", protocol = "udp", port = "22" },
      { name = "other-source", action = "deny", source = "192.0.2.0/24", protocol = "tcp", port = "22" },
      { name = "allow", action = "allow", protocol = "tcp", port = "22" },
      { name = "out", action = "deny", direction = "out", protocol = "tcp", port = "22" },
    } do
      assert.is_nil(firewall.ssh_guard({ r }, { port = 22, client = "10.0.0.1" }), r.name)
    end
  end)
  it("renders rules for ufw and firewalld in their own words", function()
    assert.equal("deny in from any to any port 20:30 proto tcp", firewall.ufw_rule(RULE))
    assert.equal("route allow in on eth0 out on eth1 from 10.1.0.0/16 to any", firewall.ufw_rule {
      action = "allow", direction = "forward", ingress = "eth0", egress = "eth1", source = "10.1.0.0/16" })
    assert.equal('rule family="ipv4" source address="192.0.2.0/24" port port="9100" protocol="tcp" accept',
      firewall.rich_rule { action = "allow", source = "192.0.2.0/24", protocol = "tcp", port = "9100" })
    assert.equal('rule protocol value="sctp" reject', firewall.rich_rule { action = "reject", protocol = "sctp" })
    assert.same({ nil, 'firewall rule "o": direction out on firewalld needs a policy object, which this build does not'
      .. " write (inbound rules only)" }, { firewall.actions("firewalld", { rules = { { name = "o", action = "deny",
      direction = "out" } } }) })
    assert.same({ nil, 'firewall rule "x": source "10.0.0.1; reboot" is not an address or CIDR' },
      { firewall.actions("nftables", { rules = { { name = "x", action = "deny", source = "10.0.0.1; reboot" } } }) })
  end)
  it("leaves a host alone whose non-preferred front end is installed but stopped", function()
    local b, why = firewall.choose(nil, { firewalld = "stopped", ufw = "absent", nftables = "usable", zones = {} })
    assert.is_nil(b)
    assert.matches("firewalld is installed but not running: nothing is written beneath it", why, 1, true)
  end)
end)

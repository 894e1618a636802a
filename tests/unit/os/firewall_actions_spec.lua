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
    -- zone public's in rules: priorities -n..-1 in the file's order, ahead of the zone's ports
    assert.equal('rule priority="-3" protocol value="sctp" reject',
      firewall.zone_rich_rule({ action = "reject", protocol = "sctp" }, 1, 3))
    assert.equal('rule priority="-1" port port="22" protocol="tcp" accept',
      firewall.zone_rich_rule({ action = "allow", protocol = "tcp", port = "22" }, 3, 3))
    assert.same({ nil, 'firewall rule "x": source "10.0.0.1; reboot" is not an address or CIDR' },
      { firewall.actions("nftables", { rules = { { name = "x", action = "deny", source = "10.0.0.1; reboot" } } }) })
  end)
  it("leaves a host alone whose non-preferred front end is installed but stopped", function()
    local b, why = firewall.choose(nil, { firewalld = "stopped", ufw = "absent", nftables = "usable", zones = {} })
    assert.is_nil(b)
    assert.matches("firewalld is installed but not running: nothing is written beneath it", why, 1, true)
  end)
end)

-- firewalld's own words for policies (`firewall-cmd --info-policy`, firewalld 1.3.3 in the lab)
local INFO_OUT = "policy=cargoship-out\ncargoship-out (active)\n  priority: -1\n  target: CONTINUE\n"
  .. "  ingress-zones: HOST\n  egress-zones: ANY\n  services: \n  ports: \n  protocols: \n  masquerade: no\n"
  .. "  forward-ports: \n  source-ports: \n  icmp-blocks: \n  rich rules: \n"
  .. '\trule priority="1" family="ipv4" destination address="10.0.0.9" port port="30081" protocol="tcp" reject\n'
  .. '\trule priority="2" family="ipv6" destination address="fd00::9" drop\n'

describe("firewall actions: firewalld out and forward rules as policies", function()
  local policies = require "cargoship.os.firewall.firewalld_policies"
  local OUT = { { name = "no-9", action = "reject", direction = "out", destination = "10.0.0.9", protocol = "tcp",
                  port = "30081" },
                { name = "v6", action = "deny", direction = "out", destination = "fd00::9" } }
  local FWD = { name = "http", action = "allow", direction = "forward", ingress = "public", egress = "trusted",
                protocol = "tcp", port = "80" }
  local function plan(rules, st)
    return { trust = { "10.0.0.2" }, rules = rules, state = st }
  end
  local function converged(extra)
    local st = { files = { ["/etc/firewalld/ipsets/cargoship-trusted.xml"] =
      '<?xml version="1.0" encoding="utf-8"?>\n<ipset type="hash:net">\n  <short>cargoship-trusted</short>\n'
      .. "  <entry>10.0.0.2</entry>\n</ipset>\n" },
      ipset_entries = { ["cargoship-trusted"] = "10.0.0.2", ["cargoship-trusted6"] = "" },
      trusted_sources = "ipset:cargoship-trusted\n", trusted_sources_runtime = "ipset:cargoship-trusted\n",
      public_services = "ssh", public_services_runtime = "ssh",
      policies = policies.parse(INFO_OUT), policies_runtime = policies.parse(INFO_OUT) }
    for k, v in pairs(extra or {}) do st[k] = v end
    return st
  end

  it("reads firewalld's --info-policy output", function()
    assert.same({ ["cargoship-out"] = { target = "CONTINUE", ingress = { "HOST" }, egress = { "ANY" }, rules = {
      'rule priority="1" family="ipv4" destination address="10.0.0.9" port port="30081" protocol="tcp" reject',
      'rule priority="2" family="ipv6" destination address="fd00::9" drop' } } }, policies.parse(INFO_OUT))
  end)

  it("creates cargoship-out (HOST -> ANY) and one cargoship-fwd policy per zone pair, rules in file order", function()
    local acts = assert(firewall.actions("firewalld", plan({ OUT[1], FWD, OUT[2] }, converged {
      policies = {}, policies_runtime = {} })))
    local cmds = {}
    for i, a in ipairs(acts) do cmds[i] = a.cmd end
    local fwd = policies.forward_name("public", "trusted")
    assert.matches("^cargoship%-fwd%-%x%x%x%x$", fwd)
    assert.same({
      "firewall-cmd --permanent --new-policy='cargoship-out'",
      "firewall-cmd --permanent --policy='cargoship-out' --add-ingress-zone='HOST'",
      "firewall-cmd --permanent --policy='cargoship-out' --add-egress-zone='ANY'",
      "firewall-cmd --permanent --policy='cargoship-out' --add-rich-rule='rule priority=\"1\" family=\"ipv4\" "
        .. "destination address=\"10.0.0.9\" port port=\"30081\" protocol=\"tcp\" reject'",
      "firewall-cmd --permanent --policy='cargoship-out' --add-rich-rule='rule priority=\"2\" family=\"ipv6\" "
        .. "destination address=\"fd00::9\" drop'",
      "firewall-cmd --permanent --new-policy='" .. fwd .. "'",
      "firewall-cmd --permanent --policy='" .. fwd .. "' --add-ingress-zone='public'",
      "firewall-cmd --permanent --policy='" .. fwd .. "' --add-egress-zone='trusted'",
      "firewall-cmd --permanent --policy='" .. fwd .. "' --add-rich-rule='rule priority=\"1\" port port=\"80\" "
        .. "protocol=\"tcp\" accept'",
      "firewall-cmd --reload",
    }, cmds)
    assert.matches("create firewalld policy cargoship-out (HOST -> ANY)", acts[1].say, 1, true)
  end)

  it("has nothing to do when the policies hold the rules, permanently and at runtime", function()
    assert.same({}, assert(firewall.actions("firewalld", plan(OUT, converged()))))
  end)

  it("reloads only when the running firewall lags the permanent policies", function()
    local acts = assert(firewall.actions("firewalld", plan(OUT, converged { policies_runtime = {} })))
    assert.same({ "firewall-cmd --reload" }, { acts[1].cmd, acts[2] })
  end)

  it("removes a dropped rule from its policy, and deletes a policy no rule calls for any more", function()
    local acts = assert(firewall.actions("firewalld", plan({ OUT[1] }, converged())))
    assert.equal("firewall-cmd --permanent --policy='cargoship-out' --remove-rich-rule='rule priority=\"2\" "
      .. "family=\"ipv6\" destination address=\"fd00::9\" drop'", acts[1].cmd)
    assert.equal("firewall-cmd --reload", acts[2].cmd)
    assert.equal(2, #acts)
    local gone = assert(firewall.actions("firewalld", plan({}, converged())))
    assert.same({ "firewall-cmd --permanent --delete-policy='cargoship-out'", "firewall-cmd --reload" },
      { gone[1].cmd, gone[2].cmd })
    assert.matches("delete firewalld policy cargoship-out", gone[1].say, 1, true)
    -- a policy of someone else's is not ours to delete
    local other = converged { policies = { ["allow-host-ipv6"] = policies.parse(INFO_OUT)["cargoship-out"] },
                              policies_runtime = {} }
    assert.same({}, assert(firewall.actions("firewalld", plan({}, other))))
  end)

  it("fixes a policy's zones and target when someone changed them", function()
    local bent = policies.parse(INFO_OUT)
    bent["cargoship-out"].target, bent["cargoship-out"].egress = "DROP", { "public" }
    local acts = assert(firewall.actions("firewalld", plan(OUT, converged { policies = bent })))
    local cmds = {}
    for i, a in ipairs(acts) do cmds[i] = a.cmd end
    assert.same({ "firewall-cmd --permanent --policy='cargoship-out' --set-target=CONTINUE",
                  "firewall-cmd --permanent --policy='cargoship-out' --remove-egress-zone='public'",
                  "firewall-cmd --permanent --policy='cargoship-out' --add-egress-zone='ANY'",
                  "firewall-cmd --reload" }, cmds)
  end)
end)

describe("firewall actions: what the cluster file dropped is removed", function()
  local SVC = "/etc/firewalld/services/distro-exposed-ports.xml"
  it("firewalld: the exposed-ports service leaves zone public and its file goes when no port is left", function()
    local st = { files = { [SVC] = "<service/>\n" }, public_services = "ssh distro-exposed-ports",
                 public_services_runtime = "ssh distro-exposed-ports", policies = {}, policies_runtime = {} }
    local acts = assert(firewall.actions("firewalld", { trust = {}, ports = {}, state = st }))
    assert.same({ "run", "remove", "run" }, kinds(acts))
    assert.equal("firewall-cmd --permanent --zone=public --remove-service='distro-exposed-ports'", acts[1].cmd)
    assert.matches("close the exposed ports", acts[1].say, 1, true)
    assert.equal(SVC, acts[2].path)
    assert.equal("firewall-cmd --reload", acts[3].cmd)
    -- already gone from the zone and the disk: nothing
    st.files, st.public_services, st.public_services_runtime = {}, "ssh", "ssh"
    assert.same({}, assert(firewall.actions("firewalld", { trust = {}, ports = {}, state = st })))
  end)
  it("firewalld: a port dropped from .host.ports rewrites the service and reloads", function()
    local st = { files = { [SVC] = '<?xml version="1.0" encoding="utf-8"?>\n<service>\n'
      .. '  <short>distro-exposed-ports</short>\n  <port protocol="tcp" port="6443"/>\n'
      .. '  <port protocol="tcp" port="30080"/>\n</service>\n' },
      public_services = "distro-exposed-ports", public_services_runtime = "distro-exposed-ports",
      policies = {}, policies_runtime = {} }
    local acts = assert(firewall.actions("firewalld", { trust = {}, ports = { { port = "6443", protocol = "tcp" } },
                                                        state = st }))
    assert.same({ "write", "run" }, kinds(acts))
    assert.is_nil(acts[1].content:find("30080", 1, true))
    assert.equal("firewall-cmd --reload", acts[2].cmd)
  end)
  it("ufw: a port dropped from the profile is rewritten and reloaded, as `ufw app update` does not", function()
    local st = { added = "ufw allow cargoship-ports comment 'cargoship:ports'\n",
                 app = "[cargoship-ports]\ntitle=cargoship exposed ports\ndescription=ports the cluster file opens "
                   .. "(.host.ports)\nports=6443/tcp|30083/tcp\n" }
    local acts = assert(firewall.actions("ufw", { trust = {}, ports = { { port = "6443", protocol = "tcp" } },
                                                  previous = "allow cargoship-ports\n", state = st }))
    assert.same({ "write", "run", "run" }, kinds(acts))
    assert.matches("\nports=6443/tcp\n", acts[1].content, 1, true)
    assert.same({ "ufw app update 'cargoship-ports'", "ufw reload" }, { acts[2].cmd, acts[3].cmd })
  end)
  it("ufw: the profile's rule is deleted, then the profile itself", function()
    local acts = assert(firewall.actions("ufw", { trust = {}, ports = {}, previous = "allow cargoship-ports\n",
      state = { added = "ufw allow cargoship-ports comment 'cargoship:ports'\n",
                app = "[cargoship-ports]\n" } }))
    assert.same({ "'ufw' 'delete' 'allow' 'cargoship-ports'", "/etc/ufw/applications.d/cargoship",
                  "/var/lib/cargoship/ufw.rules", "", "0700" },
                { acts[1].cmd, acts[2].path, acts[3].path, acts[3].content, acts[3].dir_mode })
    assert.equal("remove", acts[2].kind)
  end)
  it("nftables: the table is rendered from the plan alone, so a dropped port or rule is gone", function()
    local text = assert(firewall.nftables_ruleset { trust = {}, ports = {} })
    assert.is_nil(text:find("dport", 1, true))
  end)
end)

describe("nftables out and forward rules", function()
  it("let replies pass first, so no out rule cuts cargoship's SSH session", function()
    local text = assert(firewall.nftables_ruleset { trust = {}, rules = {
      { name = "lock", action = "deny", direction = "out" },
      { name = "f", action = "reject", direction = "forward", ingress = "eth0", egress = "eth1" } } })
    assert.matches("hook output priority filter; policy accept;\n    ct state established,related accept\n"
      .. '    drop comment "cargoship:lock"', text, 1, true)
    assert.matches("hook forward priority filter; policy accept;\n    ct state established,related accept\n"
      .. '    iifname "eth0" oifname "eth1" reject comment "cargoship:f"', text, 1, true)
  end)
end)

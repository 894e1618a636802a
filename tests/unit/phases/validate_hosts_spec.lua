-- Specs for "Validate hosts": each kind of problem, and every problem of every host reported together.
local phase = require "cargoship.phases.validate_hosts"
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"
local packages = require "unit.phases.packages"

local SUDO_ERR = "h%d: sudo: user admin needs a password for sudo; cargoship needs passwordless sudo (NOPASSWD)"
  .. " or root login"

-- A host with gathered facts; o.user logs in as that user, o.sudo_fails makes its sudo need a password.
local function host(i, o)
  o = o or {}
  local name = "h" .. i
  local h = support.host({ name = name, connection = { kind = "ssh", address = "10.0.0." .. i,
    user = o.user or "root" }, host = o.host }, {}, { user = o.user,
    sudo_error = o.sudo_fails and SUDO_ERR:format(i) or nil })
  h.os = os_registry.by_name(o.os or "debian"):new { service_manager = "systemd" }
  h.facts.os = { id = o.os or "debian" }
  h.facts.service_manager = "systemd"
  h.facts.node_name = o.node_name or name
  h.facts.private_address = o.address or ("10.0.0." .. i)
  h.facts.arch = o.arch or "amd64"
  h.facts.machine = o.machine or "x86_64"
  h.facts.clock = { remote = 1000 + (o.skew or 0), local_mid = 1000, rtt = 0.01 }
  h.facts.firewall = o.firewall or { firewalld = "absent", ufw = "absent", nftables = "absent", zones = {} }
  return h
end

local function messages(err)
  local out = {}
  for i, f in ipairs(err) do out[i] = f.host.name .. ": " .. f.err end
  return out
end

local function run(hosts, o)
  local ctx = support.ctx(hosts, o)
  local ok, err = phase.run(ctx, phase.prepare(ctx))
  return ok, err and messages(err), ctx
end

local function rules(list) return { ports = {}, policy = {}, firewall = { rules = list } } end

describe("phase validate_hosts", function()
  teardown(packages.release)
  it("passes a sound cluster without a single round trip for root logins", function()
    local hosts = { host(1), host(2), host(3) }
    assert.is_true((run(hosts)))
    for _, h in ipairs(hosts) do assert.equal(0, h.probes_sent) end
  end)

  it("checks sudo for non-root logins, naming the user", function()
    local ok, err = run({ host(1, { user = "admin" }), host(2, { user = "admin", sudo_fails = true }) })
    assert.is_nil(ok)
    assert.same({ SUDO_ERR:format(2) }, err)
  end)

  it("refuses duplicate node names (case-insensitive) and private addresses, naming both hosts", function()
    local ok, err = run({ host(1, { node_name = "node-a" }), host(2, { node_name = "Node-A" }),
      host(3, { address = "fd00::1" }), host(4, { address = "FD00:0::0001" }) })
    assert.is_nil(ok)
    assert.same({ "h2: node name Node-A is also h1's; each host needs its own",
                  "h4: private address FD00:0::0001 is also h3's; each host needs its own" }, err)
  end)

  it("refuses architectures the package does not carry, or the engines do not ship", function()
    local ok, err = run({ host(1, { arch = "arm64", machine = "aarch64" }), host(2) },
      { distro = { type = "rke2", version = "1.35.4-rke2r1", architectures = { "amd64" } } })
    assert.is_nil(ok)
    assert.same({ "h1: architecture arm64 (uname -m aarch64) is not one the distro package carries (amd64)" }, err)
    ok, err = run({ host(1, { arch = "arm", machine = "armv7l" }), host(2, { arch = "riscv64" }) })
    assert.is_nil(ok)
    assert.same({ "h1: architecture arm (uname -m armv7l) is not one the engines ship (amd64, arm64, riscv64)" }, err)
  end)

  it("refuses a node address inside the engine's pod or service CIDR, naming the CIDR", function()
    -- the fixture upstream package (built and read for real): podSubnet 10.244.0.0/16, and
    -- kubeadm's default service CIDR 10.96.0.0/12
    local hosts = { host(1, { address = "10.244.3.7" }), host(2, { address = "10.100.0.2" }), host(3),
      host(4, { address = "fd00::4" }) }
    local ctx = support.ctx(hosts, { distro = packages.of("upstream") })
    local got = {}
    for _, p in ipairs(phase.problems(ctx, hosts)) do got[#got + 1] = p.host.name .. ": " .. p.message end
    local why = ": pods, services and nodes need separate ranges (move the CIDR in the distro package's engine config)"
    assert.same({ "h1: private address 10.244.3.7 lies in the cluster's pod or service CIDR 10.244.0.0/16" .. why,
                  "h2: private address 10.100.0.2 lies in the cluster's pod or service CIDR 10.96.0.0/12" .. why }, got)
  end)

  it("refuses clocks further than the limit from the median", function()
    local ok, err = run({ host(1), host(2, { skew = 2 }), host(3, { skew = -45 }), host(4, { skew = 1 }) })
    assert.is_nil(ok)
    assert.same({ "h3: clock is 45.5 s behind the median of the cluster's hosts (limit 30 s): sync it"
      .. " (chrony/NTP), TLS and etcd need agreeing clocks" }, err)
    assert.is_true((run({ host(1), host(2, { skew = 20 }) }, { options = { max_clock_skew = 30 } })))
    assert.is_nil((run({ host(1), host(2, { skew = 20 }), host(3, { skew = 40 }) },
      { options = { max_clock_skew = 5 } })))
  end)

  it("checks firewall rules against the front end each host would use", function()
    local firewalld_old = { firewalld = "running", firewalld_version = "0.8.2", zones = { "public", "trusted" },
                            backend = "firewalld", ufw = "absent", nftables = "absent" }
    local firewalld_new = { firewalld = "running", firewalld_version = "1.3.4", zones = { "public", "internal" },
                            backend = "firewalld", ufw = "absent", nftables = "absent" }
    local firewalld_ancient = { firewalld = "running", firewalld_version = "0.6.3", zones = { "public", "trusted" },
                                backend = "firewalld", ufw = "absent", nftables = "absent" }
    local ufw = { ufw = "active", backend = "ufw", firewalld = "absent", nftables = "absent", zones = {} }
    local mon = { key = "mon", name = "mon", action = "allow", port = "9100", protocol = "tcp" }
    local fwd = { key = "fwd", name = "fwd", action = "allow", direction = "forward", ingress = "eth0",
                  egress = "cni0", port = "80", protocol = "tcp" }
    local sctp = { key = "sctp", name = "sctp", action = "allow", direction = "in", port = "9899", protocol = "sctp" }
    local zoned = { key = "zoned", name = "zoned", action = "allow", direction = "forward", ingress = "public",
                    egress = "internal" }
    local ok, err = run({
      host(1, { os = "rocky", firewall = firewalld_old, host = rules({ fwd }) }),
      host(2, { os = "rocky", firewall = firewalld_new, host = rules({ fwd, zoned }) }),
      host(3, { firewall = ufw, host = rules({ sctp, zoned }) }),
      host(4, { firewall = ufw, host = { ports = {}, firewall = { rules = {} },
                                         policy = { web = { name = "web", target = "ACCEPT" } } } }),
      host(5, { os = "rocky", firewall = firewalld_ancient, host = rules({ mon }) }),
      host(6, { os = "rocky", firewall = firewalld_old, host = rules({ mon }) }),
    })
    assert.is_nil(ok)
    assert.same({
      'h1: firewall rule "fwd": direction forward needs firewalld 0.9 or later (policies), the host has 0.8.2',
      'h1: firewall rule "fwd": ingress "eth0" is not a firewalld zone on this host (forward rules name zones on'
        .. " firewalld; zones: public, trusted)",
      'h1: firewall rule "fwd": egress "cni0" is not a firewalld zone on this host (forward rules name zones on'
        .. " firewalld; zones: public, trusted)",
      'h2: firewall rule "fwd": ingress "eth0" is not a firewalld zone on this host (forward rules name zones on'
        .. " firewalld; zones: public, internal)",
      'h2: firewall rule "fwd": egress "cni0" is not a firewalld zone on this host (forward rules name zones on'
        .. " firewalld; zones: public, internal)",
      'h3: firewall rule "sctp": ufw cannot filter protocol sctp (it knows tcp, udp, esp, ah, gre, igmp)',
      'h4: firewall policy "web": host.policy is firewalld-only, this host uses ufw',
      'h5: firewall rule "mon": needs firewalld 0.7 or later (rich rule priorities keep the rules in the file\'s'
        .. " order), the host has 0.6.3",
    }, err)
  end)

  it("only warns about rules on a host whose firewall will be left alone", function()
    local h = host(1, { host = rules({ { key = "x", name = "x", action = "allow", direction = "in" } }),
      firewall = { firewalld = "stopped", ufw = "absent", nftables = "absent", zones = {},
                   backend_why = "firewalld is installed but not running: the firewall is left alone on this host" } })
    local ctx, log = support.ctx({ h }, { options = { update_firewall = true } })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.matches("warning: firewall rules are set but will not be applied here: firewalld is installed but not"
      .. " running", log(), 1, true)
  end)

  it("reports every problem of every host at once, each on its host", function()
    local hosts = { host(1, { user = "admin", sudo_fails = true, arch = "s390x", machine = "s390x" }),
                    host(2, { node_name = "h1", skew = 120 }), host(3, { address = "10.0.0.1" }) }
    local ok, err, ctx = run(hosts)
    assert.is_nil(ok)
    assert.same({
      SUDO_ERR:format(1),
      "h2: node name h1 is also h1's; each host needs its own",
      "h3: private address 10.0.0.1 is also h1's; each host needs its own",
      "h1: architecture s390x (uname -m s390x) is not one the engines ship (amd64, arm64, riscv64)",
      "h2: clock is 120.0 s ahead of the median of the cluster's hosts (limit 30 s): sync it (chrony/NTP),"
        .. " TLS and etcd need agreeing clocks",
    }, err)
    assert.equal(5, #ctx.validation)
    for _, h in ipairs(hosts) do assert.equal(0, h.writes_sent) end
  end)
end)

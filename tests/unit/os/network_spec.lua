-- Specs for the private interface and address choice (cluster-yaml.md §4.5): `ip` output fixtures in, choice out.
local network = require "cargoship.os.network"
local support = require "unit.phases.support"

local function choose(set, o)
  o = o or {}
  o.addrs = network.parse_addrs(support.fixture("facts/" .. set .. "-addr.txt"))
  o.routes4 = network.parse_routes(support.fixture("facts/" .. set .. "-route4.txt"))
  o.routes6 = network.parse_routes(support.fixture("facts/" .. set .. "-route6.txt"))
  return network.choose(o)
end

describe("private address", function()
  it("single-homed lab host: default route device, the connection address since none differs", function()
    local c = choose("lab", { connection_address = "10.250.0.11" })
    assert.equal("eth0", c.interface)
    assert.equal("10.250.0.11", c.address)
    assert.is_nil(c.ipv6) -- only link-local IPv6 there
    assert.same({ "private address 10.250.0.11 on eth0: default route device, no global IPv4 on it other"
      .. " than the connection address, using that" }, c.reasons)
  end)

  it("reached by name or another address: the first global IPv4 of the default route device", function()
    local c = choose("lab", { connection_address = "h1.lab.internal" })
    assert.equal("10.250.0.11", c.address)
    assert.same({ "private address 10.250.0.11 on eth0: default route device, first global IPv4" }, c.reasons)
  end)

  it("multi-homed: the device of the first global route into a private range beats the default route", function()
    local c = choose("multihomed", { connection_address = "203.0.113.10" })
    assert.equal("eth1", c.interface)
    assert.equal("10.20.0.11", c.address)
    -- scope link routes (the connected 10.20.0.0/24, docker0's 172.17/16) are not global routes
    assert.matches("first global route into 10/8, 172.16/12 or 192.168/16 %(10.0.0.0/8%)", c.reasons[1])
  end)

  it("skips the connection address on the private interface for the next global one", function()
    local c = choose("multihomed", { connection_address = "10.20.0.11" })
    assert.equal("10.20.0.100", c.address)
  end)

  it("honours privateInterface", function()
    local c = choose("multihomed", { connection_address = "198.51.100.1", private_interface = "docker0" })
    assert.equal("docker0", c.interface)
    assert.equal("172.17.0.1", c.address)
    assert.matches("privateInterface from the config, first global IPv4", c.reasons[1])
  end)

  it("honours privateAddress and finds the interface carrying it", function()
    local c = choose("dualstack", { connection_address = "10.1.0.5", private_address = "fd00:1::5" })
    assert.equal("fd00:1::5", c.ipv6)
    assert.equal("ens3", c.interface)
    assert.equal("10.1.0.5", c.ipv4) -- the other family still discovered on that interface
    assert.equal("fd00:1::5", c.address) -- the configured one is the primary
    assert.matches("privateAddress from the config %(on ens3%)", c.reasons[1])
  end)

  it("takes privateAddress as given even when no interface carries it (NAT), and says so", function()
    local c = choose("lab", { connection_address = "10.250.0.11", private_address = "192.0.2.77" })
    assert.equal("192.0.2.77", c.address)
    assert.matches("not configured on any interface", c.reasons[1])
  end)

  it("dual stack: IPv4 and IPv6 on the same interface, skipping temporary IPv6 addresses", function()
    local c = choose("dualstack", { connection_address = "203.0.113.50" })
    assert.equal("ens3", c.interface)
    assert.equal("10.1.0.5", c.ipv4)
    assert.equal("fd00:1::5", c.ipv6)
    assert.equal("10.1.0.5", c.address)
  end)

  it("IPv6 only: the route into fc00::/7 picks the interface, the ULA differs from the connection", function()
    local c = choose("ipv6only", { connection_address = "2001:DB8:20:0::11" })
    assert.equal("ens5", c.interface)
    assert.is_nil(c.ipv4)
    assert.equal("fd00:20::11", c.ipv6)
    assert.equal("fd00:20::11", c.address)
    assert.matches("fc00::/7 %(fd00:20::/64%)", c.reasons[1])
  end)

  it("fails with the way out when there is no route at all", function()
    local c, why = network.choose { addrs = {}, routes4 = {}, routes6 = {} }
    assert.is_nil(c)
    assert.matches("set privateInterface or privateAddress", why)
  end)

  it("fails when the configured interface has no global address", function()
    local c, why = choose("lab", { private_interface = "eth7" })
    assert.is_nil(c)
    assert.matches("no global address on eth7", why)
  end)
end)

describe("address helpers", function()
  it("know the private ranges", function()
    for _, d in ipairs({ "10.0.0.0/8", "10.20.0.0/16", "172.16.0.0/12", "172.31.255.0/24", "192.168.1.0/24",
                         "10.1.2.3", "fd00::/8", "fc00::/7", "fd12:3456::/48" }) do
      assert.is_true(network.is_private_destination(d), d)
    end
    for _, d in ipairs({ "172.32.0.0/16", "172.0.0.0/8", "11.0.0.0/8", "0.0.0.0/0", "192.169.0.0/16",
                         "2001:db8::/32", "fe80::/64", "fc00::/6" }) do
      assert.is_false(network.is_private_destination(d), d)
    end
  end)

  it("spell IPv6 one way", function()
    assert.equal(network.canonical("2001:db8::11"), network.canonical("2001:DB8:0:0::0011"))
    assert.equal("0:0:0:0:0:ffff:a00:1", network.canonical("::ffff:10.0.0.1"))
    assert.equal("10.0.0.1", network.canonical("10.0.0.1"))
    assert.is_nil(network.ipv6("1::2::3"))
    assert.is_nil(network.ipv4("256.1.1.1"))
  end)

  it("parse routes with types, multipath and no scope", function()
    local r = network.parse_routes(table.concat({
      "unreachable 10.9.0.0/16 proto static",
      "unicast 10.8.0.0/16 via 10.1.0.1 dev eth2",
      "default proto static metric 100 \tnexthop via 10.1.0.1 dev eth0 weight 1"
        .. " \tnexthop via 10.2.0.1 dev eth1 weight 1",
    }, "\n"))
    assert.same({ { dest = "10.8.0.0/16", dev = "eth2", scope = "global" },
                  { dest = "default", dev = "eth0", scope = "global" } }, r)
  end)
end)

describe("network.in_cidr", function()
  it("tells whether an address lies in a CIDR, per family, bit by bit", function()
    assert.is_true(network.in_cidr("10.244.3.7", "10.244.0.0/16"))
    assert.is_false(network.in_cidr("10.245.0.1", "10.244.0.0/16"))
    assert.is_true(network.in_cidr("10.111.255.255", "10.96.0.0/12"))
    assert.is_false(network.in_cidr("10.112.0.0", "10.96.0.0/12"))
    assert.is_true(network.in_cidr("192.0.2.9", "0.0.0.0/0"))
    assert.is_true(network.in_cidr("fd00:10:42::5", "fd00:10:42::/56"))
    assert.is_false(network.in_cidr("fd00:10:43::5", "fd00:10:42::/56"))
    assert.is_true(network.in_cidr("2001:db8::7fff", "2001:db8::/113"))   -- a boundary mid-group
    assert.is_false(network.in_cidr("2001:db8::8000", "2001:db8::/113"))
    assert.is_false(network.in_cidr("10.0.0.1", "fd00::/8"), "families differ")
    assert.is_false(network.in_cidr("10.0.0.1", "10.0.0.0"), "no length")
    assert.is_false(network.in_cidr("10.0.0.1", "10.0.0.0/33"))
  end)
end)

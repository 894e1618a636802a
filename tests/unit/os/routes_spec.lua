-- Specs of network.split_routes: one `ip route show table all` read as the main table's two families.
local network = require "cargoship.os.network"

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local s = p:read("a")
  p:close()
  return s
end

local function tidy(s)
  return (s:gsub("[ \t]+\n", "\n"):gsub("%s+$", ""))
end

describe("network.split_routes", function()
  it("gives what ip route and ip -6 route print, on this machine's real routing tables", function()
    local v4, v6 = network.split_routes(sh("ip -o route show table all"))
    assert.are.equal(tidy(sh("ip -o route show")), tidy(v4))
    assert.are.equal(tidy(sh("ip -6 -o route show")), tidy(v6))
  end)

  it("keeps only the main table and sorts the families apart", function()
    local v4, v6 = network.split_routes(table.concat({
      "default via 10.0.0.1 dev eth0 proto dhcp metric 100",
      "10.0.0.0/24 dev eth0 proto kernel scope link src 10.0.0.5",
      "192.168.7.0/24 via 10.0.0.9 dev eth1",
      "default via 172.16.0.1 dev eth1 table 100",
      "local 10.0.0.5 dev eth0 table local proto kernel scope host src 10.0.0.5",
      "broadcast 10.0.0.255 dev eth0 table local proto kernel scope link src 10.0.0.5",
      "fd00:1::/64 dev eth1 proto kernel metric 256 pref medium",
      "default via fe80::1 dev eth0 proto ra metric 1024 expires 1790sec pref medium",
      "local ::1 dev lo table local proto kernel metric 0 pref medium",
      "unreachable default dev lo proto kernel metric 4294967295 pref medium",
    }, "\n"))
    assert.are.equal(table.concat({
      "default via 10.0.0.1 dev eth0 proto dhcp metric 100",
      "10.0.0.0/24 dev eth0 proto kernel scope link src 10.0.0.5",
      "192.168.7.0/24 via 10.0.0.9 dev eth1",
    }, "\n"), v4)
    assert.are.equal(table.concat({
      "fd00:1::/64 dev eth1 proto kernel metric 256 pref medium",
      "default via fe80::1 dev eth0 proto ra metric 1024 expires 1790sec pref medium",
      "unreachable default dev lo proto kernel metric 4294967295 pref medium",
    }, "\n"), v6)
    local routes6 = network.parse_routes(v6)
    assert.are.equal(2, #routes6)   -- the unreachable route has no use for discovery
  end)
end)

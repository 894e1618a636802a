-- cargoship.os.network: reads `ip -o addr` / `ip -o route` output and picks a host's private interface and addresses.
--
-- The rule (cluster-yaml.md §4.5), per address family: privateAddress set -> use it (its
-- interface is the one carrying it); else privateInterface, or the device of the first
-- global-scope route into a private range (10/8, 172.16/12, 192.168/16; fc00::/7 for
-- IPv6), else the default route's device; on it, the first global address that differs
-- from the connection address; when none differs, the connection address itself.
local M = {}

-- IPv4 text -> 32-bit integer | nil
function M.ipv4(s)
  local a, b, c, d = (s or ""):match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  if not a then return nil end
  local n = 0
  for _, p in ipairs({ a, b, c, d }) do
    p = tonumber(p)
    if p > 255 then return nil end
    n = n * 256 + p
  end
  return n
end

-- IPv6 text -> list of 8 integers | nil (embedded IPv4 tails accepted)
function M.ipv6(s)
  if not s or not s:find(":", 1, true) then return nil end
  s = s:lower():gsub("%%.*$", "")
  local v4 = s:match(":(%d+%.%d+%.%d+%.%d+)$")
  if v4 then
    local n = M.ipv4(v4)
    if not n then return nil end
    s = s:sub(1, #s - #v4) .. string.format("%x:%x", n >> 16, n & 0xffff)
  end
  local head, tail = s:match("^(.-)::(.*)$")
  local function split(part)
    local out = {}
    if part == "" then return out end
    for g in (part .. ":"):gmatch("([^:]*):") do
      if not g:match("^%x%x?%x?%x?$") then return nil end
      out[#out + 1] = tonumber(g, 16)
    end
    return out
  end
  local groups
  if head then
    local h, t = split(head), split(tail)
    if not h or not t or #h + #t > 7 then return nil end
    groups = h
    for _ = 1, 8 - #h - #t do groups[#groups + 1] = 0 end
    for _, g in ipairs(t) do groups[#groups + 1] = g end
  else
    groups = split(s)
    if not groups or #groups ~= 8 then return nil end
  end
  return groups
end

-- One spelling per address, so "2001:DB8::0011" and "2001:db8::11" compare equal.
function M.canonical(s)
  if M.ipv4(s) then return s end
  local g = M.ipv6(s)
  if not g then return s and s:lower() end
  local parts = {}
  for i, v in ipairs(g) do parts[i] = string.format("%x", v) end
  return table.concat(parts, ":")
end

-- Whether address lies inside "net/len" (IPv4 in IPv4, IPv6 in IPv6; a family mismatch or
-- anything unreadable is false).
function M.in_cidr(addr, cidr)
  local net, len = (cidr or ""):match("^([^/]+)/(%d+)$")
  len = tonumber(len)
  if not net then return false end
  local a4, n4 = M.ipv4(addr), M.ipv4(net)
  if a4 and n4 then
    if len > 32 then return false end
    local shift = 32 - len
    return (a4 >> shift) == (n4 >> shift)
  end
  local a6, n6 = M.ipv6(addr), M.ipv6(net)
  if not a6 or not n6 or len > 128 then return false end
  for i = 1, 8 do
    local bits = math.max(0, math.min(16, len - (i - 1) * 16))
    if bits == 0 then return true end
    local shift = 16 - bits
    if (a6[i] >> shift) ~= (n6[i] >> shift) then return false end
  end
  return true
end

local PRIVATE4 = { { "10.0.0.0", 8 }, { "172.16.0.0", 12 }, { "192.168.0.0", 16 } }

-- Whether the route destination "net/len" lies inside a private range.
function M.is_private_destination(dest)
  local addr, len = dest:match("^([^/]+)/?(%d*)$")
  if not addr then return false end
  local n4 = M.ipv4(addr)
  if n4 then
    len = tonumber(len) or 32
    for _, r in ipairs(PRIVATE4) do
      local bits = r[2]
      local mask = (0xffffffff << (32 - bits)) & 0xffffffff
      if len >= bits and (n4 & mask) == M.ipv4(r[1]) then return true end
    end
    return false
  end
  local g = M.ipv6(addr)
  len = tonumber(len) or 128
  return g ~= nil and len >= 7 and (g[1] & 0xfe00) == 0xfc00
end

-- `ip -o addr show` -> list of {dev, family = 4|6, address, prefix, scope, flags = {word = true}}
function M.parse_addrs(text)
  local out = {}
  for line in (text or ""):gmatch("[^\n]+") do
    local dev, fam, addr, prefix, rest = line:match("^%d+:%s+(%S+)%s+(inet6?)%s+([^/%s]+)/(%d+)(.*)$")
    if dev then
      local a = { dev = dev:gsub("@.*$", ""), family = fam == "inet6" and 6 or 4, address = addr,
                  prefix = tonumber(prefix), scope = rest:match("scope (%S+)") or "global", flags = {} }
      for w in rest:gmatch("%a+") do a.flags[w] = true end
      out[#out + 1] = a
    end
  end
  return out
end

local ROUTE_TYPES = { unicast = true, ["local"] = true, broadcast = true, multicast = true, throw = true,
                      unreachable = true, prohibit = true, blackhole = true, nat = true, anycast = true }

-- `ip -o route show` -> list of {dest, dev, scope}; only unicast routes with a device
function M.parse_routes(text)
  local out = {}
  for line in (text or ""):gmatch("[^\n]+") do
    local first, rest = line:match("^(%S+)%s*(.*)$")
    if first and ROUTE_TYPES[first] then
      if first == "unicast" then first, rest = rest:match("^(%S+)%s*(.*)$") else first = nil end
    end
    local dev = first and rest:match("dev (%S+)")
    if dev then
      out[#out + 1] = { dest = first, dev = dev, scope = rest:match("scope (%S+)") or "global" }
    end
  end
  return out
end

-- `ip -o route show table all` (both families, every table, one process on the host) ->
-- the main table's routes as `ip -o route show` and `ip -6 -o route show` would print them.
-- Routes of other tables say "table NAME"; IPv6 ones have a ':' in their destination or
-- gateway, or the "pref" iproute2 prints only for IPv6.
function M.split_routes(text)
  local v4, v6 = {}, {}
  for line in (text or ""):gmatch("[^\n]+") do
    if not line:find(" table ", 1, true) then
      local words = {}
      for w in line:gmatch("%S+") do words[#words + 1] = w end
      local dest = ROUTE_TYPES[words[1]] and words[2] or words[1]
      local via = line:match(" via (%S+)")
      local six = (dest and dest:find(":", 1, true)) or (via and via:find(":", 1, true)) or line:find(" pref ", 1, true)
      local list = six and v6 or v4
      list[#list + 1] = line
    end
  end
  return table.concat(v4, "\n"), table.concat(v6, "\n")
end

-- The interface per the rule, for one family's routes -> dev, why | nil
function M.discover_interface(routes, family)
  local ranges = family == 6 and "fc00::/7" or "10/8, 172.16/12 or 192.168/16"
  for _, r in ipairs(routes) do
    if r.dest ~= "default" and r.scope == "global" and M.is_private_destination(r.dest) then
      return r.dev, string.format("first global route into %s (%s)", ranges, r.dest)
    end
  end
  for _, r in ipairs(routes) do
    if r.dest == "default" then return r.dev, "default route device" end
  end
  return nil
end

local function usable(a, family)
  return a.family == family and a.scope == "global" and not a.flags.tentative
    and not a.flags.deprecated and not a.flags.temporary and not a.flags.dadfailed
end

-- First global address of `family` on `dev` differing from the connection address.
-- -> address, why | nil, why
function M.pick_address(addrs, dev, family, conn_address)
  local label = family == 6 and "IPv6" or "IPv4"
  local conn = conn_address and M.canonical(conn_address)
  local same
  for _, a in ipairs(addrs) do
    if a.dev == dev and usable(a, family) then
      if M.canonical(a.address) ~= conn then return a.address, "first global " .. label end
      same = a.address
    end
  end
  if same then
    return same, "no global " .. label .. " on it other than the connection address, using that"
  end
  return nil, "no global " .. label .. " on " .. dev
end

-- M.choose{addrs, routes4, routes6, connection_address, private_address, private_interface}
-- -> {interface, ipv4, ipv6, address (privateAddress, else IPv4, else IPv6), reasons = {..}} | nil, why
function M.choose(o)
  local res = { reasons = {} }
  local dev, dev_why
  if o.private_address then
    local want = M.canonical(o.private_address)
    for _, a in ipairs(o.addrs) do
      if M.canonical(a.address) == want then dev = a.dev end
    end
    local fam = M.ipv4(o.private_address) and 4 or 6
    res[fam == 4 and "ipv4" or "ipv6"] = o.private_address
    res.reasons[#res.reasons + 1] = string.format("private address %s: privateAddress from the config%s",
      o.private_address, dev and (" (on " .. dev .. ")") or " (not configured on any interface of the host)")
    dev_why = "interface carrying privateAddress"
  elseif o.private_interface then
    dev, dev_why = o.private_interface, "privateInterface from the config"
  else
    dev, dev_why = M.discover_interface(o.routes4 or {}, 4)
    if not dev then dev, dev_why = M.discover_interface(o.routes6 or {}, 6) end
    if not dev then
      return nil, "cannot find a private interface: no route into a private range and no default route;"
        .. " set privateInterface or privateAddress for this host"
    end
  end
  res.interface = dev
  for _, fam in ipairs({ 4, 6 }) do
    local slot = fam == 4 and "ipv4" or "ipv6"
    if dev and not res[slot] then
      local addr, why = M.pick_address(o.addrs, dev, fam, o.connection_address)
      res[slot] = addr
      if addr then
        res.reasons[#res.reasons + 1] = string.format("private address %s on %s: %s, %s",
          addr, dev, dev_why, why)
      end
    end
  end
  -- a configured privateAddress is the primary whatever its family
  res.address = o.private_address or res.ipv4 or res.ipv6
  if not res.address then
    return nil, string.format("no global address on %s (%s); set privateAddress for this host", dev, dev_why)
  end
  return res
end

-- Every global address of the host, canonical: what removed-node matching compares.
function M.global_addresses(addrs)
  local out = {}
  for _, a in ipairs(addrs) do
    if a.scope == "global" then out[#out + 1] = a.address end
  end
  return out
end

return M

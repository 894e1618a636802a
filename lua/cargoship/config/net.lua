-- cargoship.config.net: address, hostname, port and URL syntax as the cluster file uses them.
local errors = require "cargoship.config.errors"

local M = {}

-- Dotted quad, no leading zeros (Go's net.ParseIP refuses them since they read as octal
-- elsewhere).
function M.is_ipv4(s)
  local parts = { s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$") }
  if #parts ~= 4 then return false end
  for _, p in ipairs(parts) do
    if #p > 3 or (#p > 1 and p:sub(1, 1) == "0") or tonumber(p) > 255 then return false end
  end
  return true
end

-- RFC 4291 text form: up to eight groups, one "::", an optional dotted-quad tail.
-- Zones ("%eth0") are refused like Go's net.ParseIP does.
function M.is_ipv6(s)
  if not s:find(":", 1, true) or s:find("[^%x:.]") then return false end
  local groups = 8
  local tail4 = s:match(":(%d+%.%d+%.%d+%.%d+)$")
  if tail4 then
    if not M.is_ipv4(tail4) then return false end
    s = s:sub(1, #s - #tail4) .. "0"
    groups = 7
  elseif s:find(".", 1, true) then
    return false
  end
  local head, rest = s:match("^(.-)::(.*)$")
  if head and rest:find("::", 1, true) then return false end
  local function count(part)
    if part == "" then return 0 end
    local n = 0
    for g in (part .. ":"):gmatch("(.-):") do
      if not g:match("^%x%x?%x?%x?$") then return nil end
      n = n + 1
    end
    return n
  end
  if head then
    local a, b = count(head), count(rest)
    return a ~= nil and b ~= nil and a + b < groups
  end
  return count(s) == groups
end

function M.ip_family(s)
  if M.is_ipv4(s) then return 4 end
  if M.is_ipv6(s) then return 6 end
  return nil
end

-- "10.0.0.0/8", "fd00::/64"; host bits may be set (Go's ParseCIDR accepts that too).
function M.cidr_family(s)
  local ip, bits = s:match("^([^/]+)/(%d+)$")
  if not ip or (#bits > 1 and bits:sub(1, 1) == "0") then return nil end
  local fam = M.ip_family(ip)
  local max = fam == 4 and 32 or 128
  if not fam or tonumber(bits) > max then return nil end
  return fam
end

-- RFC 1123 host name (JSON schema format "hostname"): dot-separated labels of letters,
-- digits and inner hyphens, each 1-63 long, 253 in all.
function M.is_hostname(s)
  if #s == 0 or #s > 253 then return false end
  for label in (s .. "."):gmatch("(.-)%.") do
    if #label == 0 or #label > 63 then return false end
    if not label:match("^[%w]$") and not label:match("^[%w][%w-]*[%w]$") then return false end
  end
  return true
end

function M.is_host_or_ip(s)
  return M.is_ipv4(s) or M.is_ipv6(s) or M.is_hostname(s)
end

-- A Kubernetes node name: lower-case RFC 1123 subdomain.
function M.is_node_name(s)
  return M.is_hostname(s) and not s:find("%u")
end

-- "6443" or "30000-32767": returns from, to (to >= from, both 1..65535) or nil, why.
function M.port_range(s)
  local a, b = s:match("^%s*(%d+)%s*%-%s*(%d+)%s*$")
  if not a then a = s:match("^%s*(%d+)%s*$") end
  if not a then return nil, "expected a port number or a range like \"30000-32767\"" end
  local from, to = math.tointeger(tonumber(a)), math.tointeger(tonumber(b or a))
  if not from or not to or from < 1 or from > 65535 or to < 1 or to > 65535 then
    return nil, "expected a port in 1..65535"
  end
  if to < from then return nil, "expected an ascending port range" end
  return from, to
end

-- Splits a registry mirror address the way the Go tool checks it: https:// is assumed when
-- no scheme is written; returns {scheme, host (host[:port] as in the URL), hostname, port,
-- url} or nil, reason.
function M.parse_url(s)
  local url = s
  if not s:find("://", 1, true) then url = "https://" .. s end
  local scheme, rest = url:match("^([%a][%w+.-]*)://(.*)$")
  if not scheme then return nil, "not a URL" end
  scheme = scheme:lower()
  if scheme ~= "http" and scheme ~= "https" then
    return nil, "scheme must be http or https, not " .. scheme
  end
  if rest:find("%s") then return nil, "contains whitespace" end
  local authority = rest:match("^([^/?#]*)")
  if authority:find("@", 1, true) then
    return nil, "must not carry user-info (put credentials in auth)"
  end
  local hostname, port
  if authority:sub(1, 1) == "[" then
    local inner, after = authority:match("^%[([^%]]*)%](.*)$")
    if not inner or not M.is_ipv6(inner) then return nil, "bad IPv6 literal" end
    hostname = inner
    port = after:match("^:(%d*)$")
    if after ~= "" and not port then return nil, "bad port" end
  else
    hostname, port = authority:match("^([^:]*):(.*)$")
    if not hostname then hostname = authority end
    if port and not port:match("^%d*$") then return nil, "bad port " .. errors.quote(port) end
  end
  if hostname == "" then return nil, "has no host" end
  if not M.is_host_or_ip(hostname) and not hostname:match("^[%w._-]+$") then
    return nil, "bad host " .. errors.quote(hostname)
  end
  if port == "" then port = nil end
  if port and (tonumber(port) < 1 or tonumber(port) > 65535) then
    return nil, "port must be in 1..65535"
  end
  return { scheme = scheme, host = authority, hostname = hostname,
           port = port and math.tointeger(tonumber(port)), url = url }
end

return M

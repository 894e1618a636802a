-- cargoship.os.firewall.rules: the rule model every front end shares: addresses, ports, rule checks, SSH refusal.
--
-- A node's plan (what cargoship.os.firewall.actions takes):
--   trust = {"10.0.0.2", "10.42.0.0/16", "fd00::/64"..}   (other nodes, the engine's cluster CIDRs)
--   ports = {{port = "6443"|"30000-32767", protocol = "tcp"|"udp"}..}   (.host.ports)
--   rules = .host.firewall.rules (normalised at load; checked again here before a command line)
--   peer_ports = {tcp = {..}, udp = {..}}   the engine's peer ports, handed in as data
-- family(a) -> 4 | 6 | nil;  split_trust(list) -> v4, v6 | nil, nil, why
-- check_ports(ports), check_rule(rule) -> nil | why
-- ssh_guard(rules, ssh) -> nil | why;  rule_problems / policy_problems -> sentences
-- merge_ports(sets) -> one {tcp, udp} set holding every port of the given sets
local M = {}

local function family(a)
  if a:match("^%d+%.%d+%.%d+%.%d+$") or a:match("^%d+%.%d+%.%d+%.%d+/%d+$") then return 4 end
  if a:find(":", 1, true) and (a:match("^[%x:]+$") or a:match("^[%x:]+/%d+$")) then return 6 end
  return nil
end
M.family = family

local function split_trust(list)
  local v4, v6 = {}, {}
  for _, a in ipairs(list or {}) do
    local f = family(a)
    if not f then return nil, nil, string.format("firewall: %q is not an address or CIDR", tostring(a)) end
    if f == 4 then v4[#v4 + 1] = a else v6[#v6 + 1] = a end
  end
  return v4, v6
end

local function check_ports(ports)
  for _, p in ipairs(ports or {}) do
    local proto = p.protocol or "tcp"
    if not (tostring(p.port):match("^%d+$") or tostring(p.port):match("^%d+%-%d+$")) then
      return string.format("firewall: port %q is not a port or a range", tostring(p.port))
    end
    if proto ~= "tcp" and proto ~= "udp" then
      return "firewall: protocol " .. tostring(proto) .. " is not tcp or udp"
    end
  end
end

local function rule_name(r) return r.name or r.key or "rule" end
local function any(v) return v == nil or v == "" or v == "any" end
local function verdict_of(r) return (tostring(r.action or "allow")):lower() end

-- Checks one .host.firewall.rules entry's values before they reach a command line.
local function check_rule(r)
  local name = rule_name(r)
  local function bad(fmt, ...) return string.format("firewall rule %q: " .. fmt, name, ...) end
  local v = verdict_of(r)
  if v ~= "allow" and v ~= "deny" and v ~= "reject" then return bad("action %s is not allow, deny or reject", v) end
  local d = r.direction or "in"
  if d ~= "in" and d ~= "out" and d ~= "forward" then return bad("direction %s is not in, out or forward", d) end
  for _, k in ipairs({ "source", "destination" }) do
    if not any(r[k]) and not family(r[k]) then return bad("%s %q is not an address or CIDR", k, r[k]) end
  end
  if r.port and not (tostring(r.port):match("^%d+$") or tostring(r.port):match("^%d+%-%d+$")) then
    return bad("port %q is not a port or a range", tostring(r.port))
  end
  if r.port and not r.protocol then return bad("a port needs a protocol") end
  if r.protocol and not ({ tcp = true, udp = true, sctp = true, dccp = true })[r.protocol] then
    return bad("protocol %s is not tcp, udp, sctp or dccp", r.protocol)
  end
  for _, k in ipairs({ "ingress", "egress" }) do
    if r[k] and not tostring(r[k]):match("^[%w._@-]+$") then return bad("%s %q is not a name", k, r[k]) end
  end
end

local function port_range(p)
  local a, b = tostring(p):match("^(%d+)%-(%d+)$")
  if a then return tonumber(a), tonumber(b) end
  local n = tonumber(p)
  return n, n
end

local function v4_number(a)
  local o1, o2, o3, o4 = a:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
  if not o1 then return nil end
  return ((tonumber(o1) * 256 + tonumber(o2)) * 256 + tonumber(o3)) * 256 + tonumber(o4)
end

-- Does `cidr` (an address or a CIDR, or "any") hold `addr`? Unknown forms: assume it may.
local function holds(cidr, addr)
  if any(cidr) or not addr then return true end
  local net, bits = cidr:match("^(.-)/(%d+)$")
  net, bits = net or cidr, tonumber(bits)
  local a, n = v4_number(addr), v4_number(net)
  if a and n then
    bits = bits or 32
    local size = 2 ^ (32 - bits)
    return a // size == n // size
  end
  if family(addr) ~= family(net) then return false end
  return bits ~= nil or net == addr
end

-- M.ssh_guard(rules, ssh) -> nil | why: the first rule that would drop or reject cargoship's
-- own SSH session (ssh = {port = 22, client = the address the host sees us connect from}).
-- Our own rules only ever accept, so only the operator's rules can close the session, and
-- only `in` ones: every front end accepts replies before out and forward rules (firewalld's
-- and ufw's own chains, nftables' first rule of our output and forward chains).
function M.ssh_guard(rules, ssh)
  for _, r in ipairs(rules or {}) do
    local v = verdict_of(r)
    if (v == "deny" or v == "reject") and (r.direction or "in") == "in"
      and (r.protocol == nil or r.protocol == "tcp") and holds(r.source, ssh.client) then
      local lo, hi = port_range(r.port)
      if r.port == nil or (lo <= ssh.port and ssh.port <= hi) then
        return string.format("firewall rule %q would %s the SSH port %d cargoship is connected through%s; "
          .. "refusing the rule set (narrow the rule's source or port)", rule_name(r), v == "deny" and "close" or
          "reject", ssh.port, ssh.client and (" from " .. ssh.client) or "")
      end
    end
  end
end

local function version_at_least(v, major, minor)
  if not v then return true end -- unknown: do not refuse on a guess
  local a, b = v:match("^(%d+)%.(%d+)")
  a, b = tonumber(a), tonumber(b)
  if not a then return true end
  return a > major or (a == major and b >= minor)
end

local function is_interface_name(s)
  return #s <= 15 and not s:find("[%s/:]") and s ~= "ANY" and s ~= "HOST"
end

local function has_zone(fw, z)
  if z == "ANY" or z == "HOST" or #fw.zones == 0 then return true end
  for _, known in ipairs(fw.zones) do if known == z then return true end end
  return false
end

-- M.rule_problems(backend, rule, fw) -> list of sentences (empty when the backend can
-- express the rule). Only what would fail on the host; the syntax was checked at load.
function M.rule_problems(backend, rule, fw)
  local out = {}
  local name = rule.name or rule.key or "?"
  local function add(fmt, ...) out[#out + 1] = string.format("firewall rule %q: " .. fmt, name, ...) end
  if backend == "firewalld" then
    -- forward and outbound filtering need policy objects, which firewalld got in 0.9; the
    -- rich rule priorities that keep in rules in the file's order came in 0.7
    if (rule.direction == "forward" or rule.direction == "out")
      and not version_at_least(fw.firewalld_version, 0, 9) then
      add("direction %s needs firewalld 0.9 or later (policies), the host has %s",
        rule.direction, fw.firewalld_version)
    elseif (rule.direction or "in") == "in" and not version_at_least(fw.firewalld_version, 0, 7) then
      add("needs firewalld 0.7 or later (rich rule priorities keep the rules in the file's order), the host has %s",
        fw.firewalld_version)
    end
    if rule.direction == "forward" then
      for _, k in ipairs({ "ingress", "egress" }) do
        if rule[k] and not has_zone(fw, rule[k]) then
          add("%s %q is not a firewalld zone on this host (forward rules name zones on firewalld; zones: %s)",
            k, rule[k], table.concat(fw.zones, ", "))
        end
      end
    end
  elseif backend == "ufw" or backend == "nftables" then
    if backend == "ufw" and (rule.protocol == "sctp" or rule.protocol == "dccp") then
      add("ufw cannot filter protocol %s (it knows tcp, udp, esp, ah, gre, igmp)", rule.protocol)
    end
    if rule.direction == "forward" then
      for _, k in ipairs({ "ingress", "egress" }) do
        if rule[k] and not is_interface_name(rule[k]) then
          add("%s %q is not an interface name, which %s forward rules need (zone names are firewalld's)",
            k, rule[k], backend)
        end
      end
    end
  end
  return out
end

-- Legacy host.policy entries are firewalld policy files and nothing else.
function M.policy_problems(backend, policy, fw)
  local out = {}
  for name in pairs(policy or {}) do
    if backend ~= "firewalld" then
      out[#out + 1] = string.format("firewall policy %q: host.policy is firewalld-only, this host uses %s",
        name, backend)
    elseif not version_at_least(fw.firewalld_version, 0, 9) then
      out[#out + 1] = string.format("firewall policy %q needs firewalld 0.9 or later, the host has %s",
        name, fw.firewalld_version)
    end
  end
  table.sort(out)
  return out
end


-- Text -> {line = true}: the lines of a recorded or listed rule set.
function M.lines_set(text)
  local set = {}
  for line in (text or ""):gmatch("[^\n]+") do set[line] = true end
  return set
end

-- M.merge_ports(sets) -> {tcp = {..}, udp = {..}}: every port of the given peer-port sets
-- once, a port or range that another range holds left out, ordered by first port (for a
-- host whose engine is not known, which keeps the ports of every engine there is).
function M.merge_ports(sets)
  local out = {}
  for _, proto in ipairs({ "tcp", "udp" }) do
    local all = {}
    for _, s in ipairs(sets or {}) do
      for _, p in ipairs((s or {})[proto] or {}) do all[#all + 1] = tostring(p) end
    end
    local list = {}
    for i, p in ipairs(all) do
      local lo, hi = port_range(p)
      local held = false
      for j, q in ipairs(all) do
        local qlo, qhi = port_range(q)
        -- held by a wider range, or the same range seen earlier
        if j ~= i and qlo <= lo and hi <= qhi and (qhi - qlo > hi - lo or j < i) then held = true end
      end
      if not held then list[#list + 1] = p end
    end
    table.sort(list, function(a, b)
      local alo, ahi = port_range(a)
      local blo, bhi = port_range(b)
      if alo ~= blo then return alo < blo end
      return ahi < bhi
    end)
    out[proto] = list
  end
  return out
end

M.split_trust = split_trust
M.check_ports = check_ports
M.check_rule = check_rule
M.rule_name = rule_name
M.any = any
M.verdict_of = verdict_of

return M

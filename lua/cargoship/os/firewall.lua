-- cargoship.os.firewall: the front end a host would use (engines.md §5.2), the rules it can express, the actions.
--
-- actions(backend, plan) -> action records | nil, why, for one node:
--   plan = {trust = {"10.0.0.2", "10.42.0.0/16", "fd00::/64"..}   (other nodes, pod/service CIDRs)
--           ports = {{port = "6443"|"30000-32767", protocol = "tcp"|"udp"}..}   (.host.ports)
--           previous = content of the recorded ufw rule set (ufw; nil when none)
--           nftables_conf = {path, content} (nftables: the boot-time file to include ours)}
-- firewalld: ipsets in the trusted zone, the ports as service distro-exposed-ports in public,
-- in rules as rich rules of public in the file's order (recorded), out and forward rules in
-- the cargoship-* policies (cargoship.os.firewalld_policies); what the cluster file dropped
-- (ports, rules, policies) is removed; ufw: tagged rules plus the app profile cargoship-ports, the applied
-- set recorded so the next run deletes what was dropped, never `ufw enable`; nftables: one
-- table `inet cargoship` replaced atomically from a file outside /etc/cargoship (§6.9).
local action = require "cargoship.action"
local edit = require "cargoship.os.edit"
local policies = require "cargoship.os.firewalld_policies"
local shell = require "cargoship.shell"

local M = {}

M.FIREWALLD_SERVICE = "distro-exposed-ports"
M.UFW_APP = "cargoship-ports"
M.UFW_RECORD = "/var/lib/cargoship/ufw.rules"
M.NFT_FILE = "/var/lib/cargoship/nftables.nft"

-- Collects the front-end state as key=value lines, without root: firewalld is found by
-- process name, ufw by its config file, zones from the zone directories. Constant text.
M.PROBE = [[
have() { for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  if [ -x "$d/$1" ]; then echo "$d/$1"; return 0; fi; done; return 1; }
if fc=$(have firewall-cmd) || have firewalld >/dev/null; then
  if grep -qx firewalld /proc/[0-9]*/comm 2>/dev/null; then echo firewalld=running
  else echo firewalld=stopped; fi
  [ -n "$fc" ] && v=$("$fc" --version 2>/dev/null) && echo "firewalld_version=$v"
  for z in /usr/lib/firewalld/zones/*.xml /etc/firewalld/zones/*.xml; do
    [ -e "$z" ] && { z=${z##*/}; echo "zone=${z%.xml}"; }
  done
fi
if have ufw >/dev/null; then
  if grep -qi '^ENABLED=yes' /etc/ufw/ufw.conf 2>/dev/null; then echo ufw=active
  else echo ufw=inactive; fi
fi
if have nft >/dev/null; then
  echo nft=present
  for f in /etc/nftables.conf /etc/sysconfig/nftables.conf; do
    [ -e "$f" ] && echo "nftables_conf=$f"; done
  systemctl is-active --quiet nftables 2>/dev/null && echo nftables_service=active
fi
true]]

-- -> {firewalld = "running"|"stopped"|"absent", firewalld_version, zones = {..},
--     ufw = "active"|"inactive"|"absent", nftables = "usable"|"present"|"absent", nftables_conf}
function M.parse(out)
  local f = { firewalld = "absent", ufw = "absent", nftables = "absent", zones = {} }
  local service_active
  for line in (out or ""):gmatch("[^\n]+") do
    local k, v = line:match("^([%w_]+)=(.*)$")
    if k == "zone" then f.zones[#f.zones + 1] = v
    elseif k == "nft" then f.nftables = "present"
    elseif k == "nftables_conf" then f.nftables_conf = f.nftables_conf or v
    elseif k == "nftables_service" then service_active = true
    elseif k == "firewalld_version" then f.firewalld_version = v:match("[%d.]+")
    elseif k then f[k] = v end
  end
  -- kube-proxy and CNI rules alone do not make nftables a firewall someone manages
  if f.nftables == "present" and (service_active or f.nftables_conf) then f.nftables = "usable" end
  return f
end

local RUNNING = { firewalld = "running", ufw = "active", nftables = "usable" }
local STOPPED_WORD = { firewalld = "not running", ufw = "inactive" }

-- M.choose(preferred, fw) -> backend | nil, why
-- The OS's preferred front end when it runs; nothing when it is installed but stopped
-- (starting it could cut the SSH session, writing nftables beneath it would be undone
-- when it starts); else the first that detects: firewalld, ufw, nftables.
function M.choose(preferred, fw)
  if preferred and fw[preferred] == RUNNING[preferred] then
    return preferred, preferred .. " is running (the OS's preferred front end)"
  end
  if preferred and fw[preferred] and fw[preferred] ~= "absent" then
    return nil, string.format("%s is installed but %s: it is never started (it could cut the SSH session) and "
      .. "nothing is written beneath it (it would replace it when started); the firewall is left alone on this host",
      preferred, STOPPED_WORD[preferred] or "not running")
  end
  for _, b in ipairs({ "firewalld", "ufw", "nftables" }) do
    -- a front end installed but stopped rules whatever is written beneath it once started
    if fw[b] and fw[b] ~= "absent" and fw[b] ~= RUNNING[b] and STOPPED_WORD[b] then
      return nil, string.format("%s is installed but %s: nothing is written beneath it (it would replace it when "
        .. "started), and it is never started (it could cut the SSH session); the firewall is left alone on this host",
        b, STOPPED_WORD[b])
    end
    if fw[b] == RUNNING[b] then
      return b, string.format("%s detected (%s)", b, preferred and (preferred .. " is not installed")
        or "the OS names no preferred front end")
    end
  end
  return nil, "no firewall front end detected (firewalld, ufw or nftables)"
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


-- ---- actions -------------------------------------------------------------------------

-- Ports each engine listens on for its peers (engines.md §1.1). Peers are trusted, so they
-- reach them; on nftables, whose chains accept by policy, these are dropped for every other
-- source unless .host.ports opens them (firewalld and ufw deny by default already).
M.ENGINE_PORTS = {
  rke2 = { tcp = { "179", "2379-2381", "4240", "5473", "6443", "9099", "9345", "10250" },
           udp = { "4789", "8472", "51820-51821" } },
  k3s = { tcp = { "2379-2380", "5001", "6443", "10250" }, udp = { "8472", "51820-51821" } },
  upstream = { tcp = { "2379-2380", "6443", "10250", "10256", "10257", "10259" }, udp = { "4789", "8472" } },
}
M.ENGINE_PORTS.any = { tcp = { "179", "2379-2381", "4240", "5001", "5473", "6443", "9099", "9345", "10250",
                               "10256", "10257", "10259" }, udp = { "4789", "8472", "51820-51821" } }

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

M.VAR_DIR = "/var/lib/cargoship"

-- ---- firewalld --------------------------------------------------------------------------

local function xml_ipset(name, entries, v6)
  local out = { '<?xml version="1.0" encoding="utf-8"?>', '<ipset type="hash:net">',
                "  <short>" .. name .. "</short>" }
  if v6 then out[#out + 1] = '  <option name="family" value="inet6"/>' end
  for _, e in ipairs(entries) do out[#out + 1] = "  <entry>" .. e .. "</entry>" end
  out[#out + 1] = "</ipset>"
  return table.concat(out, "\n") .. "\n"
end

-- A rule as a firewalld rich rule: of zone public (direction in), or of one of the policies
-- cargoship.os.firewalld_policies writes (out, forward), which prefixes a priority.
function M.rich_rule(r)
  local parts = { "rule" }
  local fam = (not any(r.source) and family(r.source)) or (not any(r.destination) and family(r.destination))
  if fam then parts[#parts + 1] = fam == 6 and 'family="ipv6"' or 'family="ipv4"' end
  if not any(r.source) then parts[#parts + 1] = string.format('source address="%s"', r.source) end
  if not any(r.destination) then parts[#parts + 1] = string.format('destination address="%s"', r.destination) end
  if r.port then
    parts[#parts + 1] = string.format('port port="%s" protocol="%s"', r.port, r.protocol)
  elseif r.protocol then
    parts[#parts + 1] = string.format('protocol value="%s"', r.protocol)
  end
  local v = verdict_of(r)
  parts[#parts + 1] = v == "allow" and "accept" or v == "deny" and "drop" or "reject"
  return table.concat(parts, " ")
end

-- The i-th of n in rules as a rich rule of zone public. Priorities -n..-1 keep the cluster
-- file's order (the first match decides, as on ufw and nftables) and put the rules in the
-- zone's _pre chain, ahead of its services and ports (.host.ports) and of any rule of the
-- operator's at the default priority 0, which firewalld would otherwise order drop and reject
-- first, accept last.
function M.zone_rich_rule(r, i, n)
  return string.format('rule priority="%d" %s', i - n - 1, M.rich_rule(r):sub(6))
end

M.FIREWALLD_RECORD = "/var/lib/cargoship/firewalld.rules"

local function lines_set(text)
  local set = {}
  for line in (text or ""):gmatch("[^\n]+") do set[line] = true end
  return set
end

local function firewalld(plan, v4, v6)
  local st = plan.state or {}
  local out, reload_first, changed = {}, false, false
  local sets, dropped_sets = {}, {}
  for _, s in ipairs({ { "cargoship-trusted", v4, false }, { "cargoship-trusted6", v6, true } }) do
    if #s[2] == 0 then
      local file = "/etc/firewalld/ipsets/" .. s[1] .. ".xml"
      if plan.state and (st.files or {})[file] then dropped_sets[#dropped_sets + 1] = s[1] end
    else
      local content = xml_ipset(s[1], s[2], s[3])
      local file = "/etc/firewalld/ipsets/" .. s[1] .. ".xml"
      if (st.files or {})[file] ~= content then
        out[#out + 1] = action.write { path = file, mode = "0644", content = content }
        reload_first = true
      end
      sets[#sets + 1] = s[1]
      -- the running ipset must hold what the file says, else a reload is due
      local live = (st.ipset_entries or {})[s[1]]
      if st.ipset_entries and live ~= table.concat(s[2], "\n") then changed = true end
    end
  end
  local has_ports = plan.ports and #plan.ports > 0
  if has_ports then
    local svc = { '<?xml version="1.0" encoding="utf-8"?>', "<service>",
                  "  <short>" .. M.FIREWALLD_SERVICE .. "</short>" }
    for _, p in ipairs(plan.ports) do
      svc[#svc + 1] = string.format('  <port protocol="%s" port="%s"/>', p.protocol or "tcp", p.port)
    end
    svc[#svc + 1] = "</service>"
    local content = table.concat(svc, "\n") .. "\n"
    local file = "/etc/firewalld/services/" .. M.FIREWALLD_SERVICE .. ".xml"
    if (st.files or {})[file] ~= content then
      out[#out + 1] = action.write { path = file, mode = "0644", content = content }
      reload_first = true
    end
  end
  -- the reload makes new permanent ipsets and services known before zones name them
  if reload_first then out[#out + 1] = action.run { cmd = "firewall-cmd --reload", say = "reload firewalld" } end
  local perm_sources, run_sources = lines_set(st.trusted_sources), lines_set(st.trusted_sources_runtime)
  -- what the cluster file no longer asks for: out of the zone first, then the file itself
  for _, name in ipairs(dropped_sets) do
    local src = "ipset:" .. name
    if perm_sources[src] then
      out[#out + 1] = action.run { cmd = shell.fmt("firewall-cmd --permanent --zone=trusted --remove-source=%s", src),
                                   say = "stop trusting ipset " .. name .. " (no address of its family is left)" }
    elseif run_sources[src] then
      changed = true
    end
    out[#out + 1] = action.remove { path = "/etc/firewalld/ipsets/" .. name .. ".xml" }
  end
  local svc_file = "/etc/firewalld/services/" .. M.FIREWALLD_SERVICE .. ".xml"
  if not has_ports and plan.state then
    local svc = lines_set((st.public_services or ""):gsub("%s+", "\n"))
    local run_svc = lines_set((st.public_services_runtime or ""):gsub("%s+", "\n"))
    if svc[M.FIREWALLD_SERVICE] then
      out[#out + 1] = action.run { cmd = shell.fmt("firewall-cmd --permanent --zone=public --remove-service=%s",
        M.FIREWALLD_SERVICE), say = "close the exposed ports in zone public (.host.ports is empty now)" }
    elseif run_svc[M.FIREWALLD_SERVICE] then
      changed = true
    end
    if (st.files or {})[svc_file] then out[#out + 1] = action.remove { path = svc_file } end
  end
  for _, name in ipairs(sets) do
    local src = "ipset:" .. name
    if not (plan.state and perm_sources[src]) then
      out[#out + 1] = action.run { cmd = shell.fmt("firewall-cmd --permanent --zone=trusted --add-source=%s", src),
                                   say = "trust ipset " .. name }
    elseif not run_sources[src] then
      changed = true
    end
  end
  if has_ports then
    local svc = lines_set((st.public_services or ""):gsub("%s+", "\n"))
    local run_svc = lines_set((st.public_services_runtime or ""):gsub("%s+", "\n"))
    if not (plan.state and svc[M.FIREWALLD_SERVICE]) then
      out[#out + 1] = action.run { cmd = shell.fmt("firewall-cmd --permanent --zone=public --add-service=%s",
        M.FIREWALLD_SERVICE), say = "open the exposed ports in zone public" }
    elseif not run_svc[M.FIREWALLD_SERVICE] then
      changed = true
    end
  end
  local now, keep, zone_rules = {}, {}, {}
  for _, r in ipairs(plan.rules or {}) do
    if (r.direction or "in") == "in" then zone_rules[#zone_rules + 1] = r end
  end
  for i, r in ipairs(zone_rules) do
    now[i] = M.zone_rich_rule(r, i, #zone_rules)
    keep[now[i]] = true
  end
  local perm_rich, run_rich = lines_set(st.rich_rules), lines_set(st.rich_rules_runtime)
  for line in (plan.previous or ""):gmatch("[^\n]+") do
    if not keep[line] and (not plan.state or perm_rich[line]) then
      out[#out + 1] = action.run { cmd = shell.fmt("firewall-cmd --permanent --zone=public --remove-rich-rule=%s",
        line), say = "firewalld: drop rich rule " .. line }
    end
  end
  for i, rich in ipairs(now) do
    if not (plan.state and perm_rich[rich]) then
      out[#out + 1] = action.run { cmd = shell.fmt("firewall-cmd --permanent --zone=public --add-rich-rule=%s", rich),
        say = string.format("firewalld rule %s: %s", rule_name(zone_rules[i]), rich) }
    elseif not run_rich[rich] then
      changed = true
    end
  end
  -- out and forward rules: the policy objects cargoship owns
  local want, perr = policies.wanted(plan.rules, M.rich_rule)
  if not want then return nil, perr end
  if plan.state then
    local pacts, lags = policies.actions(want, st.policies, st.policies_runtime)
    for _, a in ipairs(pacts) do out[#out + 1] = a end
    if lags then changed = true end
  else
    for _, a in ipairs((policies.actions(want, {}, {}))) do out[#out + 1] = a end
  end
  local record = #now > 0 and (table.concat(now, "\n") .. "\n") or ""
  local permanent = false
  for _, a in ipairs(out) do
    if a.kind == "remove" or (a.kind == "run" and a.cmd:find("--permanent", 1, true)) then permanent = true end
  end
  -- a zone changed, or the running firewall lags what is permanent: one reload applies it
  if permanent or (changed and not reload_first) then
    out[#out + 1] = action.run { cmd = "firewall-cmd --reload", say = "apply the firewalld changes" }
  end
  if (plan.previous or "") ~= record then
    out[#out + 1] = action.write { path = M.FIREWALLD_RECORD, mode = "0644", content = record, dir_mode = "0700" }
  end
  return out
end

-- ---- ufw --------------------------------------------------------------------------------

-- A rule as the words after `ufw` (the record keeps them; `ufw delete` takes them back).
function M.ufw_rule(r)
  local v = verdict_of(r)
  local w
  local d = r.direction or "in"
  if d == "forward" then
    w = { "route", v, "in", "on", r.ingress, "out", "on", r.egress }
  else
    w = { v, d }
  end
  w[#w + 1] = "from"
  w[#w + 1] = any(r.source) and "any" or r.source
  w[#w + 1] = "to"
  w[#w + 1] = any(r.destination) and "any" or r.destination
  if r.port then
    w[#w + 1] = "port"
    w[#w + 1] = (tostring(r.port):gsub("%-", ":"))
  end
  if r.protocol then
    w[#w + 1] = "proto"
    w[#w + 1] = r.protocol
  end
  return table.concat(w, " ")
end

-- One line per rule, the same words a later run feeds to `ufw delete`: the operator's rules
-- first (ufw takes the first match), then the trusted sources, then the exposed ports. Each
-- carries its own comment tag: `ufw show added` prints rules in ufw's own spelling, so the
-- tags, not the words, tell which of ours the host has.
local function ufw_rules(plan)
  local rules, tags = {}, {}
  for _, r in ipairs(plan.rules or {}) do
    rules[#rules + 1] = M.ufw_rule(r)
    tags[#rules] = "cargoship:rule:" .. rule_name(r)
  end
  for _, a in ipairs(plan.trust or {}) do
    rules[#rules + 1] = "allow from " .. a
    tags[#rules] = "cargoship:trust:" .. a
  end
  if plan.ports and #plan.ports > 0 then
    rules[#rules + 1] = "allow " .. M.UFW_APP
    tags[#rules] = "cargoship:ports"
  end
  return rules, tags
end

-- `ufw show added` output -> {comment tag = true} of the rules that carry one.
function M.parse_ufw_added(out)
  local set = {}
  for line in (out or ""):gmatch("[^\n]+") do
    local tag = line:match("^ufw .- comment '([^']*)'%s*$")
    if tag then set[tag] = true end
  end
  return set
end

local function words_of(line, prefix)
  local words = { table.unpack(prefix) }
  for w in line:gmatch("%S+") do words[#words + 1] = w end
  return words
end

local function ufw(plan)
  local st = plan.state
  local out = {}
  local added = st and M.parse_ufw_added(st.added) or {}
  if plan.ports and #plan.ports > 0 then
    local ports = {}
    for _, p in ipairs(plan.ports) do
      ports[#ports + 1] = tostring(p.port):gsub("%-", ":") .. "/" .. (p.protocol or "tcp") -- ufw spells ranges a:b
    end
    local content = "[" .. M.UFW_APP .. "]\ntitle=cargoship exposed ports\ndescription=ports the cluster file opens "
      .. "(.host.ports)\nports=" .. table.concat(ports, "|") .. "\n"
    if not st or st.app ~= content then
      out[#out + 1] = action.write { path = "/etc/ufw/applications.d/cargoship", mode = "0644", content = content }
      out[#out + 1] = action.run { cmd = shell.fmt("ufw app update %s", M.UFW_APP), say = "load the ufw app profile" }
      -- `app update` rewrites the rules that name the profile but skips reloading them: a
      -- port added or dropped would reach the running firewall only at the next boot
      if st and added["cargoship:ports"] then
        out[#out + 1] = action.run { cmd = "ufw reload", say = "apply the changed ports of profile " .. M.UFW_APP }
      end
    end
  end
  local now, tags = ufw_rules(plan)
  local keep, before = {}, lines_set(plan.previous)
  for _, r in ipairs(now) do keep[r] = true end
  for line in (plan.previous or ""):gmatch("[^\n]+") do
    if not keep[line] then
      out[#out + 1] = action.run { cmd = shell.words(table.unpack(words_of(line, { "ufw", "delete" }))),
                                   say = "ufw: drop rule " .. line }
    end
  end
  for i, r in ipairs(now) do
    -- ours and unchanged: tagged on the host and recorded in these very words
    if not (added[tags[i]] and before[r]) then
      local words = words_of(r, { "ufw" })
      words[#words + 1] = "comment"
      words[#words + 1] = tags[i]
      out[#out + 1] = action.run { cmd = shell.words(table.unpack(words)), say = "ufw " .. r }
    end
  end
  -- no ports left: the profile goes too, after the `ufw delete` above that names it
  if st and st.app and not (plan.ports and #plan.ports > 0) then
    out[#out + 1] = action.remove { path = "/etc/ufw/applications.d/cargoship" }
  end
  local record = #now > 0 and (table.concat(now, "\n") .. "\n") or ""
  if not st or (plan.previous or "") ~= record then
    out[#out + 1] = action.write { path = M.UFW_RECORD, mode = "0644", content = record, dir_mode = "0700" }
  end
  return out
end

-- ---- nftables ---------------------------------------------------------------------------

local function nft_set(name, kind, entries)
  if #entries == 0 then return nil end
  return string.format("  set %s {\n    type %s\n    flags interval\n    elements = { %s }\n  }", name, kind,
    table.concat(entries, ", "))
end

local NFT_VERDICT = { allow = "accept", deny = "drop", reject = "reject" }

function M.nft_rule(r)
  local parts = {}
  local d = r.direction or "in"
  if d == "forward" then
    parts[#parts + 1] = string.format('iifname "%s" oifname "%s"', r.ingress, r.egress)
  end
  for _, k in ipairs({ { "source", "saddr" }, { "destination", "daddr" } }) do
    local v = r[k[1]]
    if not any(v) then parts[#parts + 1] = string.format("%s %s %s", family(v) == 6 and "ip6" or "ip", k[2], v) end
  end
  if r.port then
    parts[#parts + 1] = string.format("%s dport %s", r.protocol, r.port)
  elseif r.protocol then
    parts[#parts + 1] = "meta l4proto " .. r.protocol
  end
  parts[#parts + 1] = NFT_VERDICT[verdict_of(r)]
  parts[#parts + 1] = string.format('comment "cargoship:%s"', rule_name(r))
  return table.concat(parts, " ")
end

-- Declaring the table before deleting it makes the file load whether it exists or not,
-- and nft applies the whole file as one transaction. Base chains accept by policy (no
-- global flush, nothing of anyone else's touched): the operator's rules come first, then
-- the trusted sources and the exposed ports are accepted, then the engine's own ports
-- (plan.engine_ports) are dropped for everyone else.
function M.nftables_ruleset(plan)
  local v4, v6, why = split_trust(plan.trust)
  if not v4 then return nil, why end
  local body = {}
  for _, s in ipairs({ nft_set("trusted4", "ipv4_addr", v4), nft_set("trusted6", "ipv6_addr", v6) }) do
    body[#body + 1] = s
  end
  local chains = { ["in"] = {}, out = {}, forward = {} }
  for _, r in ipairs(plan.rules or {}) do
    local list = chains[r.direction or "in"]
    list[#list + 1] = "    " .. M.nft_rule(r)
  end
  local input = chains["in"]
  if #v4 > 0 then input[#input + 1] = "    ip saddr @trusted4 accept" end
  if #v6 > 0 then input[#input + 1] = "    ip6 saddr @trusted6 accept" end
  for _, proto in ipairs({ "tcp", "udp" }) do
    local ports = {}
    for _, p in ipairs(plan.ports or {}) do
      if (p.protocol or "tcp") == proto then ports[#ports + 1] = tostring(p.port) end
    end
    if #ports > 0 then
      input[#input + 1] = string.format("    %s dport { %s } accept", proto, table.concat(ports, ", "))
    end
  end
  for _, proto in ipairs({ "tcp", "udp" }) do
    local ports = (plan.engine_ports or {})[proto] or {}
    if #ports > 0 then
      input[#input + 1] = string.format('    %s dport { %s } drop comment "cargoship: engine ports, peers only"',
        proto, table.concat(ports, ", "))
    end
  end
  -- out and forward rules filter new connections only, as on firewalld and ufw: replies
  -- pass, cargoship's own SSH session among them, whatever the operator's rules say
  for _, d in ipairs({ "out", "forward" }) do
    if #chains[d] > 0 then table.insert(chains[d], 1, "    ct state established,related accept") end
  end
  local hooks = { { "input", "in" }, { "output", "out" }, { "forward", "forward" } }
  for _, hk in ipairs(hooks) do
    local rules = chains[hk[2]]
    if hk[1] == "input" or #rules > 0 then
      body[#body + 1] = string.format("  chain %s {\n    type filter hook %s priority filter; policy accept;\n%s\n  }",
        hk[1], hk[1], table.concat(rules, "\n"))
    end
  end
  return "table inet cargoship {}\ndelete table inet cargoship\ntable inet cargoship {\n"
    .. table.concat(body, "\n") .. "\n}\n"
end

local function nftables(plan)
  local text, why = M.nftables_ruleset(plan)
  if not text then return nil, why end
  local st = plan.state
  local out = {}
  if not st or st.file ~= text or not st.table_loaded then
    if not st or st.file ~= text then
      out[#out + 1] = action.write { path = M.NFT_FILE, content = text, mode = "0600", dir_mode = "0700" }
    end
    out[#out + 1] = action.run { cmd = shell.fmt("nft -f %s", M.NFT_FILE), say = "load table inet cargoship" }
  end
  local conf = plan.nftables_conf
  if conf and conf.path then
    local new = edit.include_line(conf.content, M.NFT_FILE)
    if new ~= conf.content then
      out[#out + 1] = action.write { path = conf.path, content = new,
                                     say = "include table inet cargoship from " .. conf.path .. " at boot" }
    end
  end
  return out
end

-- M.actions(backend, plan) -> records | nil, why. plan.state, when given, is what the host
-- has now (see the phase "Updating hosts firewall"); only what differs is returned. Without
-- it, everything is returned as for a host that has nothing yet.
function M.actions(backend, plan)
  plan = plan or {}
  local v4, v6, why = split_trust(plan.trust)
  if not v4 then return nil, why end
  why = check_ports(plan.ports)
  if why then return nil, why end
  for _, r in ipairs(plan.rules or {}) do
    why = check_rule(r)
    if why then return nil, why end
  end
  if backend == "firewalld" then return firewalld(plan, v4, v6) end
  if backend == "ufw" then return ufw(plan) end
  if backend == "nftables" then return nftables(plan) end
  return nil, "firewall: no actions for front end " .. tostring(backend)
end

return M

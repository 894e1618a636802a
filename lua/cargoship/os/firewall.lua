-- cargoship.os.firewall: the front end a host would use (engines.md §5.2), the rules it can express, the actions.
--
-- actions(backend, plan) -> action records | nil, why, for one node:
--   plan = {trust = {"10.0.0.2", "10.42.0.0/16", "fd00::/64"..}   (other nodes, pod/service CIDRs)
--           ports = {{port = "6443"|"30000-32767", protocol = "tcp"|"udp"}..}   (.host.ports)
--           previous = content of the recorded ufw rule set (ufw; nil when none)
--           nftables_conf = {path, content} (nftables: the boot-time file to include ours)}
-- firewalld: ipsets in the trusted zone, the ports as service distro-exposed-ports in public;
-- ufw: tagged rules plus the app profile cargoship-ports, the applied set recorded so the
-- next run deletes what was dropped, never `ufw enable`; nftables: one table `inet cargoship`
-- replaced atomically from a file outside /etc/cargoship (engines.md §6.9).
local action = require "cargoship.action"
local edit = require "cargoship.os.edit"
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
    return nil, string.format("%s is installed but %s: the firewall is left alone on this host",
      preferred, STOPPED_WORD[preferred] or "not running")
  end
  for _, b in ipairs({ "firewalld", "ufw", "nftables" }) do
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
    -- forward and outbound filtering need policy objects, which firewalld got in 0.9
    if (rule.direction == "forward" or rule.direction == "out")
      and not version_at_least(fw.firewalld_version, 0, 9) then
      add("direction %s needs firewalld 0.9 or later (policies), the host has %s",
        rule.direction, fw.firewalld_version)
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

local function family(a)
  if a:match("^%d+%.%d+%.%d+%.%d+$") or a:match("^%d+%.%d+%.%d+%.%d+/%d+$") then return 4 end
  if a:find(":", 1, true) and (a:match("^[%x:]+$") or a:match("^[%x:]+/%d+$")) then return 6 end
  return nil
end

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

local function xml_ipset(name, entries, v6)
  local out = { '<?xml version="1.0" encoding="utf-8"?>', '<ipset type="hash:net">',
                "  <short>" .. name .. "</short>" }
  if v6 then out[#out + 1] = '  <option name="family" value="inet6"/>' end
  for _, e in ipairs(entries) do out[#out + 1] = "  <entry>" .. e .. "</entry>" end
  out[#out + 1] = "</ipset>"
  return table.concat(out, "\n") .. "\n"
end

local function firewalld(plan, v4, v6)
  local out, sets = {}, {}
  for _, s in ipairs({ { "cargoship-trusted", v4, false }, { "cargoship-trusted6", v6, true } }) do
    if #s[2] > 0 then
      out[#out + 1] = action.write { path = "/etc/firewalld/ipsets/" .. s[1] .. ".xml", mode = "0644",
                                     content = xml_ipset(s[1], s[2], s[3]) }
      sets[#sets + 1] = s[1]
    end
  end
  local svc = { '<?xml version="1.0" encoding="utf-8"?>', "<service>",
                "  <short>" .. M.FIREWALLD_SERVICE .. "</short>" }
  for _, p in ipairs(plan.ports or {}) do
    svc[#svc + 1] = string.format('  <port protocol="%s" port="%s"/>', p.protocol or "tcp", p.port)
  end
  svc[#svc + 1] = "</service>"
  local has_ports = plan.ports and #plan.ports > 0
  if has_ports then
    out[#out + 1] = action.write { path = "/etc/firewalld/services/" .. M.FIREWALLD_SERVICE .. ".xml", mode = "0644",
                                   content = table.concat(svc, "\n") .. "\n" }
  end
  -- the reload makes the new permanent ipsets and service known before zones name them
  out[#out + 1] = action.run { cmd = "firewall-cmd --reload", say = "reload firewalld" }
  for _, name in ipairs(sets) do
    out[#out + 1] = action.run { cmd = shell.fmt("firewall-cmd --permanent --zone=trusted --add-source=%s",
      "ipset:" .. name), say = "trust ipset " .. name }
  end
  if has_ports then
    out[#out + 1] = action.run { cmd = shell.fmt("firewall-cmd --permanent --zone=public --add-service=%s",
      M.FIREWALLD_SERVICE), say = "open the exposed ports in zone public" }
  end
  out[#out + 1] = action.run { cmd = "firewall-cmd --reload", say = "apply the firewalld changes" }
  return out
end

-- One line per rule, the same words a later run feeds to `ufw delete`.
local function ufw_rules(plan)
  local rules = {}
  for _, a in ipairs(plan.trust or {}) do rules[#rules + 1] = "allow from " .. a end
  if plan.ports and #plan.ports > 0 then rules[#rules + 1] = "allow " .. M.UFW_APP end
  return rules
end

local function ufw(plan)
  local out = {}
  if plan.ports and #plan.ports > 0 then
    local ports = {}
    for _, p in ipairs(plan.ports) do
      ports[#ports + 1] = tostring(p.port):gsub("%-", ":") .. "/" .. (p.protocol or "tcp") -- ufw spells ranges a:b
    end
    out[#out + 1] = action.write { path = "/etc/ufw/applications.d/cargoship", mode = "0644", content =
      "[" .. M.UFW_APP .. "]\ntitle=cargoship exposed ports\ndescription=ports the cluster file opens (.host.ports)\n"
      .. "ports=" .. table.concat(ports, "|") .. "\n" }
    out[#out + 1] = action.run { cmd = shell.fmt("ufw app update %s", M.UFW_APP), say = "load the ufw app profile" }
  end
  local now, keep = ufw_rules(plan), {}
  for _, r in ipairs(now) do keep[r] = true end
  for line in (plan.previous or ""):gmatch("[^\n]+") do
    if not keep[line] and line:match("^allow ") then
      local words = { "ufw", "delete" }
      for w in line:gmatch("%S+") do words[#words + 1] = w end
      out[#out + 1] = action.run { cmd = shell.words(table.unpack(words)), say = "ufw: drop rule " .. line }
    end
  end
  for _, r in ipairs(now) do
    local words = { "ufw" }
    for w in r:gmatch("%S+") do words[#words + 1] = w end
    words[#words + 1] = "comment"
    words[#words + 1] = "cargoship:" .. (r:match("^allow from") and "trust" or "ports")
    out[#out + 1] = action.run { cmd = shell.words(table.unpack(words)), say = "ufw " .. r }
  end
  out[#out + 1] = action.write { path = M.UFW_RECORD, mode = "0644", content = #now > 0
    and (table.concat(now, "\n") .. "\n") or "" }
  return out
end

local function nft_set(name, kind, entries)
  if #entries == 0 then return nil end
  return string.format("  set %s {\n    type %s\n    flags interval\n    elements = { %s }\n  }", name, kind,
    table.concat(entries, ", "))
end

-- Declaring the table before deleting it makes the file load whether it exists or not,
-- and nft applies the whole file as one transaction.
function M.nftables_ruleset(plan)
  local v4, v6, why = split_trust(plan.trust)
  if not v4 then return nil, why end
  local body = {}
  for _, s in ipairs({ nft_set("trusted4", "ipv4_addr", v4), nft_set("trusted6", "ipv6_addr", v6) }) do
    body[#body + 1] = s
  end
  local rules = { "    type filter hook input priority filter; policy accept;" }
  if #v4 > 0 then rules[#rules + 1] = "    ip saddr @trusted4 accept" end
  if #v6 > 0 then rules[#rules + 1] = "    ip6 saddr @trusted6 accept" end
  for _, proto in ipairs({ "tcp", "udp" }) do
    local ports = {}
    for _, p in ipairs(plan.ports or {}) do
      if (p.protocol or "tcp") == proto then ports[#ports + 1] = tostring(p.port) end
    end
    if #ports > 0 then
      rules[#rules + 1] = string.format("    %s dport { %s } accept", proto, table.concat(ports, ", "))
    end
  end
  body[#body + 1] = "  chain input {\n" .. table.concat(rules, "\n") .. "\n  }"
  return "table inet cargoship {}\ndelete table inet cargoship\ntable inet cargoship {\n"
    .. table.concat(body, "\n") .. "\n}\n"
end

local function nftables(plan)
  local text, why = M.nftables_ruleset(plan)
  if not text then return nil, why end
  local out = { action.write { path = M.NFT_FILE, content = text, mode = "0600" },
                action.run { cmd = shell.fmt("nft -f %s", M.NFT_FILE), say = "load table inet cargoship" } }
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

function M.actions(backend, plan)
  plan = plan or {}
  local v4, v6, why = split_trust(plan.trust)
  if not v4 then return nil, why end
  why = check_ports(plan.ports)
  if why then return nil, why end
  if backend == "firewalld" then return firewalld(plan, v4, v6) end
  if backend == "ufw" then return ufw(plan) end
  if backend == "nftables" then return nftables(plan) end
  return nil, "firewall: no actions for front end " .. tostring(backend)
end

return M

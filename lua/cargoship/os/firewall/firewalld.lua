-- cargoship.os.firewall.firewalld: the firewalld front end: trusted ipsets, the exposed-ports service, rich rules.
--
-- Trusted addresses as ipsets in zone trusted, .host.ports as service distro-exposed-ports in
-- public, in rules as rich rules of public in the file's order (recorded in FIREWALLD_RECORD),
-- out and forward rules in the cargoship-* policies (cargoship.os.firewall.firewalld_policies);
-- what the cluster file dropped (ports, rules, policies) is removed.
local action = require "cargoship.action"
local policies = require "cargoship.os.firewall.firewalld_policies"
local model = require "cargoship.os.firewall.rules"
local shell = require "cargoship.shell"

local any, family, verdict_of, rule_name = model.any, model.family, model.verdict_of, model.rule_name
local lines_set = model.lines_set

local M = {}

M.FIREWALLD_SERVICE = "distro-exposed-ports"

local function xml_ipset(name, entries, v6)
  local out = { '<?xml version="1.0" encoding="utf-8"?>', '<ipset type="hash:net">',
                "  <short>" .. name .. "</short>" }
  if v6 then out[#out + 1] = '  <option name="family" value="inet6"/>' end
  for _, e in ipairs(entries) do out[#out + 1] = "  <entry>" .. e .. "</entry>" end
  out[#out + 1] = "</ipset>"
  return table.concat(out, "\n") .. "\n"
end

-- A rule as a firewalld rich rule: of zone public (direction in), or of one of the policies
-- cargoship.os.firewall.firewalld_policies writes (out, forward), which prefixes a priority.
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

-- M.actions(plan, v4, v6) -> records | nil, why: plan checked by cargoship.os.firewall, its
-- trusted addresses split by family.
function M.actions(plan, v4, v6)
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

return M

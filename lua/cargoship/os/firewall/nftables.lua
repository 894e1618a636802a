-- cargoship.os.firewall.nftables: the nftables front end: one table `inet cargoship`, replaced at once, loaded at boot.
--
-- The table lives in NFT_FILE, outside /etc/cargoship which the sync phases prune (§6.9), and
-- the distribution's boot-time nftables file includes it.
local action = require "cargoship.action"
local edit = require "cargoship.os.edit"
local model = require "cargoship.os.firewall.rules"
local shell = require "cargoship.shell"

local any, family, verdict_of, rule_name = model.any, model.family, model.verdict_of, model.rule_name
local split_trust = model.split_trust

local M = {}

M.NFT_FILE = "/var/lib/cargoship/nftables.nft"

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
-- (plan.peer_ports) are dropped for everyone else.
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
  -- the host to itself (its own private address goes over lo: a server registering with its
  -- own API) passes, as firewalld's and ufw's own rules let it: the host is not in its trust set
  table.insert(input, #input + 1, '    iifname "lo" accept')
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
    local ports = (plan.peer_ports or {})[proto] or {}
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

-- M.actions(plan) -> records | nil, why: plan checked by cargoship.os.firewall.
function M.actions(plan)
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

-- ---- reset: the inverse of actions ---------------------------------------------------------

local BOOT_FILES = { "/etc/nftables.conf", "/etc/sysconfig/nftables.conf" }

-- M.removal_probes() -> {key = command}: the table loaded now, and each boot-time file.
function M.removal_probes()
  local p = { nft_table = "nft list table inet cargoship >/dev/null 2>&1" }
  for i, f in ipairs(BOOT_FILES) do
    p["nft_conf_" .. i] = shell.fmt("if [ -e %s ]; then cat -- %s; else exit 44; fi", f, f)
  end
  return p
end

-- M.removal(res) -> records: the table deleted, the include line taken out of the boot file.
-- The table file itself lives in /var/lib/cargoship, which reset removes whole.
function M.removal(res)
  local out = {}
  if res.nft_table and res.nft_table.code == 0 then
    out[#out + 1] = action.run { cmd = "nft delete table inet cargoship", say = "delete table inet cargoship" }
  end
  for i, f in ipairs(BOOT_FILES) do
    local r = res["nft_conf_" .. i]
    if r and r.code == 0 then
      local line = string.format('include "%s"', M.NFT_FILE)
      local kept, dropped = {}, false
      for l in (r.out .. (r.out:sub(-1) == "\n" and "" or "\n")):gmatch("([^\n]*)\n") do
        if l:match("^%s*(.-)%s*$") == line then dropped = true else kept[#kept + 1] = l end
      end
      if dropped then
        local text = #kept > 0 and (table.concat(kept, "\n") .. "\n") or ""
        out[#out + 1] = action.write { path = f, content = text,
                                       say = "stop including table inet cargoship from " .. f }
      end
    end
  end
  return out
end

return M

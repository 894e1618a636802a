-- cargoship.os.firewall.firewalld_policies: out and forward rules as firewalld policy objects cargoship owns.
--
-- firewalld zones filter only what enters the host; traffic the host sends or forwards is
-- filtered by policies (firewalld 0.9+). cargoship owns every policy named cargoship-*:
--   cargoship-out        ingress HOST, egress ANY: the direction: out rules
--   cargoship-fwd-XXXX   ingress <rule.ingress>, egress <rule.egress>: the direction: forward
--                        rules of one zone pair (XXXX: 4 hex digits of the pair's sha256, as
--                        firewalld allows 18 characters in a policy name)
-- Each policy's rich rules carry priority 1..n in the cluster file's order, so the first
-- rule that matches decides, as on ufw and nftables (firewalld would otherwise try every
-- drop and reject before any accept). Target CONTINUE: what no rule matches goes on as
-- without cargoship. Since cargoship owns the whole policy, its live content is the state:
-- no record is kept, and a policy or rule the cluster file no longer has is removed.
--
-- wanted(rules, rich_rule) -> list of {name, ingress = {..}, egress = {..}, rules = {rich..}}
-- PROBE / PROBE_RUNTIME: constant shell text printing every cargoship-* policy
-- parse(out) -> {[name] = {target, ingress = {..}, egress = {..}, rules = {..}}}
-- actions(want, permanent, runtime) -> records, lags (the runtime differs from the wanted set)
local action = require "cargoship.action"
local shell = require "cargoship.shell"
local digest = require "cargoship.digest"

local M = {}

M.PREFIX = "cargoship-"
M.OUT = "cargoship-out"
M.MAX_NAME = 18

local function probe(permanent)
  local p = permanent and " --permanent" or ""
  return "ps=$(firewall-cmd" .. p .. " --get-policies 2>/dev/null) || exit 0\n"
    .. "for p in $ps; do case $p in cargoship-*) echo \"policy=$p\"; firewall-cmd" .. p
    .. " --info-policy=\"$p\" || exit 1;; esac; done"
end
M.PROBE, M.PROBE_RUNTIME = probe(true), probe(false)

function M.forward_name(ingress, egress)
  return "cargoship-fwd-" .. digest.sha256(ingress .. "\n" .. egress):sub(1, 4)
end

-- The policies the rules call for, in a stable order (out first, then forward by first use).
function M.wanted(rules, rich_rule)
  local list, by_name = {}, {}
  for _, r in ipairs(rules or {}) do
    local d = r.direction or "in"
    if d ~= "in" then
      local name, ingress, egress
      if d == "out" then name, ingress, egress = M.OUT, "HOST", "ANY"
      else name, ingress, egress = M.forward_name(r.ingress, r.egress), r.ingress, r.egress end
      local p = by_name[name]
      if p and (p.ingress[1] ~= ingress or p.egress[1] ~= egress) then
        return nil, string.format("firewall rule %q: zones %s -> %s give the policy name %s, which %s -> %s has "
          .. "already; rename a zone", r.name or r.key or "?", ingress, egress, name, p.ingress[1], p.egress[1])
      end
      if not p then
        p = { name = name, ingress = { ingress }, egress = { egress }, rules = {} }
        by_name[name] = p
        if d == "out" then table.insert(list, 1, p) else list[#list + 1] = p end
      end
      local rich = rich_rule(r)
      p.rules[#p.rules + 1] = string.format('rule priority="%d" %s', #p.rules + 1, rich:sub(6))
    end
  end
  return list
end

local function words(v)
  local out = {}
  for w in (v or ""):gmatch("%S+") do out[#out + 1] = w end
  return out
end

-- `--info-policy` blocks, each after our own "policy=NAME" line.
function M.parse(out)
  local set, cur, in_rich = {}, nil, false
  for line in (out or ""):gmatch("[^\n]+") do
    local name = line:match("^policy=(%S+)$")
    if name then
      cur, in_rich = { target = "CONTINUE", ingress = {}, egress = {}, rules = {} }, false
      set[name] = cur
    elseif cur then
      local k, v = line:match("^%s+([%w -]+):%s*(.-)%s*$")
      if line:match("^\t") and in_rich then cur.rules[#cur.rules + 1] = (line:gsub("^%s+", ""):gsub("%s+$", ""))
      elseif k == "target" then cur.target = v
      elseif k == "ingress-zones" then cur.ingress = words(v)
      elseif k == "egress-zones" then cur.egress = words(v)
      elseif k == "rich rules" then in_rich = true
      elseif k then in_rich = false end
    end
  end
  return set
end

local function set_of(list)
  local s = {}
  for _, x in ipairs(list or {}) do s[x] = true end
  return s
end

local function same_set(a, b)
  local sa, sb = set_of(a), set_of(b)
  for x in pairs(sa) do if not sb[x] then return false end end
  for x in pairs(sb) do if not sa[x] then return false end end
  return true
end

local function same_policy(want, have)
  return have ~= nil and have.target == "CONTINUE" and same_set(want.ingress, have.ingress)
    and same_set(want.egress, have.egress) and same_set(want.rules, have.rules)
end

local function cmd(fmt, ...)
  return shell.fmt("firewall-cmd --permanent " .. fmt, ...)
end

-- Records that turn the permanent cargoship-* policies into `want`; lags = the running
-- firewall differs from what is wanted (a reload applies the permanent configuration).
function M.actions(want, permanent, runtime)
  local out, lags = {}, false
  permanent, runtime = permanent or {}, runtime or {}
  local wanted = {}
  for _, p in ipairs(want) do
    wanted[p.name] = true
    local have = permanent[p.name]
    local label = string.format("firewalld policy %s (%s -> %s)", p.name, p.ingress[1], p.egress[1])
    if not have then
      out[#out + 1] = action.run { cmd = cmd("--new-policy=%s", p.name), say = "create " .. label }
      have = { target = "CONTINUE", ingress = {}, egress = {}, rules = {} }
    elseif have.target ~= "CONTINUE" then
      out[#out + 1] = action.run { cmd = cmd("--policy=%s --set-target=CONTINUE", p.name),
                                   say = label .. ": target CONTINUE" }
    end
    for _, side in ipairs({ "ingress", "egress" }) do
      local keep, now = set_of(p[side]), set_of(have[side])
      -- removals first: firewalld takes HOST and ANY only alone
      for _, z in ipairs(have[side]) do
        if not keep[z] then
          out[#out + 1] = action.run { cmd = cmd("--policy=%s --remove-" .. side .. "-zone=%s", p.name, z),
                                       say = string.format("%s: drop %s zone %s", label, side, z) }
        end
      end
      for _, z in ipairs(p[side]) do
        if not now[z] then
          out[#out + 1] = action.run { cmd = cmd("--policy=%s --add-" .. side .. "-zone=%s", p.name, z),
                                       say = string.format("%s: %s zone %s", label, side, z) }
        end
      end
    end
    local keep, now = set_of(p.rules), set_of(have.rules)
    for _, r in ipairs(have.rules) do
      if not keep[r] then
        out[#out + 1] = action.run { cmd = cmd("--policy=%s --remove-rich-rule=%s", p.name, r),
                                     say = label .. ": drop rich rule " .. r }
      end
    end
    for _, r in ipairs(p.rules) do
      if not now[r] then
        out[#out + 1] = action.run { cmd = cmd("--policy=%s --add-rich-rule=%s", p.name, r),
                                     say = label .. ": " .. r }
      end
    end
    if not same_policy(p, runtime[p.name]) then lags = true end
  end
  local gone = {}
  for name in pairs(permanent) do
    if name:sub(1, #M.PREFIX) == M.PREFIX and not wanted[name] then gone[#gone + 1] = name end
  end
  table.sort(gone)
  for _, name in ipairs(gone) do
    out[#out + 1] = action.run { cmd = cmd("--delete-policy=%s", name),
                                 say = "delete firewalld policy " .. name .. " (the cluster file has no rule for it)" }
  end
  for name in pairs(runtime) do
    if name:sub(1, #M.PREFIX) == M.PREFIX and not wanted[name] then lags = true end
  end
  return out, lags
end

return M

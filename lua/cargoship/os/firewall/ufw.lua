-- cargoship.os.firewall.ufw: the ufw front end: tagged rules, the cargoship-ports app profile, the set recorded.
--
-- The set applied is recorded (UFW_RECORD) so the next run deletes what the cluster file
-- dropped; `ufw enable` is never run (starting a firewall could cut the SSH session).
local action = require "cargoship.action"
local model = require "cargoship.os.firewall.rules"
local shell = require "cargoship.shell"

local any, verdict_of, rule_name, lines_set = model.any, model.verdict_of, model.rule_name, model.lines_set

local M = {}

M.UFW_APP = "cargoship-ports"
M.UFW_RECORD = "/var/lib/cargoship/ufw.rules"

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

-- M.actions(plan) -> records: plan checked by cargoship.os.firewall.
function M.actions(plan)
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

-- ---- reset: the inverse of actions ---------------------------------------------------------

M.REMOVAL_PROBES = {
  ufw_record = shell.fmt("if [ -e %s ]; then cat -- %s; else exit 44; fi", M.UFW_RECORD, M.UFW_RECORD),
  ufw_app = "test -e /etc/ufw/applications.d/cargoship",
}

-- M.removal(res) -> records: every recorded rule deleted (`ufw delete` takes the recorded
-- words back), then the app profile; the record goes with /var/lib/cargoship.
function M.removal(res)
  local out = {}
  if res.ufw_record and res.ufw_record.code == 0 then
    for line in res.ufw_record.out:gmatch("[^\n]+") do
      out[#out + 1] = action.run { cmd = shell.words(table.unpack(words_of(line, { "ufw", "delete" }))),
                                   say = "ufw: drop rule " .. line }
    end
  end
  if res.ufw_app and res.ufw_app.code == 0 then
    out[#out + 1] = action.remove { path = "/etc/ufw/applications.d/cargoship" }
  end
  return out
end

return M

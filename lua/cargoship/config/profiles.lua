-- cargoship.config.profiles: `spec.config.profiles`, batch-size (concurrency) rules, and the
-- merge of a profile into a host (cluster-yaml.md §3.2).
local check = require "cargoship.config.check"
local FIELDS = require "cargoship.config.fields"
local errors = require "cargoship.config.errors"
local firewall = require "cargoship.config.firewall"
local kube = require "cargoship.config.kube"
local yaml = require "cargoship.yaml"

local M = {}

local quote, join, describe = errors.quote, errors.join, errors.describe

local EXPECTED = "expected an integer >= 0, \"N\" or a percentage \"N%\" (0-100)"

-- Concurrency as written (integer or string) -> {kind = "fixed"|"percent"|"unlimited"|
-- "default", value = n} or nil, why. Blank means "use the command line's value".
function M.parse_concurrency(v)
  if v == nil or yaml.is_null(v) then return { kind = "default" } end
  if math.type(v) == "integer" then
    if v < 0 then return nil, EXPECTED .. ", got " .. describe(v) end
    return v == 0 and { kind = "unlimited", value = 0 } or { kind = "fixed", value = v }
  end
  if type(v) ~= "string" then return nil, EXPECTED .. ", got " .. describe(v) end
  local s = v:match("^%s*(.-)%s*$")
  if s == "" then return { kind = "default" } end
  local pct = s:match("^(%d+)%%$")
  if pct then
    local n = math.tointeger(tonumber(pct))
    if not n or n > 100 then return nil, "percentage must be 0-100, got " .. quote(v) end
    return { kind = "percent", value = n }
  end
  if s:match("^%d+$") then
    local n = math.tointeger(tonumber(s))
    if not n then return nil, EXPECTED .. ", got " .. describe(v) end
    return n == 0 and { kind = "unlimited", value = 0 } or { kind = "fixed", value = n }
  end
  return nil, EXPECTED .. ", got " .. describe(v)
end

-- The batch size for a group of `group_size` hosts. `spec` is a parsed concurrency table
-- or the raw value; a "default" one falls back to `cli_default` (parsed the same way; when
-- that is blank too, the whole group runs at once). Returns n >= 1, or nil, why.
function M.resolve_concurrency(spec, group_size, cli_default)
  local c, why = spec, nil
  if type(spec) ~= "table" or spec.kind == nil then c, why = M.parse_concurrency(spec) end
  if not c then return nil, why end
  if c.kind == "default" then
    c, why = M.parse_concurrency(cli_default)
    if not c then return nil, "command line concurrency: " .. why end
    if c.kind == "default" then c = { kind = "unlimited", value = 0 } end
  end
  local total = math.max(group_size or 0, 0)
  if c.kind == "unlimited" then return math.max(total, 1) end
  if c.kind == "percent" then
    return math.max(1, (total * c.value + 99) // 100)
  end
  return c.value
end

-- Profile names become the node label node-role.kubernetes.io/<name>=true.
local function name_problem(name)
  if #name > 63 or not (name:match("^[%w]$") or name:match("^[%w][%w_.-]*[%w]$")) then
    return "profile name must be 1-63 letters, digits, '-', '_' or '.', starting and ending"
      .. " alphanumeric (it becomes the label node-role.kubernetes.io/<name>), got " .. quote(name)
  end
end

-- Decodes spec.config.profiles -> map name -> {name, concurrency, engine, host, source}.
function M.decode(ctx, cfg, path)
  local out = {}
  local profiles = check.mapping(ctx, cfg, "profiles", path)
  if not profiles then return out end
  local ppath = join(path, "profiles")
  for _, name in ipairs(check.keys(profiles)) do
    local npath = join(ppath, name)
    local why = name_problem(name)
    if why then ctx.errs:at_key(profiles, name, npath, why) end
    local p = { name = name, concurrency = { kind = "default" } }
    local body = profiles[name]
    if yaml.is_null(body) then body = {} end
    if type(body) ~= "table" or errors.kind_of(body) == "sequence" then
      check.wrong(ctx, profiles, name, ppath, "a mapping", body)
      body = {}
    end
    check.fields(ctx, body, npath, FIELDS.profile)
    if check.present(body, "concurrency") and not ctx.errs:is_spoiled(body, "concurrency") then
      local raw = body.concurrency
      local e = ctx.expanded and ctx.expanded[body]
      if type(raw) == "string" and e and e.concurrency and raw:match("^%s*%d+%s*$") then
        raw = math.tointeger(tonumber(raw))
      end
      local c, cwhy = M.parse_concurrency(raw)
      if c then p.concurrency = c
      else ctx.errs:at_value(body, "concurrency", join(npath, "concurrency"), cwhy) end
    end
    p.engine = kube.engine(ctx, body, "engine", npath)
    p.host = firewall.host(ctx, body, "host", npath)
    local line, col = yaml.where(profiles, name)
    p.source = { file = ctx.file, line = line, col = col, path = npath }
    out[name] = p
  end
  return out
end

local function copy(t)
  local c = {}
  for k, v in pairs(t or {}) do c[k] = v end
  return c
end

local function copy_list(t)
  return table.move(t or {}, 1, #(t or {}), 1, {})
end

-- A new host with `cluster.profiles[host.profile]` merged in: labels, taints, ports and
-- policy come from the profile only when the host's own are empty; firewall rules are the
-- union by rule key with the host's rule winning. Host rules come first: on backends where
-- order decides (ufw), the host's specific rule should be seen before a profile's general
-- one. An unknown or absent profile leaves the host as it is (load already refused unknown
-- names; this keeps merge total for hand-built hosts).
function M.merge_profile(cluster, host)
  local merged = copy(host)
  local e, h = host.engine or {}, host.host or {}
  local fw = h.firewall or {}
  merged.engine = { labels = copy(e.labels), taints = copy_list(e.taints) }
  merged.host = { ports = copy_list(h.ports), policy = copy(h.policy),
                  firewall = { rules = copy_list(fw.rules) } }
  local p = host.profile and cluster.profiles and cluster.profiles[host.profile]
  if not p then return merged end
  local pe, ph = p.engine or {}, p.host or {}
  if next(merged.engine.labels) == nil then merged.engine.labels = copy(pe.labels) end
  if #merged.engine.taints == 0 then merged.engine.taints = copy_list(pe.taints) end
  if #merged.host.ports == 0 then merged.host.ports = copy_list(ph.ports) end
  if next(merged.host.policy) == nil then merged.host.policy = copy(ph.policy) end
  local rules, seen = merged.host.firewall.rules, {}
  for _, r in ipairs(rules) do seen[r.key or firewall.rule_key(r)] = true end
  for _, r in ipairs((ph.firewall or {}).rules or {}) do
    local key = r.key or firewall.rule_key(r)
    if not seen[key] then
      seen[key] = true
      rules[#rules + 1] = r
    end
  end
  return merged
end

return M

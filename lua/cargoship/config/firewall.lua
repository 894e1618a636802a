-- cargoship.config.firewall: the `host` block (ports, firewall rules, legacy policy) of hosts
-- and profiles, and the rule key that merging and the firewall backends agree on.
local check = require "cargoship.config.check"
local FIELDS = require "cargoship.config.fields"
local errors = require "cargoship.config.errors"
local net = require "cargoship.config.net"

local M = {}

local quote, join, describe = errors.quote, errors.join, errors.describe

local ACTIONS = { "allow", "deny", "reject" }
local DIRECTIONS = { "in", "out", "forward" }
local RULE_PROTOCOLS = { "tcp", "udp", "sctp", "dccp" }
local PORT_PROTOCOLS = { "tcp", "udp" }
local TARGETS = { "CONTINUE", "ACCEPT", "REJECT", "DROP" }
M.ACTIONS, M.DIRECTIONS, M.RULE_PROTOCOLS, M.PORT_PROTOCOLS, M.TARGETS =
  ACTIONS, DIRECTIONS, RULE_PROTOCOLS, PORT_PROTOCOLS, TARGETS

-- Rule names end up in firewall comments, ufw tags and file names.
function M.sanitize(name)
  return (name:lower():gsub("[%./ :]", "-"):gsub("[^a-z0-9_-]", ""))
end

-- The identity of a rule: its sanitised name, or for an unnamed rule every field joined
-- by "-" (defaults filled in), so identical unnamed rules get identical keys.
function M.rule_key(rule)
  if rule.name and rule.name ~= "" then return M.sanitize(rule.name) end
  return M.sanitize(table.concat({
    rule.direction or "in", rule.action or "", rule.source or "any", rule.destination or "any",
    rule.ingress or "", rule.egress or "", rule.port or "", rule.protocol or "" }, "-"))
end

local RULE_FIELDS = { "direction", "action", "source", "destination", "ingress", "egress",
                      "port", "protocol" }

function M.same_rule(a, b)
  for _, f in ipairs(RULE_FIELDS) do
    if a[f] ~= b[f] then return false end
  end
  return (a.name or "") == (b.name or "")
end

-- map[key] as a port or ascending range: integer 1..65535, "N" or "lo-hi".
-- Returns the canonical text ("6443", "30000-32767"), from, to.
function M.port(ctx, map, key, path, opts)
  if ctx.errs:is_spoiled(map, key) then return nil end
  local v = map[key]
  if not check.present(map, key) then
    if opts and opts.required then
      if v == nil then check.missing(ctx, map, key, path)
      else ctx.errs:at_value(map, key, join(path, key), "expected a port, got null") end
    end
    return nil
  end
  -- "" is Go's unset string: no port, as if absent
  if v == "" and not (opts and opts.required) then return nil end
  local from, to, why
  if math.type(v) == "integer" then
    if v >= 1 and v <= 65535 then from, to = v, v else why = "expected a port in 1..65535" end
  elseif type(v) == "string" then
    from, to = net.port_range(v)
    if not from then why = to end
  else
    why = "expected a port number or a range like \"30000-32767\""
  end
  if not from then
    ctx.errs:at_value(map, key, join(path, key), string.format("%s, got %s", why, describe(v)))
    return nil
  end
  local text = from == to and tostring(from) or string.format("%d-%d", from, to)
  return text, from, to
end

local function address_or_any(ctx, rule, key, path)
  local s = check.string(ctx, rule, key, path)
  -- "" is Go's unset string, which the rule code reads as any
  if s == nil or s == "" then return "any", nil end
  if s:lower() == "any" then return "any", nil end
  local fam = net.ip_family(s) or net.cidr_family(s)
  if not fam then
    ctx.errs:at_value(rule, key, join(path, key),
      "expected an IP address, a CIDR or \"any\", got " .. describe(s))
    return nil
  end
  return s, fam
end

local function decode_rule(ctx, rule, rpath)
  check.fields(ctx, rule, rpath, FIELDS.rule)
  local r = {}
  local name = check.string(ctx, rule, "name", rpath)
  if name and name ~= "" then
    if M.sanitize(name) == "" then
      ctx.errs:at_value(rule, "name", join(rpath, "name"),
        "rule name has no letters, digits, '-' or '_', got " .. quote(name))
    end
    r.name = name
  end
  r.action = check.enum(ctx, rule, "action", rpath, ACTIONS, { required = true, ignore_case = true })
  r.direction = check.enum(ctx, rule, "direction", rpath, DIRECTIONS, { blank_absent = true }) or "in"
  local sfam, dfam
  r.source, sfam = address_or_any(ctx, rule, "source", rpath)
  r.destination, dfam = address_or_any(ctx, rule, "destination", rpath)
  if sfam and dfam and sfam ~= dfam then
    ctx.errs:at_node(rule, rpath, "source and destination are of different IP families")
  end
  r.ingress = check.string(ctx, rule, "ingress", rpath, { blank_absent = true })
  r.egress = check.string(ctx, rule, "egress", rpath, { blank_absent = true })
  if r.direction == "forward" then
    for _, k in ipairs({ "ingress", "egress" }) do
      if not check.given(rule, k) then
        ctx.errs:at_node(rule, rpath, string.format(
          "missing required field %s (forward rules need both ingress and egress)", quote(k)))
      end
    end
  else
    for _, k in ipairs({ "ingress", "egress" }) do
      if check.given(rule, k) then
        ctx.errs:at_key(rule, k, join(rpath, k),
          string.format("%s is only allowed on forward rules (direction: forward)", k))
      end
    end
  end
  r.port, r.port_from, r.port_to = M.port(ctx, rule, "port", rpath)
  r.protocol = check.enum(ctx, rule, "protocol", rpath, RULE_PROTOCOLS, { blank_absent = true })
  if check.given(rule, "port") and not check.given(rule, "protocol") then
    ctx.errs:at_node(rule, rpath, "a rule with a port needs a protocol (tcp, udp, sctp or dccp)")
  end
  r.key = M.rule_key(r)
  return r
end

-- Appends `r` unless a rule with its key is there: named clashes are mistakes, identical
-- unnamed rules collapse (the same rule written twice), different rules whose derived keys
-- collide must be told apart by a name.
local function add_rule(ctx, rules, seen, r, rule, rpath)
  local prev = seen[r.key]
  if not prev then
    seen[r.key] = { rule = r, path = rpath }
    rules[#rules + 1] = r
    return
  end
  if not r.name and not prev.rule.name and M.same_rule(r, prev.rule) then return end
  local where = r.name and "name" or nil
  local msg = string.format("rule key %s is already used by %s; rule names must be unique per host",
    quote(r.key), prev.path)
  if where then ctx.errs:at_value(rule, where, join(rpath, where), msg)
  else ctx.errs:at_node(rule, rpath, msg .. " (give one of them a name)") end
end

local function decode_ports(ctx, list, lpath, protocols)
  local out = {}
  for i = 1, #list do
    local ipath = join(lpath, i)
    local p = check.mapping(ctx, list, i, lpath, { required = true })
    if p then
      check.fields(ctx, p, ipath, FIELDS.port)
      local text, from, to = M.port(ctx, p, "port", ipath, { required = true })
      local proto = check.enum(ctx, p, "protocol", ipath, protocols, { required = true })
      if text and proto then
        out[#out + 1] = { port = text, from = from, to = to, protocol = proto }
      end
    end
  end
  return out
end

local function zone(ctx, pol, key, ppath)
  local z = check.mapping(ctx, pol, key, ppath, { required = true })
  if not z then return nil end
  local zpath = join(ppath, key)
  check.fields(ctx, z, zpath, FIELDS.zone)
  return check.string(ctx, z, "name", zpath, { required = true })
end

local function decode_policy(ctx, host, hpath)
  local out = {}
  local policies = check.mapping(ctx, host, "policy", hpath)
  if not policies then return out end
  local ppath = join(hpath, "policy")
  for _, name in ipairs(check.keys(policies)) do
    local npath = join(ppath, name)
    if not name:match("^[%w_-]+$") then
      ctx.errs:at_key(policies, name, npath,
        "policy name must be letters, digits, '-' or '_' (it names /etc/firewalld/policies/<name>.xml), got "
        .. quote(name))
    end
    local pol = check.mapping(ctx, policies, name, ppath, { required = true })
    if pol then
      check.fields(ctx, pol, npath, FIELDS.policy)
      local p = {
        name = name,
        target = check.enum(ctx, pol, "target", npath, TARGETS, { ignore_case = true }) or "CONTINUE",
        ingress = zone(ctx, pol, "ingress", npath),
        egress = zone(ctx, pol, "egress", npath),
        ports = {},
      }
      local ports = check.sequence(ctx, pol, "ports", npath)
      if ports then p.ports = decode_ports(ctx, ports, join(npath, "ports"), RULE_PROTOCOLS) end
      out[name] = p
    end
  end
  return out
end

-- Decodes parent[key] (a `host` block) to {ports, firewall = {rules}, policy}, all present.
function M.host(ctx, parent, key, path)
  local out = { ports = {}, firewall = { rules = {} }, policy = {} }
  local host = check.mapping(ctx, parent, key, path)
  if not host then return out end
  local hpath = join(path, key)
  check.fields(ctx, host, hpath, FIELDS.hostcfg)
  local ports = check.sequence(ctx, host, "ports", hpath)
  if ports then out.ports = decode_ports(ctx, ports, join(hpath, "ports"), PORT_PROTOCOLS) end
  local fw = check.mapping(ctx, host, "firewall", hpath)
  if fw then
    local fpath = join(hpath, "firewall")
    check.fields(ctx, fw, fpath, FIELDS.firewall)
    local rules = check.sequence(ctx, fw, "rules", fpath)
    if rules then
      local rpath, seen = join(fpath, "rules"), {}
      for i = 1, #rules do
        local rule = check.mapping(ctx, rules, i, rpath, { required = true })
        if rule then
          local r = decode_rule(ctx, rule, join(rpath, i))
          add_rule(ctx, out.firewall.rules, seen, r, rule, join(rpath, i))
        end
      end
    end
  end
  out.policy = decode_policy(ctx, host, hpath)
  return out
end

return M

-- cargoship.config.kube: node labels and taints (the `engine` block of hosts and profiles).
-- Their syntax is checked here because the engine only reads them at node registration:
-- a bad label found then leaves a node half-joined.
local check = require "cargoship.config.check"
local FIELDS = require "cargoship.config.fields"
local errors = require "cargoship.config.errors"
local net = require "cargoship.config.net"

local M = {}

local quote, join = errors.quote, errors.join

local EFFECTS = { "NoSchedule", "PreferNoSchedule", "NoExecute" }
M.EFFECTS = EFFECTS

-- Kubernetes "qualified name" part and label value: alphanumerics with - _ . inside.
local function is_name(s)
  return s:match("^[%w]$") ~= nil or s:match("^[%w][%w_.-]*[%w]$") ~= nil
end

function M.label_key_problem(k)
  local prefix, name = k:match("^(.*)/([^/]*)$")
  if not prefix then name = k end
  if prefix and (not net.is_node_name(prefix)) then
    return "label key prefix must be a lower-case DNS name"
  end
  if #name == 0 or #name > 63 or not is_name(name) then
    return "label key name must be 1-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric"
  end
  return nil
end

function M.label_value_problem(v)
  if v == "" then return nil end
  if #v > 63 or not is_name(v) then
    return "label value must be at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric"
  end
  return nil
end

-- "key[=value]:Effect" -> nil, or why it is wrong and a did-you-mean hint.
function M.taint_problem(s)
  local left, effect = s:match("^(.*):([^:]*)$")
  if not left then return "expected key[=value]:Effect", "" end
  local ok = false
  for _, e in ipairs(EFFECTS) do if e == effect then ok = true end end
  if not ok then
    return "taint effect must be " .. check.one_of(EFFECTS), errors.did_you_mean(effect, EFFECTS)
  end
  local key, value = left:match("^([^=]*)=(.*)$")
  key = key or left
  local why = M.label_key_problem(key)
  if not why and value then why = M.label_value_problem(value) end
  if why then return "taint " .. why:gsub("^label ", ""), "" end
  return nil
end

-- Decodes parent[key] (an `engine` block) to {labels = map, taints = list}; both always
-- present (empty when unset) so the profile merge can test emptiness uniformly.
function M.engine(ctx, parent, key, path)
  local out = { labels = {}, taints = {} }
  local e = check.mapping(ctx, parent, key, path)
  if not e then return out end
  local epath = join(path, key)
  check.fields(ctx, e, epath, FIELDS.engine)
  local labels = check.string_map(ctx, e, "labels", epath, function(k, v, m, vpath)
    local why = M.label_key_problem(k)
    if why then
      ctx.errs:at_key(m, k, vpath, why .. ", got " .. quote(k))
      return nil
    end
    why = M.label_value_problem(v)
    if why then
      ctx.errs:at_value(m, k, vpath, why .. ", got " .. quote(v))
      return nil
    end
    return v
  end)
  out.labels = labels or {}
  local taints = check.sequence(ctx, e, "taints", epath)
  if taints then
    local tpath = join(epath, "taints")
    for i = 1, #taints do
      local t = check.string(ctx, taints, i, tpath, { required = true })
      if t then
        local why, hint = M.taint_problem(t)
        if why then
          ctx.errs:at_value(taints, i, join(tpath, i), why .. ", got " .. quote(t) .. hint)
        else
          out.taints[#out.taints + 1] = t
        end
      end
    end
  end
  return out
end

return M

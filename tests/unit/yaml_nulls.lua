-- tests/unit/yaml_nulls.lua: a parsed YAML document with one field at a time made null (`key:` left empty).
-- For the specs that walk every field of a real fixture through a loader: a reader that indexes a
-- field the schema lets be null raises instead of naming it.
local yaml = require "cargoship.yaml"

local M = {}

local function is_node(v) return type(v) == "table" and not yaml.is_null(v) end

-- every path (a list of keys) below node, parents before children, in a stable order
function M.paths(node, prefix, out)
  prefix, out = prefix or {}, out or {}
  if not is_node(node) then return out end
  local keys = {}
  for k in pairs(node) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    local p = { table.unpack(prefix) }
    p[#p + 1] = k
    out[#out + 1] = p
    M.paths(node[k], p, out)
  end
  return out
end

local function copy(t)
  if not is_node(t) then return t end
  local c = {}
  for k, v in pairs(t) do c[k] = copy(v) end
  return c
end

-- a deep copy of doc with the field at path set to yaml.null
function M.nulled(doc, path)
  local d = copy(doc)
  local t = d
  for i = 1, #path - 1 do t = t[path[i]] end
  t[path[#path]] = yaml.null
  return d
end

-- path as the loaders name it: spec.hosts[0].ssh
function M.name(path)
  local parts = {}
  for i, k in ipairs(path) do parts[i] = type(k) == "number" and ("[" .. (k - 1) .. "]") or k end
  return (table.concat(parts, "."):gsub("%.%[", "["))
end

return M

-- cargoship.config.expand: ${VAR} expansion in the string values of a parsed cluster file.
-- It runs after parsing, one scalar at a time, so every error keeps its own file:line:col
-- and a value cannot inject YAML structure. Mapping keys are not expanded: they name fields
-- and entries, and a schema that shifts with the environment would be unreadable.
--
-- Syntax: ${NAME} (NAME = [A-Za-z_][A-Za-z0-9_]*) is replaced; "$$" is one literal "$";
-- any other "$" is literal, so Ansible Vault headers ($ANSIBLE_VAULT;...) and rewrite
-- replacements ($1) pass through. A set-but-empty variable expands to "".
local yaml = require "cargoship.yaml"
local errors = require "cargoship.config.errors"

local M = {}

-- Returns the expanded string, or nil, message.
function M.string(s, env)
  if not s:find("$", 1, true) then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local d = s:find("$", i, true)
    if not d then out[#out + 1] = s:sub(i); break end
    out[#out + 1] = s:sub(i, d - 1)
    local nxt = s:sub(d + 1, d + 1)
    if nxt == "$" then
      out[#out + 1] = "$"
      i = d + 2
    elseif nxt == "{" then
      local close = s:find("}", d + 2, true)
      if not close then
        return nil, "unterminated ${ (write $$ for a literal $)"
      end
      local name = s:sub(d + 2, close - 1)
      if not name:match("^[A-Za-z_][A-Za-z0-9_]*$") then
        return nil, string.format("invalid variable name %s in ${...} (write $$ for a literal $)",
          errors.quote(name))
      end
      local v = env(name)
      if v == nil then
        return nil, string.format("environment variable %s is not set", name)
      end
      out[#out + 1] = tostring(v)
      i = close + 1
    else
      out[#out + 1] = "$"
      i = d + 1
    end
  end
  return table.concat(out)
end

-- Expands every string value under `doc` in place. Reports through `errs` (a collector)
-- and marks failed values spoiled so the schema checks stay quiet about them. Returns
-- `expanded`: container -> {key = true} for values that changed (see check.integer).
function M.tree(doc, env, errs)
  local expanded = setmetatable({}, { __mode = "k" })
  local seen = {}
  local function walk(node, path)
    if seen[node] then return end
    seen[node] = true
    local keys = {}
    for k in pairs(node) do keys[#keys + 1] = k end
    for _, k in ipairs(keys) do
      local v = node[k]
      local vpath = errors.join(path, k)
      if type(v) == "string" then
        local r, err = M.string(v, env)
        if r == nil then
          errs:at_value(node, k, vpath, err)
          errs:spoil(node, k)
        elseif r ~= v then
          node[k] = r
          local e = expanded[node]
          if not e then e = {}; expanded[node] = e end
          e[k] = true
        end
      elseif type(v) == "table" and not yaml.is_null(v) then
        walk(v, vpath)
      end
    end
  end
  if type(doc) == "table" then walk(doc, "") end
  return expanded
end

return M

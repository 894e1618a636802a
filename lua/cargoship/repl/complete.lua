-- cargoship.repl.complete: tab completion for the repl: names in scope, fields and methods along a.b.c:d.
--
-- Only looks, never runs: a path is followed through plain tables and through metatables
-- whose __index is a table; an __index function (which could do anything, a host read
-- included) is not called.
local M = {}

local MAX_CHAIN = 8

-- The table an __index chain continues in, or nil.
local function index_table(v)
  local mt = getmetatable(v)
  if type(mt) ~= "table" then return nil end
  local idx = rawget(mt, "__index")
  return type(idx) == "table" and idx or nil
end

-- v[k] without calling anything.
local function peek(v, k)
  if type(v) == "string" then return string[k] end
  local t = v
  for _ = 1, MAX_CHAIN do
    if type(t) ~= "table" then return nil end
    local x = rawget(t, k)
    if x ~= nil then return x end
    t = index_table(t)
  end
  return nil
end

-- Names reachable from v: its own identifier keys and those along its __index tables.
-- Names starting with "_" are private by convention and left out.
local function members(v, methods_only)
  local names, seen = {}, {}
  local t = type(v) == "string" and string or v
  for _ = 1, MAX_CHAIN do
    if type(t) ~= "table" then break end
    for k, x in pairs(t) do
      if type(k) == "string" and k:match("^[%a][%w_]*$") and not seen[k]
        and (not methods_only or type(x) == "function") then
        seen[k] = true
        names[#names + 1] = k
      end
    end
    t = index_table(t)
  end
  return names
end

-- M.candidates(env, word) -> sorted list of whole words that complete `word`
-- word: what precedes the cursor since the last break character ("h1.facts.os.pre",
-- "all:ru", "hos").
function M.candidates(env, word)
  local path, sep, partial = word:match("^(.-)([.:])([%w_]*)$")
  local scope
  if not path then
    partial, path, sep = word, nil, ""
    if not partial:match("^[%a_]?[%w_]*$") then return {} end
    scope = env
  else
    if path == "" or not path:match("^[%a_][%w_]*[%w_.]*$") or path:find("..", 1, true) then return {} end
    scope = nil
    for name in path:gmatch("[^.]+") do
      if scope == nil then scope = peek(env, name) else scope = peek(scope, name) end
      if scope == nil then return {} end
    end
  end
  local out = {}
  for _, name in ipairs(members(scope, sep == ":")) do
    if name:sub(1, #partial) == partial then out[#out + 1] = (path and (path .. sep) or "") .. name end
  end
  table.sort(out)
  return out
end

return M

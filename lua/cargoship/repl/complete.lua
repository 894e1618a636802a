-- cargoship.repl.complete: tab completion for the repl: names in scope, fields and methods along a.b[1].c:d.
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

-- "hosts[2].facts" -> {"hosts", 2, "facts"}: a name, then .name and [literal] steps (an
-- integer or a quoted string without escapes); nil for anything else (a call, an
-- expression in brackets), which completion never evaluates.
local function steps_of(path)
  local first, pos = path:match("^([%a_][%w_]*)()")
  if not first then return nil end
  local steps = { first }
  while pos <= #path do
    local name, num, str, after
    name, after = path:match("^%.([%a_][%w_]*)()", pos)
    if not name then num, after = path:match("^%[%s*(%d+)%s*%]()", pos) end
    if not (name or num) then str, after = path:match('^%[%s*"([^"\\]*)"%s*%]()', pos) end
    if not (name or num or str) then str, after = path:match("^%[%s*'([^'\\]*)'%s*%]()", pos) end
    if not after then return nil end
    steps[#steps + 1] = name or str or math.tointeger(tonumber(num))
    pos = after
  end
  return steps
end

-- M.candidates(env, word) -> sorted list of whole words that complete `word`
-- word: the expression before the cursor ("h1.facts.os.pre", "all:ru", "hos",
-- 'hosts[2]:ru', 'hosts["ctrl-1"].fa').
function M.candidates(env, word)
  local path, sep, partial = word:match("^(.-)([.:])([%w_]*)$")
  local scope
  if not path then
    partial, path, sep = word, nil, ""
    if not partial:match("^[%a_]?[%w_]*$") then return {} end
    scope = env
  else
    local steps = steps_of(path)
    if not steps then return {} end
    scope = env
    for _, k in ipairs(steps) do
      scope = peek(scope, k)
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

-- The indexed expression that ends `before` (the line up to the word being completed):
-- 'print(hosts[2]' -> "hosts[2]"; "" when `before` ends in none. The line editor breaks
-- words at brackets and quotes, so the word after `hosts[2]` is only ":ru"; this is the
-- part of the expression the editor cut off.
function M.indexed_prefix(before)
  if not before:match("%]%s*$") then return "" end
  local s, tail = before:gsub("%s+$", ""), ""
  while true do
    local head, seg = s:match("^(.-)(%[%s*%d+%s*%])$")
    if not seg then head, seg = s:match('^(.-)(%[%s*"[^"\\]*"%s*%])$') end
    if not seg then head, seg = s:match("^(.-)(%[%s*'[^'\\]*'%s*%])$") end
    if not seg then head, seg = s:match("^(.-)(%.?[%a_][%w_]*)$") end
    if not seg then break end
    s, tail = head, seg .. tail
  end
  -- a whole expression: it starts with a name, not inside another word or after a call
  if not tail:match("^[%a_]") or s:match("[%w_.%]%)\"']$") then return "" end
  return tail
end

-- M.complete(env, word, line, start) -> what the line editor offers for `word`, which
-- starts at byte start + 1 of `line` (0-based start, as readline counts): the candidates
-- of the whole expression ending in word, each cut back to the word.
function M.complete(env, word, line, start)
  local prefix = (line and start) and M.indexed_prefix(line:sub(1, start)) or ""
  if prefix ~= "" and not word:match("^[.:]") then return {} end
  local out = {}
  for i, c in ipairs(M.candidates(env, prefix .. word)) do out[i] = c:sub(#prefix + 1) end
  return out
end

return M

-- cargoship.config.errors: the error list a cluster-file load collects, and how it reads.
local yaml = require "cargoship.yaml"

local M = {}

-- Keys that read well after a dot; anything else is quoted so the path stays unambiguous
-- (label keys like "node.kubernetes.io/x", rewrite patterns).
local QUOTE_MAX = 60

local function plain_key(key)
  return #key <= QUOTE_MAX and key:match("^[A-Za-z_][A-Za-z0-9_-]*$") ~= nil
end

-- The first `n` bytes of s, shortened to end on a UTF-8 character boundary, so a cut value
-- never ends inside a character (the JSON report must stay valid UTF-8).
function M.cut(s, n)
  if #s <= n then return s end
  local stop = n
  -- continuation bytes (10xxxxxx) belong to the character that started before them
  while stop > 0 and (s:byte(stop + 1) or 0) & 0xC0 == 0x80 do stop = stop - 1 end
  return s:sub(1, stop)
end

-- Quote a string for a message, escaping what would break the one-line-per-error format.
-- A long value is cut and says how long it was: a 10 MB key is not printed back whole.
function M.quote(s)
  s = tostring(s)
  local suffix = ""
  if #s > QUOTE_MAX then
    suffix = string.format(" (%d bytes)", #s)
    s = M.cut(s, QUOTE_MAX - 3) .. "..."
  end
  local escaped = s:gsub('[%c"\\]', function(c)
    if c == "\n" then return "\\n" elseif c == "\t" then return "\\t"
    elseif c == '"' or c == "\\" then return "\\" .. c end
    return string.format("\\x%02x", c:byte())
  end)
  return '"' .. escaped .. '"' .. suffix
end

-- JSON-path style with 0-based sequence indices, as the Go tool prints them.
-- `key` is a string (mapping key) or a Lua integer (1-based index into a sequence).
function M.join(path, key)
  if math.type(key) == "integer" then return string.format("%s[%d]", path, key - 1) end
  if plain_key(key) then return path == "" and key or path .. "." .. key end
  return string.format("%s[%s]", path, M.quote(key))
end

-- Sequences are tables with [1]; mapping keys are always strings, so a non-empty table
-- without [1] is a mapping. An empty table could be either, and is accepted as both.
function M.kind_of(v)
  local t = type(v)
  if yaml.is_null(v) then return "null" end
  if t == "table" then
    if next(v) == nil then return "empty" end
    return v[1] ~= nil and "sequence" or "mapping"
  end
  if t == "number" then return math.type(v) == "integer" and "integer" or "float" end
  return t
end

-- How a wrong value is named in "expected X, got Y".
function M.describe(v)
  local k = M.kind_of(v)
  if k == "sequence" then return "a sequence" end
  if k == "mapping" then return "a mapping" end
  if k == "empty" then return "an empty collection" end
  if k == "null" then return "null" end
  if k == "string" then return "string " .. M.quote(v) end
  return k .. " " .. tostring(v)
end

local function levenshtein(a, b)
  if a == b then return 0 end
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    local ca = a:byte(i)
    for j = 1, #b do
      local cost = (ca == b:byte(j)) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end
M.levenshtein = levenshtein

-- The closest candidate: a case-insensitive match first, else the smallest edit distance
-- up to 2 (ties broken by list order, so callers list fields in schema order). Lengths that
-- differ by more than the limit cannot be within it, so a huge value is never compared
-- (the distance costs #word * #candidate steps: 10 MB took half a minute).
function M.suggest(word, candidates)
  if type(word) ~= "string" then return nil end
  -- Distance 2 on a short word would suggest almost anything ("icmp" -> "tcp").
  local limit = #word <= 4 and 1 or 2
  local longest = 0
  for _, c in ipairs(candidates) do longest = math.max(longest, #c) end
  if #word > longest + limit then return nil end
  local lower = word:lower()
  for _, c in ipairs(candidates) do
    if c:lower() == lower then return c end
  end
  local best, best_d
  for _, c in ipairs(candidates) do
    if math.abs(#c - #word) <= limit then
      local d = levenshtein(lower, c:lower())
      if d <= limit and (not best_d or d < best_d) then best, best_d = c, d end
    end
  end
  return best
end

function M.did_you_mean(word, candidates)
  local s = M.suggest(word, candidates)
  return s and string.format(" (did you mean %s?)", M.quote(s)) or ""
end

-- A collector. Every rule reports through one of the `at_*` methods and carries on, so
-- one load shows all mistakes at once.
local Collector = {}
Collector.__index = Collector

function M.collector(file)
  return setmetatable({ file = file, list = {}, spoiled = setmetatable({}, { __mode = "k" }) }, Collector)
end

function Collector:add(line, col, path, message)
  line, col = self:located(line, col)
  local e = { file = self.file, line = line, col = col, path = path, message = message }
  e.text = M.text(e)
  self.list[#self.list + 1] = e
  return e
end

-- Positions are kept for mappings and sequences only; a scalar (a bare-scalar document)
-- has none of its own, and the collector's fallback (the document's start) is used.
local function where(v, key)
  if type(v) ~= "table" then return nil end
  if key == nil then return yaml.where(v) end
  return yaml.where(v, key)
end

local function key_where(map, key)
  if type(map) ~= "table" then return nil end
  return yaml.key_where(map, key)
end

-- Where an error with no position of its own is reported (set by the loader to the
-- document's start, so every error is located).
function Collector:set_fallback(line, col)
  self.fallback_line, self.fallback_col = line, col
end

function Collector:located(line, col)
  if line then return line, col end
  return self.fallback_line, self.fallback_col
end

-- At the value of `container[key]`; falls back to the container itself.
function Collector:at_value(container, key, path, message)
  local line, col = where(container, key)
  if not line then line, col = where(container) end
  return self:add(line, col, path, message)
end

-- At the key of `map[key]` (unknown fields: the key is the mistake, not its value).
function Collector:at_key(map, key, path, message)
  local line, col = key_where(map, key)
  if not line then line, col = where(map) end
  return self:add(line, col, path, message)
end

-- At a mapping or sequence as a whole (missing fields, cross-field rules).
function Collector:at_node(container, path, message)
  local line, col = where(container)
  return self:add(line, col, path, message)
end

-- A value already reported (e.g. an unset ${VAR}) is skipped by the schema checks, so one
-- mistake is not reported twice.
function Collector:spoil(container, key)
  local s = self.spoiled[container]
  if not s then s = {}; self.spoiled[container] = s end
  s[key] = true
end

function Collector:is_spoiled(container, key)
  local s = self.spoiled[container]
  return s ~= nil and s[key] == true
end

function Collector:sorted()
  local list = self.list
  for i, e in ipairs(list) do e.seq = i end
  table.sort(list, function(a, b)
    local la, lb = a.line or 0, b.line or 0
    if la ~= lb then return la < lb end
    local ca, cb = a.col or 0, b.col or 0
    if ca ~= cb then return ca < cb end
    return a.seq < b.seq
  end)
  for _, e in ipairs(list) do e.seq = nil end
  return list
end

function M.text(e)
  local at = e.file or "<config>"
  if e.line then at = string.format("%s:%d:%d", at, e.line, e.col or 1) end
  if e.path and e.path ~= "" then
    return string.format("%s: %s: %s", at, e.path, e.message)
  end
  return string.format("%s: %s", at, e.message)
end

function M.format(errors)
  local out = {}
  for i, e in ipairs(errors) do out[i] = e.text or M.text(e) end
  return table.concat(out, "\n")
end

return M

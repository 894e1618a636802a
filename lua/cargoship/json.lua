-- cargoship.json: a small, stable JSON writer for the commands' --output json documents.
--
-- Object keys are sorted so the same data always prints the same bytes. Lua cannot tell an
-- empty list from an empty object, nor store nil, so callers mark lists with M.array and
-- explicit nulls with M.null.
local M = {}

local ARRAY = {}

-- Marks t as a JSON array (needed for a list that may be empty); returns t.
function M.array(t)
  return setmetatable(t or {}, ARRAY)
end

-- Stands in for JSON null where a table needs a value.
M.null = setmetatable({}, { __tostring = function() return "null" end })

local NAMED = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }

-- JSON text is UTF-8 (RFC 8259 §8.1); a Lua string is bytes, and messages carry bytes from
-- the cluster file and the environment. Every byte that does not start a valid character
-- (stray continuation bytes, truncated or overlong sequences, surrogates) becomes U+FFFD.
local function valid_utf8(s)
  if utf8.len(s) then return s end
  local out, i = {}, 1
  while true do
    local ok, bad = utf8.len(s, i)
    if ok then out[#out + 1] = s:sub(i); break end
    out[#out + 1] = s:sub(i, bad - 1)
    out[#out + 1] = "\u{FFFD}"
    i = bad + 1
    if i > #s then break end
  end
  return table.concat(out)
end
M.valid_utf8 = valid_utf8

local function sorted_keys(map)
  local keys = {}
  for k in pairs(map) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return keys
end

local function encode(v)
  local t = type(v)
  if v == nil or v == M.null then return "null"
  elseif t == "boolean" then return tostring(v)
  elseif t == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    -- NaN and infinities have no JSON spelling
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    -- the shortest of the usual spellings that reads back as the same number
    local s = string.format("%.14g", v)
    if tonumber(s) ~= v then s = string.format("%.17g", v) end
    return s
  elseif t == "string" then
    return '"' .. valid_utf8(v):gsub('[%c"\\]', function(c)
      return NAMED[c] or string.format("\\u%04x", c:byte())
    end) .. '"'
  elseif t == "table" then
    local parts = {}
    if getmetatable(v) == ARRAY or v[1] ~= nil then
      for _, item in ipairs(v) do parts[#parts + 1] = encode(item) end
      return "[" .. table.concat(parts, ",") .. "]"
    end
    for _, k in ipairs(sorted_keys(v)) do
      parts[#parts + 1] = encode(k) .. ":" .. encode(v[k])
    end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  error("cannot encode a " .. t .. " as JSON", 2)
end

-- M.encode(value) -> JSON text on one line.
M.encode = encode

return M

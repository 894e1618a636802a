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

-- Appends v's text to buf as fragments (buf.n counts them), handing full runs to buf.flush:
-- the text is never built level by level, so a large document costs its size once, not
-- once per level of nesting.
local function put(buf, v)
  local t = type(v)
  local s
  if v == nil or v == M.null then s = "null"
  elseif t == "boolean" then s = tostring(v)
  elseif t == "number" then
    if math.type(v) == "integer" then s = tostring(v)
    -- NaN and infinities have no JSON spelling
    elseif v ~= v or v == math.huge or v == -math.huge then s = "null"
    else
      -- the shortest of the usual spellings that reads back as the same number
      s = string.format("%.14g", v)
      if tonumber(s) ~= v then s = string.format("%.17g", v) end
    end
  elseif t == "string" then
    s = '"' .. valid_utf8(v):gsub('[%c"\\]', function(c)
      return NAMED[c] or string.format("\\u%04x", c:byte())
    end) .. '"'
  elseif t == "table" then
    if getmetatable(v) == ARRAY or v[1] ~= nil then
      buf.n = buf.n + 1; buf[buf.n] = "["
      for i, item in ipairs(v) do
        if i > 1 then buf.n = buf.n + 1; buf[buf.n] = "," end
        put(buf, item)
      end
      buf.n = buf.n + 1; buf[buf.n] = "]"
    else
      buf.n = buf.n + 1; buf[buf.n] = "{"
      for i, k in ipairs(sorted_keys(v)) do
        if i > 1 then buf.n = buf.n + 1; buf[buf.n] = "," end
        put(buf, k)
        buf.n = buf.n + 1; buf[buf.n] = ":"
        put(buf, v[k])
      end
      buf.n = buf.n + 1; buf[buf.n] = "}"
    end
    return
  else
    error("cannot encode a " .. t .. " as JSON", 3)
  end
  buf.n = buf.n + 1
  buf[buf.n] = s
  if buf.n >= 4096 and buf.flush then buf.flush(buf) end
end

-- M.encode(value) -> JSON text on one line.
function M.encode(v)
  local buf = { n = 0 }
  put(buf, v)
  return table.concat(buf, "", 1, buf.n)
end

-- M.write(file, value): the same text as M.encode, written to file (anything with :write)
-- in runs of 4,096 fragments, so no copy of the whole text is ever held.
function M.write(file, v)
  local buf = { n = 0 }
  function buf.flush(b)
    file:write(table.concat(b, "", 1, b.n))
    for i = b.n, 1, -1 do b[i] = nil end
    b.n = 0
  end
  put(buf, v)
  buf.flush(buf)
end

return M

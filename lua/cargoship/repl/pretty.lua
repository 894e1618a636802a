-- cargoship.repl.pretty: shows a Lua value for people: nested tables, sorted keys, depth-limited.
local M = {}

M.DEPTH = 4       -- tables deeper than this show as {...}
M.WIDTH = 78      -- a table that fits in this many columns stays on one line
M.MAX_ITEMS = 200 -- entries shown per table; the rest are counted

local ESCAPES = { ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r", ['"'] = '\\"', ["\\"] = "\\\\" }

function M.quote(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return ESCAPES[c] or string.format("\\%03d", c:byte())
  end) .. '"'
end

local function is_identifier(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil
end

-- Integers in order, then other numbers, then strings, then the rest by their text.
local RANK = { number = 1, string = 2, boolean = 3 }
local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return (RANK[ta] or 9) < (RANK[tb] or 9) end
  if ta == "number" or ta == "string" then return a < b end
  return tostring(a) < tostring(b)
end

local function scalar(v)
  local t = type(v)
  if t == "string" then return M.quote(v) end
  if math.type(v) == "float" then return string.format("%.14g", v) end
  return tostring(v)
end

local render

-- A table with its own __tostring (hosts, results) speaks for itself.
local function own_text(v)
  local mt = getmetatable(v)
  if type(mt) == "table" and mt.__tostring then return tostring(v) end
  return nil
end

local function render_table(v, depth, indent, seen)
  local text = own_text(v)
  if text then return text end
  if seen[v] then return "<cycle>" end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  if #keys == 0 then return "{}" end
  if depth >= M.DEPTH then return string.format("{... %d %s}", #keys, #keys == 1 and "entry" or "entries") end
  table.sort(keys, key_less)
  seen[v] = true
  local n, items = #v, {}
  for i, k in ipairs(keys) do
    if i > M.MAX_ITEMS then
      items[#items + 1] = string.format("... %d more", #keys - M.MAX_ITEMS)
      break
    end
    local shown = render(v[k], depth + 1, indent .. "  ", seen)
    if math.type(k) == "integer" and k >= 1 and k <= n then items[#items + 1] = shown
    elseif is_identifier(k) then items[#items + 1] = k .. " = " .. shown
    else items[#items + 1] = "[" .. scalar(k) .. "] = " .. shown end
  end
  seen[v] = nil
  local line = "{ " .. table.concat(items, ", ") .. " }"
  if #line + #indent <= M.WIDTH and not line:find("\n", 1, true) then return line end
  local inner = indent .. "  "
  return "{\n" .. inner .. table.concat(items, ",\n" .. inner) .. ",\n" .. indent .. "}"
end

render = function(v, depth, indent, seen)
  if type(v) == "table" then return render_table(v, depth, indent, seen) end
  return scalar(v)
end

-- M.show(value) -> text (no trailing newline)
function M.show(v)
  return render(v, 0, "", {})
end

return M

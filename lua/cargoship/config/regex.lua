-- cargoship.config.regex: a syntax check for Go RE2 patterns (registry rewrite keys).
-- The pattern is compiled for real only on the node, by the engine; this catches what a
-- reader would call a typo before any host is touched.
--
-- Checked: balanced groups, group syntax ((?:, (?i), (?flags:, (?P<name>, (?<name>), the
-- lookarounds and backreferences RE2 refuses, escapes (the letters RE2 knows, \pN/\p{..},
-- \x, octal, \Q..\E, escaped punctuation), character classes (closing ], [:name:], ASCII
-- range order), repetition operators with nothing to repeat or nested, {n,m} bounds
-- (n <= m <= 1000).
-- Not checked: whether a Unicode class name (\p{Foo}) or [:name:] exists, UTF-8 validity,
-- duplicate group names, and RE2's program-size limit.
local M = {}

local simple_escapes = {
  a = true, f = true, t = true, n = true, r = true, v = true,
  d = true, D = true, s = true, S = true, w = true, W = true,
  b = true, B = true, A = true, z = true,
}
local class_escapes = { d = true, D = true, s = true, S = true, w = true, W = true }

-- Reads the escape at s[i] == "\\"; returns the index after it, or nil, why.
-- `in_class` limits the letters to those that mean something inside [...].
local function escape(s, i, in_class)
  local c = s:sub(i + 1, i + 1)
  if c == "" then return nil, "trailing backslash at end of expression" end
  if c:match("[%p]") then return i + 2 end
  if c:match("[0-7]") then
    if c ~= "0" and not s:sub(i + 2, i + 2):match("[0-7]") then
      return nil, "backreferences (\\" .. c .. ") are not supported by RE2"
    end
    local j = i + 1
    while j <= i + 3 and s:sub(j, j):match("[0-7]") do j = j + 1 end
    return j
  end
  if c == "x" then
    if s:sub(i + 2, i + 2) == "{" then
      local hex, close = s:match("^(%x+)()}", i + 3)
      if not hex or tonumber(hex, 16) > 0x10FFFF then return nil, "invalid escape \\x{...}" end
      return close + 1
    end
    if not s:sub(i + 2, i + 3):match("^%x%x$") then return nil, "invalid escape \\x" end
    return i + 4
  end
  if c == "p" or c == "P" then
    local n = s:sub(i + 2, i + 2)
    if n == "{" then
      local close = s:find("}", i + 3, true)
      if not close or close == i + 3 then return nil, "invalid character class \\" .. c .. "{...}" end
      return close + 1
    end
    if not n:match("%a") then return nil, "invalid character class \\" .. c end
    return i + 3
  end
  if in_class then
    if class_escapes[c] or (simple_escapes[c] and c:match("[aftnrv]")) then return i + 2 end
  elseif simple_escapes[c] then
    return i + 2
  end
  return nil, "invalid escape sequence \\" .. c
end

-- Reads a class starting at s[i] == "["; returns the index after "]" or nil, why.
local function class(s, i)
  local j = i + 1
  if s:sub(j, j) == "^" then j = j + 1 end
  local first, prev_literal = true, nil
  while true do
    local c = s:sub(j, j)
    if c == "" then return nil, "missing closing ] in character class" end
    if c == "]" and not first then return j + 1 end
    first = false
    local lit, nexti
    if s:sub(j, j + 1) == "[:" then
      local close = s:find(":]", j + 2, true)
      if not close then return nil, "unterminated [: in character class" end
      nexti = close + 2
    elseif c == "\\" then
      local k, why = escape(s, j, true)
      if not k then return nil, why end
      local e = s:sub(j + 1, j + 1)
      if k == j + 2 and e:match("%p") then lit = e:byte() end
      nexti = k
    else
      lit, nexti = c:byte(), j + 1
    end
    -- a-z range: both ends literal ASCII; the upper end must not be below the lower.
    if c == "-" and prev_literal and s:sub(j + 1, j + 1) ~= "]" and s:sub(j + 1, j + 1) ~= "" then
      local hi = s:sub(j + 1, j + 1)
      local hi_byte = hi:byte()
      if hi == "\\" then
        local e = s:sub(j + 2, j + 2)
        hi_byte = e:match("%p") and e:byte() or nil
      end
      if hi_byte and hi_byte < prev_literal then
        return nil, "invalid character class range " .. string.char(prev_literal) .. "-" .. hi
      end
      prev_literal = nil
    else
      prev_literal = lit
    end
    j = nexti
  end
end

-- Returns true, or nil and the reason the pattern does not compile as RE2.
function M.check(s)
  local depth, i, n = 0, 1, #s
  -- `can_repeat`: the previous item is something a *, +, ?, {n} may apply to.
  -- `repeated`: the previous item is itself a repetition (RE2 refuses a** and a*{2}).
  local can_repeat, repeated = false, false
  while i <= n do
    local c = s:sub(i, i)
    if c == "\\" then
      if s:sub(i + 1, i + 1) == "Q" then
        local close = s:find("\\E", i + 2, true)
        i = close and close + 2 or n + 1
      else
        local k, why = escape(s, i, false)
        if not k then return nil, why end
        i = k
      end
      can_repeat, repeated = true, false
    elseif c == "[" then
      local k, why = class(s, i)
      if not k then return nil, why end
      i, can_repeat, repeated = k, true, false
    elseif c == "(" then
      if s:sub(i + 1, i + 1) == "?" then
        local rest = s:sub(i + 2)
        local name = rest:match("^P?<([%w_]*)>")
        if rest:match("^<?[=!]") then
          return nil, "lookaround (?=, (?!, (?<=, (?<!) is not supported by RE2"
        elseif name then
          if name == "" then return nil, "invalid named capture: empty name" end
          i = i + 2 + #rest:match("^P?<[%w_]*>")
        else
          local flags, close = rest:match("^([imsU-]*)([:)])")
          local bad = not flags or (flags == "" and close == ")") or flags:match("%-$")
            or select(2, flags:gsub("%-", "")) > 1
          if bad then
            return nil, "invalid or unsupported group flags (?" .. rest:sub(1, 6)
          end
          i = i + 2 + #flags
          if close == ")" then
            i = i + 1
            can_repeat, repeated = false, false
            goto continue
          end
          i = i + 1
        end
      else
        i = i + 1
      end
      depth = depth + 1
      can_repeat, repeated = false, false
    elseif c == ")" then
      if depth == 0 then return nil, "unexpected ) without a matching (" end
      depth = depth - 1
      i, can_repeat, repeated = i + 1, true, false
    elseif c == "|" then
      i, can_repeat, repeated = i + 1, false, false
    elseif c == "*" or c == "+" or c == "?" or
           (c == "{" and s:match("^{%d+,?%d*}", i)) then
      local op = c
      local j = i + 1
      if c == "{" then
        local a, comma, b = s:match("^{(%d+)(,?)(%d*)}", i)
        op = s:match("^{%d+,?%d*}", i)
        j = i + #op
        local lo, hi = tonumber(a), tonumber(b ~= "" and b or (comma == "" and a or nil))
        if lo > 1000 or (hi and (hi > 1000 or hi < lo)) then
          return nil, "invalid repeat count " .. op
        end
      end
      if not can_repeat then return nil, "missing argument to repetition operator " .. op end
      if repeated then return nil, "invalid nested repetition operator " .. op end
      if s:sub(j, j) == "?" then j = j + 1 end
      i, repeated = j, true
    else
      -- Literals and ^, $, . all take a repetition (Go accepts ^* too).
      i, can_repeat, repeated = i + 1, true, false
    end
    ::continue::
  end
  if depth > 0 then return nil, "missing closing )" end
  return true
end

return M

-- cargoship.secrets.edit: rewrites chosen scalar values of a YAML text in place, byte for byte elsewhere.
--
-- The nodes come from yaml.spans (byte ranges of every node). A value is replaced by a
-- literal block (`|`, `|-`, `|+`) in block context when it spans lines, else by a
-- double-quoted scalar; its anchor and a comment on its line are kept. Nothing outside
-- the replaced ranges changes: comments, order, anchors and blank lines stay as written.
local yaml = require "cargoship.yaml"

local M = {}

-- The node list with lookups by kind and path ("a.b.1.c").
function M.index(text)
  local nodes, why = yaml.spans(text)
  if not nodes then return nil, why end
  local by = {}
  for _, n in ipairs(nodes) do
    local parts = {}
    for i, k in ipairs(n.path) do parts[i] = tostring(k) end
    n.key_path = table.concat(parts, "\0")
    by[n.kind .. "\1" .. n.doc .. "\1" .. n.key_path] = n
  end
  return { text = text, nodes = nodes, by = by }
end

function M.find(ix, kind, doc, path)
  local parts = {}
  for i, k in ipairs(path) do parts[i] = tostring(k) end
  return ix.by[kind .. "\1" .. doc .. "\1" .. table.concat(parts, "\0")]
end

-- Where a node's own text begins, past its anchor and tag (`&a !!str value`).
local function body_start(text, n)
  local pos = n.start
  while true do
    local c = text:sub(pos, pos)
    if c ~= "&" and c ~= "!" then return pos end
    local stop = text:find("[ \t\n]", pos) or n.stop
    pos = stop
    while text:sub(pos, pos):match("^[ \t]$") do pos = pos + 1 end
    if pos >= n.stop then return n.stop end
  end
end

-- After the line holding the last content of node n: just past its "\n" (or the end).
-- A block scalar's range runs on over blank lines and the next line's indentation; those
-- belong to what follows.
function M.line_end(text, n)
  local last = n.stop - 1
  while last >= n.start and text:sub(last, last):match("^%s$") do last = last - 1 end
  local nl = text:find("\n", math.max(last, n.start), true)
  return nl and nl + 1 or #text + 1
end

local function dq(s)
  return '"' .. s:gsub('[%c"\\\127]', function(c)
    if c == "\n" then return "\\n" elseif c == "\t" then return "\\t"
    elseif c == '"' then return '\\"' elseif c == "\\" then return "\\\\" end
    return string.format("\\x%02x", c:byte())
  end) .. '"'
end

-- Plain when YAML reads the word back as this very string (no quoting needed), else
-- double-quoted: a decrypted "u2" comes back as it was written before encryption.
local function scalar(s)
  if s:match("^[%w_][%w_.@/+=:-]*$") and not s:find(": ", 1, true) then
    local docs = yaml.load(s)
    if docs and docs[1] == s then return s end
  end
  return dq(s)
end

-- A literal block can carry s exactly when it has no control characters but tab and
-- newline, does not begin with a space (that would need an indentation indicator), and
-- has no line made of blanks only.
local function block_ok(s)
  if s == "" or not s:find("\n", 1, true) or s:find("[%z\1-\8\11-\31\127]") then return false end
  if s:match("^[ \t]") then return false end
  for line in (s .. "\n"):gmatch("([^\n]*)\n") do
    if line ~= "" and line:match("^[ \t]+$") then return false end
  end
  return true
end

local function literal(s, indent)
  local trail = #s:match("\n*$")
  local header = trail == 0 and "|-" or (trail == 1 and "|" or "|+")
  local body = s
  if trail >= 1 then body = s:sub(1, -2) end
  local out = {}
  for line in (body .. "\n"):gmatch("([^\n]*)\n") do
    out[#out + 1] = line == "" and "" or (indent .. line)
  end
  return header, table.concat(out, "\n") .. "\n"
end

-- One edit {from, to, text}: the bytes from..to-1 become text.
-- n = the scalar's node, key = its key node (for the indentation), value = the new string.
function M.replace_scalar(ix, n, key, value)
  local text = ix.text
  local from = body_start(text, n)
  local was_block = n.style == "literal" or n.style == "folded"
  local comment, to
  if was_block then
    local nl = text:find("\n", from, true) or n.stop
    comment = text:sub(from, nl - 1):match("^[|>][-+0-9]*(%s+#.*)$")
    to = M.line_end(text, n)
  else
    to = n.stop
    local nl = text:find("\n", to, true)
    local rest = text:sub(to, (nl or #text + 1) - 1)
    if not n.flow then comment = rest:match("^(%s+#.*)$") end
    if not n.flow and (rest:match("^%s*$") or comment) then to = nl and nl + 1 or #text + 1 else to = n.stop end
  end
  local use_block = not n.flow and block_ok(value)
  local c = comment or ""
  local new
  if use_block then
    local indent = string.rep(" ", (key and key.col or n.col) - 1 + 2)
    local header, body = literal(value, indent)
    new = header .. c .. "\n" .. body
  elseif was_block or to ~= n.stop then
    new = scalar(value) .. c .. "\n"
  else
    new = scalar(value)
  end
  -- a value at the very end of a file without a final newline keeps it that way
  if to == #text + 1 and text:sub(-1) ~= "\n" and new:sub(-1) == "\n" and not use_block then new = new:sub(1, -2) end
  return { from = from, to = to, text = new }
end

-- Applies non-overlapping edits; -> new text | nil, why
function M.apply(text, edits)
  table.sort(edits, function(a, b) return a.from > b.from end)
  local prev
  for _, e in ipairs(edits) do
    if prev and e.to > prev.from then return nil, "internal: overlapping edits" end
    text = text:sub(1, e.from - 1) .. e.text .. text:sub(e.to)
    prev = e
  end
  return text
end

return M

-- target_quote.lua - fuzz target: the shell-quoting helper (util.quote, shell.words, shell.fmt).
-- Oracle: a POSIX shell reads each quoted word back as exactly the input (a parser of quoted
-- words below: nothing outside quotes but \' and the separating spaces). A NUL raises, as
-- documented; fmt raises only its own "shell.fmt:" errors. A finding: anything else.
local util = require "cargoship.util"
local shell = require "cargoship.shell"

-- Reads the words of s as sh would, allowing only '...' and \' outside quotes -> words | nil, why
local function sh_words(s)
  local words, i, cur = {}, 1, nil
  while i <= #s do
    local c = s:sub(i, i)
    if c == "'" then
      local j = s:find("'", i + 1, true)
      if not j then return nil, "unterminated quote at " .. i end
      cur = (cur or "") .. s:sub(i + 1, j - 1)
      i = j + 1
    elseif c == "\\" and s:sub(i + 1, i + 1) == "'" then
      cur = (cur or "") .. "'"
      i = i + 2
    elseif c == " " and cur then
      words[#words + 1], cur = cur, nil
      i = i + 1
    else
      return nil, string.format("byte %d (%q) outside quotes", i, c)
    end
  end
  if cur then words[#words + 1] = cur end
  return words
end

local function run(data)
  local ok, q = pcall(util.quote, data)
  if data:find("\0", 1, true) then
    assert(not ok and tostring(q):find("NUL byte", 1, true), "a NUL was not refused: " .. tostring(q))
    return
  end
  assert(ok, q)
  local w = assert(sh_words(q))
  assert(#w == 1 and w[1] == data, "quote does not read back as the input")
  -- several words: the input split at newlines
  local args = {}
  for part in (data .. "\n"):gmatch("([^\n]*)\n") do args[#args + 1] = part end
  local line = shell.words(table.unpack(args, 1, math.min(#args, 64)))
  local back = assert(sh_words(line))
  assert(#back == math.min(#args, 64), "words gave another number of words")
  for i, a in ipairs(back) do assert(a == args[i], "word " .. i .. " does not read back") end
  -- a template and its arguments: the input split at \1
  local parts = {}
  for part in (data .. "\1"):gmatch("([^\1]*)\1") do parts[#parts + 1] = part end
  local fok, out = pcall(shell.fmt, parts[1], table.unpack(parts, 2, math.min(#parts, 64)))
  if not fok then
    assert(tostring(out):find("shell.fmt: ", 1, true), "fmt raised: " .. tostring(out))
  else
    assert(type(out) == "string")
  end
end

return { run = run }

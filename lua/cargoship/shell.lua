-- cargoship.shell: builds remote command lines; every value goes through util.quote, the one audited helper.
local util = require "cargoship.util"

local M = {}

M.quote = util.quote

-- M.words(a, b, ...) -> "'a' 'b' ...": each argument quoted as one shell word.
-- Numbers are allowed (they quote like their decimal text); nil is a bug and raises.
function M.words(...)
  local n = select("#", ...)
  local out = {}
  for i = 1, n do
    local v = select(i, ...)
    local t = type(v)
    if t == "number" then v = tostring(v)
    elseif t ~= "string" then error("shell.words: argument " .. i .. " is " .. t, 2) end
    out[i] = util.quote(v)
  end
  return table.concat(out, " ")
end

-- M.fmt(template, ...) -> template with each %s replaced by the quoted argument.
-- Only %s (quoted) and %% are allowed, so nothing can reach the shell unquoted by accident.
function M.fmt(template, ...)
  local args = table.pack(...)
  local i = 0
  local out = template:gsub("%%(.)", function(c)
    if c == "%" then return "%" end
    if c ~= "s" then error("shell.fmt: only %s and %% are allowed, got %" .. c, 3) end
    i = i + 1
    if i > args.n then error("shell.fmt: too few arguments", 3) end
    local v = args[i]
    if type(v) == "number" then v = tostring(v) end
    if type(v) ~= "string" then error("shell.fmt: argument " .. i .. " is " .. type(v), 3) end
    return util.quote(v)
  end)
  if i ~= args.n then error("shell.fmt: " .. args.n .. " arguments for " .. i .. " placeholders", 2) end
  return out
end

-- M.SHA256_FN: defines the shell function `cs_sha256 FILE`, which prints FILE's sha256 as hex
-- first on the line: openssl or python3's hashlib (both use the CPU's SHA extensions, ~5x
-- less CPU than coreutils' sha256sum, which is what an upload's check costs the host beyond
-- the transfer), else sha256sum. Each reads the file on stdin, opened again for each: given a
-- name holding a backslash or a newline, openssl -r and sha256sum print a backslash before the hash.
M.SHA256_FN = "cs_sha256() { openssl dgst -sha256 -r < \"$1\" 2>/dev/null || python3 -c "
  .. util.quote("import hashlib, sys\nh = hashlib.sha256()\n"
    .. "for b in iter(lambda: sys.stdin.buffer.read(1 << 20), b''):\n    h.update(b)\nprint(h.hexdigest())")
  .. " < \"$1\" 2>/dev/null || sha256sum < \"$1\"; }"

return M

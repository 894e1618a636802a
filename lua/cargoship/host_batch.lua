-- cargoship.host_batch: a host's consecutive action records sent as one script (one round trip), each with its result.
--
-- host:apply (cargoship.host) hands over a run of consecutive records it can batch, each as
-- {body = shell text run as root, input = bytes it reads from stdin | nil, stdin = bool}.
-- The script runs them in order, each in a subshell of its own, and stops at the first that
-- exits non-zero, as one command each would: the later ones never start. Around each it
-- prints markers (RS bytes, which no tool prints): "\036cs-a:I" on stdout and on stderr
-- before, "\036cs-z:I:STATUS" on stdout after, so the caller splits both streams per record
-- and reports each record's outcome and its own stdout/stderr, as before batching.
--
-- What travels where: the command line (the argv of sudo and `sh -c` on the host, which
-- every local user can read with `ps`) is LOADER alone; the script and every record's input
-- (a write's hash line and content) come over stdin, the script first: its length on a line,
-- then its bytes, taken with `head -c`, which reads no further than it is told; each
-- record's input follows in order, and a record reads exactly its own bytes (`head -c SIZE`)
-- whether it uses them or not. Records without input run with stdin from /dev/null, so
-- nothing they start can eat the bytes of the records after them.
local M = {}

M.LOADER = 'IFS= read -r cs_n && cs_b=$(head -c "$cs_n") && eval "$cs_b"'

local RS = "\30"

-- M.script(items) -> script, stdin: what host:apply sends (cmd = LOADER, stdin = stdin).
function M.script(items)
  local lines = {
    "cs_m() { printf '\\036cs-a:%s\\n' \"$1\"; printf '\\036cs-a:%s\\n' \"$1\" >&2; }",
  }
  local inputs = {}
  for i, it in ipairs(items) do
    lines[#lines + 1] = "cs_m " .. i
    lines[#lines + 1] = "(\n" .. it.body .. "\n)" .. (it.input and "" or " </dev/null")
    lines[#lines + 1] = "cs_s=$?; printf '\\036cs-z:%s:%s\\n' " .. i .. " \"$cs_s\""
    lines[#lines + 1] = '[ "$cs_s" -eq 0 ] || exit "$cs_s"'
    if it.input then inputs[#inputs + 1] = it.input end
  end
  lines[#lines + 1] = "exit 0"
  local script = table.concat(lines, "\n")
  return script, #script .. "\n" .. script .. table.concat(inputs)
end

-- Splits a stream at the begin markers -> {[i] = text}; the end markers are taken out of
-- stdout's pieces and returned as {[i] = status}.
local function pieces(text)
  local parts, status = {}, {}
  text = text or ""
  local pos, cur = 1, nil
  while true do
    local s, e, i = text:find(RS .. "cs%-a:(%d+)\n", pos)
    local chunk = text:sub(pos, (s or #text + 1) - 1)
    if cur then parts[cur] = (parts[cur] or "") .. chunk end
    if not s then break end
    cur, pos = tonumber(i), e + 1
  end
  for i, p in pairs(parts) do
    local st
    p = p:gsub(RS .. "cs%-z:(%d+):(%d+)\n", function(j, n)
      if tonumber(j) == i then st = tonumber(n) end
      return ""
    end)
    parts[i], status[i] = p, st
  end
  return parts, status
end

-- M.parse(out, err, n) -> {[i] = {started = bool, status = exit | nil (did not end), out, err}}
-- for i = 1..n; out may be partial (the command was cut): what came is what is known.
function M.parse(out, err, n)
  local o, status = pieces(out)
  local e = pieces(err)
  local r = {}
  for i = 1, n do
    r[i] = { started = o[i] ~= nil, status = status[i], out = o[i] or "", err = e[i] or "" }
  end
  return r
end

-- M.unpack(stdin) -> {body...}: the records' bodies a batch's stdin carries, in order (for
-- stand-in connections in specs, which answer each record as the host's shell would).
function M.unpack(stdin)
  local n, rest = stdin:match("^(%d+)\n(.*)$")
  local script = rest:sub(1, tonumber(n))
  local bodies = {}
  for i, body in script:gmatch("cs_m (%d+)\n%(\n(.-)\n%)[^\n]*\ncs_s=%$%?") do bodies[tonumber(i)] = body end
  return bodies
end

return M

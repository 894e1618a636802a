-- cargoship.fetch: streams an http(s) URL's body to a callback on the operator's machine, through Debian's curl.
--
-- M.is_url(s) -> true for http:// and https:// (any other scheme:// is a URL we refuse)
-- M.stream(url, on_chunk, opts) -> true, {status} | nil, why, code
--   on_chunk(bytes) is called for each piece of the body as it arrives (64 KiB reads of
--   curl's stdout): the body is never held whole. opts.curl: the program (default "curl").
--   code: "http" (status >= 400, after redirects), "dns", "connect", "tls", "timeout",
--   "url" (malformed, or a scheme other than http/https), "missing" (no curl), "io".
--   Every `why` names the URL without its user-info (user:password@ never reaches a message).
-- Why curl and not libcurl: hosts are air-gapped, so this runs on the operator's machine
-- only (`sha256sum URL`); curl there is Debian's, well kept, honours the operator's proxy
-- variables and CA store, and keeps TLS and HTTP parsing out of our process; the runtime
-- links no new library. The URL reaches curl in a 0600 config file, never in argv, so a
-- URL carrying credentials is not shown by ps.
local util = require "cargoship.util"

local M = {}

function M.is_url(s)
  return type(s) == "string" and s:match("^[%a][%w+.-]*://") ~= nil
end

-- The URL as messages show it: user-info replaced.
function M.redact(url)
  return (url:gsub("^([%a][%w+.-]*://)[^/?#]*@", "%1***@"))
end

local TLS = { [35] = true, [51] = true, [53] = true, [54] = true, [58] = true, [59] = true, [60] = true,
  [64] = true, [66] = true, [77] = true, [80] = true, [82] = true, [83] = true, [90] = true, [91] = true,
  [98] = true }

-- curl's exit status and its stderr -> why, code
local function failure(shown, status, err)
  local http = err:match("cargoship%-http (%d+)")
  local detail = err:match("curl: %(%d+%) ([^\n]*)") or err:match("([^\n]+)") or ""
  if status == 22 then return string.format("%s: HTTP %s", shown, http or "error"), "http" end
  if status == 6 then return string.format("%s: cannot resolve the host name (DNS): %s", shown, detail), "dns" end
  if status == 5 then return string.format("%s: cannot resolve the proxy (DNS): %s", shown, detail), "dns" end
  if status == 7 then return string.format("%s: cannot connect: %s", shown, detail), "connect" end
  if status == 28 then return string.format("%s: timed out: %s", shown, detail), "timeout" end
  if TLS[status] then return string.format("%s: TLS: %s", shown, detail), "tls" end
  if status == 1 or status == 3 then return string.format("%s: not a URL curl can fetch: %s", shown, detail), "url" end
  if status == 47 then return string.format("%s: too many redirects", shown), "http" end
  if status == 127 then
    return string.format("%s: curl is needed to fetch URLs and was not found (Debian: apt-get install curl)", shown),
      "missing"
  end
  return string.format("%s: curl exit %d: %s", shown, status, detail), "io"
end

-- A curl config string: backslash and double quote escaped (curl's own quoting rules).
local function cfg_string(s) return '"' .. s:gsub('[\\"]', "\\%0"):gsub("\n", "\\n") .. '"' end

function M.stream(url, on_chunk, opts)
  opts = opts or {}
  local shown = M.redact(url)
  local scheme = url:match("^([%a][%w+.-]*)://")
  if not scheme or (scheme:lower() ~= "http" and scheme:lower() ~= "https") then
    return nil, shown .. ": only http:// and https:// URLs are fetched", "url"
  end
  if url:find("[%z\r\n]") then return nil, shown .. ": a URL holds no control characters", "url" end
  local mk = io.popen("umask 077 && mktemp -d \"${TMPDIR:-/tmp}/cargoship-fetch.XXXXXX\"")
  local dir = mk and mk:read("l")
  if mk then mk:close() end
  if not dir then return nil, shown .. ": cannot make a temporary directory", "io" end
  local cfg, err_path = dir .. "/curl.cfg", dir .. "/stderr"
  local f = assert(io.open(cfg, "wb"))
  -- --fail: a status >= 400 is an error (its body is not hashed); redirects are followed
  -- (as the Go tool's HTTP client does) but only to http(s); a transfer stalled for a
  -- minute is given up; the final status goes to stderr for the message.
  f:write("url = ", cfg_string(url), "\n", "silent\nshow-error\nfail\nlocation\nmax-redirs = 10\n",
    "proto = \"=http,https\"\nproto-redir = \"=http,https\"\nconnect-timeout = 30\n",
    "speed-limit = 1\nspeed-time = 60\n", "write-out = \"%{stderr}cargoship-http %{http_code}\\n\"\n")
  f:close()
  local p = io.popen(string.format("%s --config %s 2>%s", util.quote(opts.curl or "curl"), util.quote(cfg),
    util.quote(err_path)), "r")
  local ok, cb_err = true, nil
  while true do
    local chunk = p:read(1 << 16)
    if not chunk then break end
    if ok then ok, cb_err = pcall(on_chunk, chunk) end
  end
  local _, _, status = p:close()
  local ef = io.open(err_path, "rb")
  local err = ef and ef:read("a") or ""
  if ef then ef:close() end
  os.execute("rm -rf " .. util.quote(dir))
  if not ok then error(cb_err, 0) end
  if status ~= 0 then return nil, failure(shown, status or -1, err) end
  return true, { status = tonumber(err:match("cargoship%-http (%d+)")) }
end

return M

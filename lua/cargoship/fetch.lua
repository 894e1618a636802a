-- cargoship.fetch: streams an http(s) URL's body to a callback on the operator's machine, through Debian's curl.
--
-- M.is_url(s) -> true for http:// and https:// (any other scheme:// is a URL we refuse)
-- M.stream(url, on_chunk, opts) -> true, {status} | nil, why, code
--   on_chunk(bytes) is called for each piece of the body as it arrives (64 KiB reads of
--   curl's stdout): the body is never held whole; if it raises, curl is killed and the error
--   goes on. opts.curl: the program (default "curl"). Must run in a task (it yields).
--   code: "http" (status >= 400, after redirects), "dns", "connect", "tls", "timeout",
--   "url" (malformed, or a scheme other than http/https), "missing" (no curl), "io".
--   Every `why` names the URL without its user-info (user:password@ never reaches a message).
-- Why curl and not libcurl: hosts are air-gapped, so this runs on the operator's machine
-- only (`sha256sum URL`); curl there is Debian's, well kept, honours the operator's proxy
-- variables and CA store, and keeps TLS and HTTP parsing out of our process; the runtime
-- links no new library. The URL reaches curl as a config on its stdin (--config -), never in
-- argv or on disk, so a URL carrying credentials is not shown by ps. curl runs through
-- cargoship.subprocess: the calling task yields while it downloads, other tasks go on.
local subprocess = require "cargoship.subprocess"

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
  -- --fail: a status >= 400 is an error (its body is not hashed); redirects are followed
  -- (as the Go tool's HTTP client does) but only to http(s); a transfer stalled for a
  -- minute is given up; the final status goes to stderr for the message.
  local cfg = table.concat({ "url = ", cfg_string(url), "\n", "silent\nshow-error\nfail\nlocation\nmax-redirs = 10\n",
    "proto = \"=http,https\"\nproto-redir = \"=http,https\"\nconnect-timeout = 30\n",
    "speed-limit = 1\nspeed-time = 60\n", "write-out = \"%{stderr}cargoship-http %{http_code}\\n\"\n" })
  local done, err, status = subprocess.run({ opts.curl or "curl", "--config", "-" },
    { stdin = cfg, on_stdout = on_chunk })
  if not done then
    if status == "missing" then return nil, failure(shown, 127, "") end
    return nil, string.format("%s: %s", shown, err), "io"
  end
  if status ~= 0 then return nil, failure(shown, status, err) end
  return true, { status = tonumber(err:match("cargoship%-http (%d+)")) }
end

return M

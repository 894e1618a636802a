-- cargoship.transport.transfer: the transfer protocol over any session kind (stage, fsync, verify, rename).
--
-- The methods below live on a connection (transport/connection.lua) and use of it only: the
-- command protocol (exec, check), the session's put and get (see transport/init.lua), name,
-- root, run_id, and temps (the temporary names this run may have left on the host).
local util = require "cargoship.util"
local shell = require "cargoship.shell"

local M = {}

local methods = {}
M.methods = methods

local function dirname(path)
  return path:match("^(.*)/[^/]*$") or "."
end

local function basename(path)
  return path:match("([^/]*)$")
end

-- The host's sha256 of "$1": cargoship.shell's cs_sha256 (the upload phases' probe uses it too).
local HOST_SHA256 = shell.SHA256_FN
M.HOST_SHA256 = HOST_SHA256

local MiB = 1024 * 1024

-- n bytes for a person: "250 MiB", "1.5 MiB", "12 KiB"; rounded down for what is free, up
-- for what is needed, so "free" never looks like enough when it is not.
local function mib(n, up)
  local round = up and math.ceil or math.floor
  local v = n / MiB
  if v >= 10 then return string.format("%d MiB", round(v)) end
  if v >= 1 then return string.format("%.1f MiB", round(v * 10) / 10) end
  return string.format("%d KiB", round(n / 1024))
end

-- The SFTP data an upload keeps in flight, by the link: 256 KiB fills a fast link (notes
-- §6: more is slower at 0 ms), but over a slow one a host receives at most what is in flight
-- per round trip (256 KiB at 100 ms: 2.5 MiB/s). The quickest command so far bounds the
-- round trip from above (the link's, plus a shell's start); in flight goes up to what that
-- time carries at M.RATE, below the 2 MiB window sshd gives a channel. Memory: the in-flight
-- packets are copies (libssh2's), so only hosts behind slow links hold more than 256 KiB.
M.OFFER_MIN, M.OFFER_MAX, M.RATE = 256 * 1024, 1536 * 1024, 16 * MiB
function M.offer(quickest)
  local want = math.floor((quickest or 0) * M.RATE)
  return math.max(M.OFFER_MIN, math.min(M.OFFER_MAX, want))
end

local function local_size(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local n = f:seek("end")
  f:close()
  return n
end

-- The shell line that prints "avail <bytes>" for the filesystem holding directory "$1".
local AVAIL = "df -P -k -- %s 2>/dev/null | awk 'NR==2{printf \"avail %%.0f\\n\", $4*1024}'"

-- The message of an upload that does not fit: named as the operator acts on it.
local function no_space(self, remote, dir, avail, size)
  return string.format("%s: upload %s: no space left on device on %s: %s free, %s needed",
    self.name, remote, dir, mib(avail), mib(size, true))
end

-- Forgets temp names that are gone from the host (renamed into place, or removed).
local function forget(self, names)
  local keep = {}
  for _, p in ipairs(self.temps) do
    local gone = false
    for _, n in ipairs(names) do gone = gone or p == n end
    if not gone then keep[#keep + 1] = p end
  end
  self.temps = keep
end

-- After a put that failed (not a dropped session): removes what it wrote, so no partial
-- file stays behind, and names a full filesystem as the cause where it is one.
local function after_failed_put(self, remote, stage, beside, size, err, code, timeout)
  if code == "closed" or code == "timeout" then return nil, err, code end
  local dir = dirname(stage:find("/", 1, true) and stage or ("./" .. stage))
  local out = self:exec(shell.fmt("rm -f -- %s %s; ", stage, beside) .. string.format(AVAIL, util.quote(dir)),
    { sudo = true, timeout = timeout })
  if out then forget(self, { stage, beside }) end
  local avail = out and tonumber(out:match("avail (%d+)"))
  if avail and size and avail < size then
    return nil, no_space(self, remote, dirname(remote), avail, size), "io"
  end
  return nil, err, code
end

-- conn:upload(local, remote, {mode = "0644"|number, owner, group, timeout, sha256 = expected, assessed})
--   -> { skipped = bool, bytes = n, sha256 = hex } | nil, msg, code
-- To a temporary name beside the target, fsync'd (by the finishing script), checked against the expected sha256 on the
-- host, then renamed into place: the target is either the old file or the whole new one.
-- Skipped when the host already has the same content, mode and owner. With opts.sha256 (the
-- plan's hash, taken once per run) the local file is not hashed again for every host: the
-- host's check against it is what guarantees the content, and a file that changed since the
-- plan fails that check instead of landing.
function methods:upload(local_path, remote, opts)
  opts = opts or {}
  local sum = opts.sha256
  if not sum then
    local size
    sum, size = util.sha256_file(local_path)   -- once per file identity per run
    if not sum then return nil, size, "io" end
  end
  local mode = opts.mode
  if type(mode) == "number" then mode = string.format("%o", mode) end
  mode = mode and mode:gsub("^0+(%d%d%d)$", "%1")
  local owner = opts.owner and (opts.owner .. (opts.group and (":" .. opts.group) or "")) or nil
  local probe = HOST_SHA256 .. "\n" .. shell.fmt("[ ! -f %s ] || cs_sha256 %s 2>/dev/null; stat -c '%%a %%U:%%G' -- %s"
    .. " 2>/dev/null; ", remote, remote, remote) .. string.format(AVAIL, util.quote(dirname(remote))) .. "; true"
  -- opts.assessed: the caller's assessment read this very target's hash, mode and owner
  -- (under the host's lock) and found them different, so asking again costs a round trip and
  -- can only agree; a full filesystem is then named after the put fails (after_failed_put)
  local cur = not opts.assessed and self:exec(probe, { sudo = true, timeout = opts.timeout }) or nil
  local size = local_size(local_path)
  if cur then
    local rsum, rmode, rowner = cur:match("^(%x+)[^\n]*\n(%d+) (%S+)")
    if rsum == sum and (not mode or mode == rmode)
      and (not owner or owner == rowner or (not opts.group and rowner:match("^[^:]*") == opts.owner)) then
      return { skipped = true, bytes = 0, sha256 = sum }
    end
    -- the new file is written beside the old one before it replaces it: it needs its whole size
    local avail = tonumber(cur:match("avail (%d+)"))
    if avail and size and avail < size then
      return nil, no_space(self, remote, dirname(remote), avail, size), "io"
    end
  end
  local tmp_name = "." .. basename(remote) .. ".cargoship-" .. self.run_id .. ".tmp"
  local beside = dirname(remote) .. "/" .. tmp_name
  -- the login user cannot write beside a root-owned target: a non-root login stages in its
  -- home (a relative name) and the script below copies the stage beside the target as root
  local stage = self.root and beside or (".cargoship-" .. self.run_id .. "-" .. basename(remote))
  self.temps[#self.temps + 1] = beside
  if stage ~= beside then self.temps[#self.temps + 1] = stage end
  -- fsync'd by the finishing script, not by the session: an SFTP fsync is a round trip of its own
  self.round_trips = (self.round_trips or 0) + 1
  local bytes, err, code = self.session:put(local_path, stage,
    { mode = 384, timeout = opts.timeout, fsync = false, offer = M.offer(self.quickest) })
  if not bytes then return after_failed_put(self, remote, stage, beside, size, err, code, opts.timeout) end
  local script = {
    "set -e",
    HOST_SHA256,
    shell.fmt("src=%s; tmp=%s; dst=%s", stage, beside, remote),
    "trap 'rm -f -- \"$tmp\"' EXIT",
    '[ "$src" = "$tmp" ] || { cp -- "$src" "$tmp"; rm -f -- "$src"; }',
    'sync -- "$tmp" 2>/dev/null || sync',
    'sum=$(cs_sha256 "$tmp"); sum=${sum%% *}',
    shell.fmt('[ "$sum" = %s ] || { echo "checksum mismatch after upload: got $sum, expected %s'
      .. ' (did the local file change since the plan?)" >&2; exit 65; }', sum, sum),
  }
  if mode then script[#script + 1] = shell.fmt('chmod %s -- "$tmp"', mode) end
  if owner then script[#script + 1] = shell.fmt('chown %s -- "$tmp"', owner) end
  script[#script + 1] = 'mv -f -- "$tmp" "$dst"'
  script[#script + 1] = "trap - EXIT"
  local ok, cerr, ccode = self:check(table.concat(script, "\n"), { sudo = true, timeout = opts.timeout })
  if not ok then return nil, cerr, ccode end
  forget(self, { stage, beside })
  return { skipped = false, bytes = bytes, sha256 = sum }
end

-- conn:download(remote, local, {timeout}) -> bytes | nil, msg, code
-- As root, through the session's get; otherwise through sudo cat, since the file is often root's.
function methods:download(remote, local_path, opts)
  opts = opts or {}
  if self.root then return self.session:get(remote, local_path, opts) end
  local tmp = local_path .. ".cs-" .. util.getpid() .. ".tmp"
  local f, ferr = io.open(tmp, "wb")
  if not f then return nil, "localhost: create " .. tmp .. ": " .. tostring(ferr), "io" end
  local n = 0
  local out, err, code = self:check(shell.fmt("cat -- %s", remote), {
    sudo = true, timeout = opts.timeout,
    on_stdout = function(chunk) n = n + #chunk; f:write(chunk) end,
  })
  f:close()
  if not out then os.remove(tmp) return nil, err, code end
  local ok, rerr = os.rename(tmp, local_path)
  if not ok then os.remove(tmp) return nil, "localhost: " .. tostring(rerr), "io" end
  return n
end

-- Removes the temporary files this run left on the host (after a cut upload).
function methods:remove_temps()
  if #self.temps == 0 then return true end
  local paths = {}
  for i, p in ipairs(self.temps) do paths[i] = util.quote(p) end
  local ok, err, code = self:exec("rm -f -- " .. table.concat(paths, " "), { sudo = true, timeout = 30 })
  if ok then self.temps = {} end
  return ok and true, err, code
end

return M

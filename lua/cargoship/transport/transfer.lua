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

-- conn:upload(local, remote, {mode = "0644"|number, owner, group, timeout, sha256 = expected})
--   -> { skipped = bool, bytes = n, sha256 = hex } | nil, msg, code
-- To a temporary name beside the target, fsync'd, checked against the expected sha256 on the
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
    .. " 2>/dev/null; true", remote, remote, remote)
  local cur = self:exec(probe, { sudo = true, timeout = opts.timeout })
  if cur then
    local rsum, rmode, rowner = cur:match("^(%x+)[^\n]*\n(%d+) (%S+)")
    if rsum == sum and (not mode or mode == rmode)
      and (not owner or owner == rowner or (not opts.group and rowner:match("^[^:]*") == opts.owner)) then
      return { skipped = true, bytes = 0, sha256 = sum }
    end
  end
  local tmp_name = "." .. basename(remote) .. ".cargoship-" .. self.run_id .. ".tmp"
  local beside = dirname(remote) .. "/" .. tmp_name
  -- the login user cannot write beside a root-owned target: a non-root login stages in its
  -- home (a relative name) and the script below copies the stage beside the target as root
  local stage = self.root and beside or (".cargoship-" .. self.run_id .. "-" .. basename(remote))
  self.temps[#self.temps + 1] = beside
  if stage ~= beside then self.temps[#self.temps + 1] = stage end
  -- fsync'd by the session when it is the temp file itself; a stage that is copied is synced as the copy
  local bytes, err, code = self.session:put(local_path, stage,
    { mode = 384, timeout = opts.timeout, fsync = stage == beside })
  if not bytes then return nil, err, code end
  local script = {
    "set -e",
    HOST_SHA256,
    shell.fmt("src=%s; tmp=%s; dst=%s", stage, beside, remote),
    "trap 'rm -f -- \"$tmp\"' EXIT",
    '[ "$src" = "$tmp" ] || { cp -- "$src" "$tmp"; rm -f -- "$src"; sync -- "$tmp" 2>/dev/null || sync; }',
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

-- cargoship.lock: the per-host exclusive lock: atomic take, holder record, heartbeat task, stale takeover.
--
-- The lock is a directory, /run/lock/cargoship.lock (or /var/lock, or /tmp when neither
-- exists), holding one file, `holder`, of key=value lines:
--   holder=user@machine  pid=N  version=V  command=...  run_id=R  started=EPOCH  token=T
-- `started` and every age are read off the host's own clock (`date +%s` against the lock's
-- mtime, in the same script), so a skewed operator clock can neither steal a live lock nor
-- keep a dead one. A heartbeat touches the directory every `interval` seconds (30); one not
-- touched for more than `stale_after` seconds (60) is stale and may be taken over. The
-- environment can change both for a run (CARGOSHIP_LOCK_INTERVAL, CARGOSHIP_LOCK_STALE_AFTER,
-- in seconds; see M.options_from_env): tests shrink them, slow links may stretch them.
--
-- Why mkdir + rename(2), not noclobber or ln -s: mkdir and rename are atomic on every POSIX
-- file system whatever the shell (noclobber is only as atomic as the shell's open(O_EXCL));
-- a directory carries the record, and its mtime is what the heartbeat touches (ln -s would
-- carry the record in the link text, but a symlink's own mtime cannot be touched portably).
-- The lock is built whole under a private name (mkdir) and published with rename(2), which
-- fails when the lock exists: nobody ever sees a lock without its record, so every lock has
-- a token that names it, and a takeover can say exactly which lock it replaces.
--
-- lock.acquire(host, info, opts) -> handle | nil, msg, code ("locked" when another holds it)
-- handle:heartbeat(), handle:release(): both check the token first; never touch another's lock.
-- lock.read(host, opts), lock.break_lock(host, opts): for dry runs and `cargoship unlock`.
local loop = require "cargoship.loop"
local util = require "cargoship.util"
local shell = require "cargoship.shell"

local M = {}

M.NAME = "cargoship.lock"
M.DIRS = { "/run/lock", "/var/lock", "/tmp" }
M.INTERVAL = 30
M.STALE_AFTER = 60
M.TIMEOUT = 20

-- Shared by every script: finding the lock, reading its age and token, reporting.
-- Output protocol: key=value lines (status, path, age, now), "--", then the holder record.
local PRELUDE = [[
umask 022
if [ -z "$L" ]; then
  for d in "$@"; do
    if [ -d "$d" ]; then L=${d%/}/$CS_NAME; break; fi
  done
fi
if [ -z "$L" ]; then echo "no directory to keep the lock in: none of $* exists" >&2; exit 70; fi
cs_mtime() { stat -c %Y -- "$1" 2>/dev/null || date -r "$1" +%s 2>/dev/null; }
cs_token() { sed -n 's/^token=//p' "$1/holder" 2>/dev/null | head -n 1 | tr -cd 'A-Za-z0-9._-'; }
cs_age() {
  m=$(cs_mtime "$1") || m=
  now=$(date +%s)
  echo $(( now - ${m:-$now} ))
}
cs_show() {
  printf 'status=%s\npath=%s\nage=%s\nnow=%s\n--\n' "$1" "$L" "$2" "$(date +%s)"
  if [ -n "$3" ]; then cat -- "$3/holder" 2>/dev/null; fi
  return 0
}
]]

-- Taking the lock. A plain take publishes the staged directory: of two takers, exactly one
-- rename succeeds. Taking over a stale lock renames it to a tombstone named after its token
-- (checked twice around the age, so the token and the age belong to the same lock), then
-- publishes. Every taker that judged the same lock stale renames onto that same name, and
-- rename(2) onto a non-empty directory fails, so a late taker can never move aside the fresh
-- lock the first one published. Tombstones and abandoned staging directories go once they
-- are older than the stale window.
local ACQUIRE = [[
S=$L.new.$CS_TOKEN
cs_take() {
  rm -rf -- "$S"
  mkdir -- "$S" || exit 70
  if ! { printf '%s\n' "$CS_RECORD"; printf 'started=%s\ntoken=%s\n' "$(date +%s)" "$CS_TOKEN"; } \
      >"$S/holder"; then
    rm -rf -- "$S"
    echo "cannot write the holder record in $S" >&2
    exit 70
  fi
  if mv -T -- "$S" "$L" 2>/dev/null; then return 0; fi
  rm -rf -- "$S"
  return 1
}
now=$(date +%s)
for t in "$L".old.* "$L".new.*; do
  [ -e "$t" ] || continue
  if [ -e "$t/gone" ]; then m=$(cs_mtime "$t/gone"); else m=$(cs_mtime "$t"); fi
  if [ -n "$m" ] && [ $(( now - m )) -gt "$CS_STALE" ]; then rm -rf -- "$t"; fi
done
n=0
while [ "$n" -lt 5 ]; do
  n=$(( n + 1 ))
  if cs_take; then cs_show acquired 0 ""; exit 0; fi
  id=$(cs_token "$L")
  m=$(cs_mtime "$L") || continue
  [ "$(cs_token "$L")" = "$id" ] || continue
  now=$(date +%s)
  age=$(( now - m ))
  if [ "$age" -le "$CS_STALE" ]; then cs_show locked "$age" "$L"; exit 0; fi
  [ -n "$id" ] || id=m$m
  T=$L.old.$id
  if mv -T -- "$L" "$T" 2>/dev/null; then
    : >"$T/gone"
    if cs_take; then cs_show took_over "$age" "$T"; exit 0; fi
  fi
done
cs_show locked "$(cs_age "$L")" "$L"
]]

-- Touching: only while the token is ours. A takeover landing between the check and the
-- touch only freshens the new holder's lock, and the next beat sees the theft.
local HEARTBEAT = [[
if [ ! -d "$L" ]; then cs_show gone 0 ""; exit 0; fi
if [ "$(cs_token "$L")" != "$CS_TOKEN" ]; then cs_show stolen "$(cs_age "$L")" "$L"; exit 0; fi
touch -c -- "$L" || exit 71
cs_show ok 0 ""
]]

-- Releasing: rename aside to this lock's tombstone name, then look at what was moved. Only
-- our own record is deleted; anything else goes back where it was. The tombstone is not
-- kept: a taker that judged this lock stale in the very moment it was released, and then
-- met a newer lock under the same name, is the one race left, and it needs a holder that
-- missed every heartbeat for the whole stale window yet released within milliseconds.
-- A run that took over removes the tombstone it left (CS_PREV) once it releases.
local RELEASE = [[
if [ ! -d "$L" ]; then cs_show gone 0 ""; exit 0; fi
if [ "$(cs_token "$L")" != "$CS_TOKEN" ]; then cs_show foreign "$(cs_age "$L")" "$L"; exit 0; fi
R=$L.old.$CS_TOKEN
rm -rf -- "$R"
if ! mv -T -- "$L" "$R" 2>/dev/null; then cs_show gone 0 ""; exit 0; fi
if [ "$(cs_token "$R")" = "$CS_TOKEN" ]; then
  rm -rf -- "$R"
  if [ -n "$CS_PREV" ]; then rm -rf -- "$L.old.$CS_PREV"; fi
  cs_show released 0 ""
  exit 0
fi
mv -T -- "$R" "$L" 2>/dev/null
cs_show foreign "$(cs_age "$L")" "$L"
]]

-- Breaking (cargoship unlock): only the lock the operator was shown, identified by its token.
local BREAK = [[
if [ ! -d "$L" ]; then cs_show gone 0 ""; exit 0; fi
if [ "$(cs_token "$L")" != "$CS_TOKEN" ]; then cs_show changed "$(cs_age "$L")" "$L"; exit 0; fi
R=$L.broken.$$
if mv -T -- "$L" "$R" 2>/dev/null; then rm -rf -- "$R"; cs_show broken 0 ""; else cs_show gone 0 ""; fi
]]

local READ = [[
if [ -d "$L" ]; then cs_show held "$(cs_age "$L")" "$L"; else cs_show free 0 ""; fi
]]

local function safe_token(s)
  return (tostring(s):gsub("[^%w._-]", "_"))
end

-- A token as the scripts' cs_token reads it off a host (other characters dropped).
local function host_token(s)
  return (tostring(s):gsub("[^A-Za-z0-9._-]", ""))
end

local function one_line(v)
  return (tostring(v):gsub("%c", " "))
end

-- The script: variables through shell.fmt (the one quoting path), then fixed shell text.
local function script(body, vars, dirs)
  local lines = {}
  for _, kv in ipairs(vars) do lines[#lines + 1] = shell.fmt(kv[1] .. "=%s", kv[2]) end
  lines[#lines + 1] = "set -- " .. shell.words(table.unpack(dirs or M.DIRS))
  return table.concat(lines, "\n") .. "\n" .. PRELUDE .. body
end

-- "status=..." head and holder record of a script's output.
local function parse(out)
  local head, body = out:match("^(.-)\n%-%-\n(.*)$")
  if not head then return nil end
  local r = { record = {} }
  for k, v in head:gmatch("([%w_]+)=([^\n]*)") do r[k] = v end
  for k, v in body:gmatch("([%w_.]+)=([^\n]*)") do
    if r.record[k] == nil then r.record[k] = v end
  end
  r.age = tonumber(r.age)
  r.now = tonumber(r.now)
  return r
end

local function span(seconds)
  seconds = math.max(0, math.floor(seconds or 0))
  if seconds < 120 then return seconds .. " s" end
  if seconds < 7200 then return math.floor(seconds / 60) .. " min" end
  if seconds < 172800 then return math.floor(seconds / 3600) .. " h" end
  return math.floor(seconds / 86400) .. " days"
end
M.span = span

-- "root@ops (pid 42, cargoship 1.0, `apply c.yaml`), started 3 min ago, last heartbeat 5 s ago"
function M.describe(record, age, now)
  record = record or {}
  if not record.holder and not record.token then
    return string.format("an unknown holder (no record in the lock yet), last touched %s ago", span(age))
  end
  local bits = {}
  if record.pid then bits[#bits + 1] = "pid " .. record.pid end
  if record.version then bits[#bits + 1] = "cargoship " .. record.version end
  if record.command then bits[#bits + 1] = "`" .. record.command .. "`" end
  local s = record.holder or "?"
  if #bits > 0 then s = s .. " (" .. table.concat(bits, ", ") .. ")" end
  local started = tonumber(record.started)
  if started and now then s = s .. ", started " .. span(now - started) .. " ago" end
  return s .. ", last heartbeat " .. span(age) .. " ago"
end

local function nolog() end
local NOLOG = { error = nolog, warn = nolog, info = nolog, verbose = nolog, debug = nolog }

-- Runs a lock script through the host (sudo; a write, so a dry run refuses it) and parses it.
local function run_script(host, text, what, timeout, read_only)
  local exec = read_only and host.probe or host.run
  local out, err, code = exec(host, text, { timeout = timeout })
  if not out then return nil, err, code end
  if code ~= 0 then
    local first = err and err:match("[^\n]*[^\n%s]") or ""
    return nil, string.format("%s: lock: %s failed (exit %d)%s", host.name, what, code,
      first ~= "" and (": " .. first) or ""), "exit"
  end
  local r = parse(out)
  if not r then return nil, host.name .. ": lock: " .. what .. ": unexpected answer from the host", "exit" end
  return r
end

local function default_info(info)
  local i = {}
  for k, v in pairs(info or {}) do i[k] = v end
  if not i.holder then
    local user = i.user or os.getenv("USER") or os.getenv("LOGNAME") or "unknown"
    i.holder = user .. "@" .. (util.hostname() or "unknown")
  end
  i.pid = i.pid or util.getpid()
  if not i.version then
    local ok, build = pcall(require, "cargoship.build")
    i.version = ok and type(build) == "table" and build.version or "unknown"
  end
  i.command = i.command or "apply"
  i.run_id = i.run_id or string.format("%d-%d", util.getpid(), math.floor(util.now() * 1000) % 1000000)
  return i
end

local Lock = {}
Lock.__index = Lock

-- kind: "stolen" or "gone" (the lock is not ours: leave it), "unreachable" (it may still be
-- ours: a release is still worth trying).
local function mark_lost(self, msg, kind)
  if self.lost then return end
  self.lost, self.lost_kind = msg, kind
  self.log:error("%s", msg)
  if self.on_lost then
    local ok, err = pcall(self.on_lost, msg, self)
    if not ok then self.log:error("%s: lock: on_lost failed: %s", self.host.name, tostring(err)) end
  end
end

-- handle:heartbeat() -> true | nil, msg, code ("lost" once the lock is gone or stolen)
function Lock:heartbeat()
  if self.released or self.releasing then return true end
  if self.lost then return nil, self.lost, "lost" end
  local r, err, code = run_script(self.host,
    script(HEARTBEAT, { { "L", self.path }, { "CS_TOKEN", self.token } }), "heartbeat", self.timeout)
  if not r then return nil, err, code end
  if r.status == "ok" then
    self.beats = self.beats + 1
    return true
  end
  -- our own release may have raced the beat: that is not a loss
  if self.releasing or self.released then return true end
  if r.status == "stolen" then
    mark_lost(self, string.format("%s: lost the lock at %s: taken over by %s; stopping work on this host",
      self.host.name, self.path, M.describe(r.record, r.age, r.now)), "stolen")
  else
    mark_lost(self, string.format("%s: lost the lock at %s: it is gone (broken with `cargoship unlock`, "
      .. "or the host rebooted); stopping work on this host", self.host.name, self.path), "gone")
  end
  return nil, self.lost, "lost"
end

local function release_remote(self)
  local r, err, code = run_script(self.host, script(RELEASE,
    { { "L", self.path }, { "CS_TOKEN", self.token }, { "CS_PREV", self.tombstone or "" } }), "release", self.timeout)
  if not r then return nil, err, code end
  if r.status == "released" then return true end
  -- a first attempt that was cut off may have removed it already
  if r.status == "gone" and self.release_tried then return true end
  if r.status == "gone" then
    return nil, string.format("%s: lock at %s was already gone: another cargoship could have "
      .. "worked on this host meanwhile", self.host.name, self.path), "lost"
  end
  return nil, string.format("%s: lock at %s is held by %s, not by this run; left it alone",
    self.host.name, self.path, M.describe(r.record, r.age, r.now)), "lost"
end

-- handle:release() -> true | nil, msg, code. Idempotent; concurrent callers share one release.
function Lock:release()
  if self.released then return self.result[1], self.result[2], self.result[3] end
  if self.releasing then
    while self.releasing do loop.sleep(0.02) end
    if self.released then return self.result[1], self.result[2], self.result[3] end
  end
  self.releasing = true
  local ok, res, err, code
  if self.lost and self.lost_kind ~= "unreachable" then
    ok, res, err, code = true, nil, self.lost, "lost"
  else
    -- a cancellation mid-release must leave the handle releasable by the next caller
    ok, res, err, code = pcall(release_remote, self)
    self.release_tried = true
  end
  self.releasing = false
  if not ok then error(res, 0) end
  if not res and code ~= "lost" then
    -- the host did not answer, or the script failed: the lock may still be there, so a
    -- later call (the cleanup after a failed release phase) may try again
    return nil, err, code
  end
  self.released = true
  self.result = { res, err, code }
  if self.task and self.task ~= loop.current() then self.task:cancel() end
  if res then self.log:verbose("released the lock at %s", self.path) end
  return res, err, code
end

-- The heartbeat task. It is also the lock's owner for cleanup: its destructor releases the
-- lock however the run ends (failure, cancellation, Ctrl-C cancelling every task, or the
-- main task ending), because the task that acquired it is usually a short per-host task
-- whose own destructors would run right after the acquire.
local function beat(self)
  loop.defer(function()
    if self.released or self.releasing or (self.lost and self.lost_kind ~= "unreachable") then return end
    local ok, err = self:release()
    if not ok then
      self.log:warn("%s; it goes stale %d s after its last heartbeat", tostring(err), self.stale_after)
    end
  end)
  local last_ok = loop.now()
  while true do
    loop.sleep(self.interval)
    if self.released or self.releasing or self.lost then return end
    local ok, err, code = self:heartbeat()
    if ok then
      last_ok = loop.now()
    elseif code == "lost" then
      return
    elseif loop.now() - last_ok >= self.stale_after then
      mark_lost(self, string.format("%s: lost the lock at %s: could not refresh it for %s (%s); "
        .. "another cargoship may take it over; stopping work on this host",
        self.host.name, self.path, span(loop.now() - last_ok), tostring(err)), "unreachable")
      return
    else
      self.log:warn("could not refresh the lock at %s (%s); trying again in %s", self.path,
        tostring(err), span(self.interval))
    end
  end
end

-- Releases, when the current task ends, a lock of ours that an interrupted acquire may have
-- left; a lock with any other token stays. Never fails the task: the lock would go stale anyway.
local function forget_later(host, token, opts)
  loop.defer(function()
    local text = script(RELEASE, { { "L", "" }, { "CS_NAME", opts.name or M.NAME }, { "CS_TOKEN", token } },
      opts.dirs)
    local ok, r = pcall(run_script, host, text, "release", opts.timeout or M.TIMEOUT)
    if ok and r and r.status == "released" and host.log then
      host.log:verbose("removed the lock an interrupted acquire had taken at %s", r.path)
    end
  end)
end

-- lock.acquire(host, info, opts) -> handle | nil, msg, code
-- info: { holder = "user@machine" (or user, and this machine's name is added), pid, version,
--         command, run_id } (defaults filled in)
-- opts: { interval = 30, stale_after = 60, timeout = 20, dirs = M.DIRS, name = M.NAME,
--         on_lost = function(msg, handle), heartbeat = true, log = host.log }
-- Never waits for a held lock: another holder is an immediate "locked" failure naming it.
function M.acquire(host, info, opts)
  opts = opts or {}
  info = default_info(info)
  local stale_after = opts.stale_after or M.STALE_AFTER
  local token = safe_token(info.run_id) .. "." .. string.format("%08x", math.random(0, 0x7fffffff))
  local record = {}
  for _, k in ipairs { "holder", "pid", "version", "command", "run_id" } do
    record[#record + 1] = k .. "=" .. one_line(info[k])
  end
  local text = script(ACQUIRE, {
    { "L", "" }, { "CS_NAME", opts.name or M.NAME }, { "CS_TOKEN", token },
    { "CS_STALE", tostring(math.floor(stale_after)) }, { "CS_RECORD", table.concat(record, "\n") },
  }, opts.dirs)
  local done, r, err, code = pcall(run_script, host, text, "acquire", opts.timeout or M.TIMEOUT)
  if (not done and r == "cancelled") or (done and not r and (code == "timeout" or code == "closed")) then
    -- cut off mid-acquire: the host may have published our lock without our hearing of it.
    -- Try a token-checked release when this task ends (a destructor can still wait).
    forget_later(host, token, opts)
  end
  if not done then error(r, 0) end
  if not r then return nil, err, code end
  if r.status == "locked" then
    return nil, string.format("%s: another cargoship holds the lock at %s: %s; it is free once that "
      .. "run ends, or %d s after its last heartbeat (`cargoship unlock CLUSTER` breaks it)",
      host.name, r.path, M.describe(r.record, r.age, r.now), stale_after), "locked", r
  end
  local log = opts.log or host.log or NOLOG
  local self = setmetatable({
    host = host, path = r.path, token = token, info = info, log = log,
    interval = opts.interval or M.INTERVAL, stale_after = stale_after,
    timeout = opts.timeout or M.TIMEOUT, on_lost = opts.on_lost,
    beats = 0, lost = nil, released = false, releasing = false,
  }, Lock)
  if r.status == "took_over" then
    self.took_over = r.record
    if r.record.token then self.tombstone = host_token(r.record.token) end
    log:warn("took over a stale lock at %s from %s (no heartbeat for over %d s)", r.path,
      M.describe(r.record, r.age, r.now), stale_after)
  else
    log:verbose("took the lock at %s", r.path)
  end
  if opts.heartbeat ~= false then self.task = loop.spawn(beat, self) end
  return self
end

-- lock.read(host, opts) -> { held = bool, path, age, now, record, token } | nil, msg, code
-- A read (host:probe): dry runs and `cargoship unlock` use it to show the holder.
function M.read(host, opts)
  opts = opts or {}
  local text = script(READ, { { "L", opts.path or "" }, { "CS_NAME", opts.name or M.NAME } }, opts.dirs)
  local r, err, code = run_script(host, text, "read", opts.timeout or M.TIMEOUT, true)
  if not r then return nil, err, code end
  return { held = r.status == "held", path = r.path, age = r.age, now = r.now, record = r.record,
    token = r.record.token and host_token(r.record.token) or "" }
end

-- lock.break_lock(host, { path, token }) -> true, "broken"|"gone" | nil, msg, code
-- Removes the lock at path only if its token is still the one shown to the operator
-- (`token` from lock.read), so a run that took the lock since is not broken unseen.
function M.break_lock(host, opts)
  local text = script(BREAK, { { "L", opts.path }, { "CS_TOKEN", opts.token or "" } })
  local r, err, code = run_script(host, text, "break", opts.timeout or M.TIMEOUT)
  if not r then return nil, err, code end
  if r.status == "broken" or r.status == "gone" then return true, r.status end
  return nil, string.format("%s: the lock at %s changed since it was shown: now held by %s; left it alone",
    host.name, r.path, M.describe(r.record, r.age, r.now)), "changed"
end

-- Timings from the environment, for tests and slow links: CARGOSHIP_LOCK_INTERVAL and
-- CARGOSHIP_LOCK_STALE_AFTER (seconds). -> { interval, stale_after } | nil, msg
function M.options_from_env(getenv)
  local o = {}
  for key, var in pairs { interval = "CARGOSHIP_LOCK_INTERVAL", stale_after = "CARGOSHIP_LOCK_STALE_AFTER" } do
    local v = getenv(var)
    if v and v ~= "" then
      local n = tonumber(v)
      if not n or n <= 0 then return nil, var .. " must be a positive number of seconds, got " .. v end
      o[key] = n
    end
  end
  if (o.interval or M.INTERVAL) >= (o.stale_after or M.STALE_AFTER) then
    return nil, "CARGOSHIP_LOCK_INTERVAL must be shorter than CARGOSHIP_LOCK_STALE_AFTER, or a live lock goes stale"
  end
  return o
end

M.Lock = Lock
M.parse = parse
return M

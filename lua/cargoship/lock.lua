-- cargoship.lock: the per-host exclusive lock: private directory, atomic take, holder record, heartbeat, takeover.
--
-- Where. The lock is the directory /run/cargoship/lock (/var/lib/cargoship/lock where /run is
-- absent), holding one file, `holder`, of key=value lines:
--   holder=user@machine  pid=N  version=V  command=...  run_id=R  [boot_id=B  init_start=I  pid_start=P]
--   stale_after=S  started=EPOCH  token=T   (the bracketed three: see M.holder_gone)
-- /run/cargoship is a directory cargoship makes itself, mode 0700, owned by the user the lock
-- scripts run as (root, through sudo; or the login user where that is not root), under a
-- parent owned by root or that user that nobody else can write to (above it, sticky
-- directories are fine: nobody else can move what is in them). Every script checks all of
-- that before it reads or changes anything, and refuses a directory that fails it, naming its
-- owner: in a world-writable place (/tmp, or /run/lock, mode 1777 on Debian), any local user
-- could plant a lock with symlinks for a root takeover to write through, or keep a fake lock
-- fresh under a spoofed "root@..." holder and block every apply. Inside the private
-- directory, only the lock's own user can create anything, and the scripts still check type
-- and owner of what they read (no symlinks, no FIFOs), write only into directories they have
-- just made themselves (mkdir, never reused), and write the record with noclobber.
--
-- Why mkdir + rename(2), not noclobber or ln -s: mkdir and rename are atomic on every POSIX
-- file system whatever the shell; a directory carries the record, and its mtime is what the
-- heartbeat touches. The lock is built whole under a private name and published with
-- rename(2), which fails when the lock exists: nobody ever sees a lock without its record, so
-- every lock has a token that names it, and a takeover can say exactly which lock it replaces.
--
-- Timing: one lock, one holder. Ages are read off the host's own clock (`date +%s` against
-- the lock's mtime, in the same script), so a skewed operator clock can neither steal a live
-- lock nor keep a dead one. With the defaults (M.timings):
--   interval I = 15 s   the holder touches the lock every I after a good touch;
--   retry    R = 5 s    after a failed touch it tries again R later (each try: at most 10 s,
--                       and never past the deadline);
--   lost_after D = 45 s the holder treats the lock as LOST, and stops work on the host,
--                       D after the moment it SENT the last touch that came back good, by a
--                       deadline of its own: it does not wait for a touch in flight;
--   stale_after S = 60 s a taker takes the lock over only when the host's clock says it was
--                       last touched more than S ago (S = the larger of the taker's own and
--                       the stale_after the holder wrote in its record).
--   The invariant: D + margin = S, margin M = S/4 (15 s, at least 1 s). A touch that came back
--   good happened on the host after it was sent, so the earliest instant any taker can see
--   the lock stale is S after that send; the holder gave up D = S - M after it. The margin
--   covers the holder's way from "lost" to stopped (the callback fails the host), a busy
--   event loop firing the deadline late, and a host clock stepped forward by less than M.
--   Whole seconds: stale means age > S in whole host seconds, which is a real age over S.
-- The environment can change I and S for a run (CARGOSHIP_LOCK_INTERVAL,
-- CARGOSHIP_LOCK_STALE_AFTER, seconds; see M.options_from_env): tests shrink them, slow links
-- stretch them; D, R and M follow from them.
--
-- lock.acquire(host, info, opts) -> handle | nil, msg, code ("locked": another holds it;
--   "taking": another run still taking its hosts held it past opts.wait; "unsafe": the lock
--   directory is not one cargoship made). opts.on_lost(msg, handle) is called once, from the
--   heartbeat task, when the lock is lost.
-- handle:heartbeat(), handle:release(), handle:firm(): check the token first; never touch another's lock.
-- lock.read(host, opts), lock.break_lock(host, opts): for dry runs and `cargoship unlock`.
-- lock.timings(opts) -> { interval, retry, lost_after, stale_after, margin, beat_timeout }.
local loop = require "cargoship.loop"
local util = require "cargoship.util"
local shell = require "cargoship.shell"

local M = {}

M.NAME = "cargoship"
M.DIRS = { "/run", "/var/lib" }  -- candidate parents of the private directory, first existing wins
M.INTERVAL = 15
M.STALE_AFTER = 60
M.BEAT_TIMEOUT = 10  -- one touch at most; the loss deadline cuts it shorter when it is near
M.TIMEOUT = 20       -- acquire, release, read, break
M.TAKING_WAIT = 30   -- the longest acquire's opts.wait waits for a lock whose run is still taking its hosts
M.TAKING_POLL = 0.5  -- the longest pause between two looks at such a lock (from 50 ms, doubling)

-- Shared by every script: finding and checking the private directory B and the lock L in it,
-- reading a record, reporting. Output protocol: key=value lines (status, path, age, now,
-- owner, ...), "--", then the holder record. cs_base prints the "unsafe" answer itself.
local PRELUDE = [[
umask 077
LC_ALL=C
export LC_ALL
U=$(id -u)
cs_mtime() { stat -c %Y -- "$1" 2>/dev/null; }
cs_owner() { stat -c '%U (uid %u)' -- "$1" 2>/dev/null || echo unknown; }
cs_unsafe() {
  printf 'status=unsafe\npath=%s\nreason=%s\nowner=%s\nmode=%s\nwant=%s\nage=0\nnow=%s\n--\n' \
    "$1" "$2" "$(cs_owner "$1")" "$(stat -c %a -- "$1" 2>/dev/null)" "$U" "$(date +%s)"
  exit 0
}
# $1 and every directory above it: a real directory owned by root or $U; $1 writable by its
# owner only, the ones above it also when sticky (nobody else can move what is in them).
cs_parent() {
  p=$1
  w=18
  while :; do
    if [ -L "$p" ]; then cs_unsafe "$p" "is a symbolic link"; fi
    if [ ! -d "$p" ]; then cs_unsafe "$p" "is not a directory"; fi
    st=$(stat -c '%u %a' -- "$p") || cs_unsafe "$p" "cannot be examined"
    o=${st% *}
    m=${st#* }
    if [ "$o" != 0 ] && [ "$o" != "$U" ]; then cs_unsafe "$p" "belongs to neither root nor uid $U"; fi
    if [ $(( 0$m & w )) -ne 0 ]; then
      if [ "$p" = "$1" ] || [ $(( 0$m & 512 )) -eq 0 ]; then cs_unsafe "$p" "can be written by others"; fi
    fi
    [ "$p" = / ] && return 0
    p=${p%/*}
    [ -n "$p" ] || p=/
  done
}
# B: the private directory (CS_BASE, or NAME in the first of the candidate parents that
# exists), made here when CS_MAKE=1; returns 1 when it is absent. Exits "unsafe" when a
# check fails.
cs_base() {
  if [ -n "$CS_BASE" ]; then
    B=$CS_BASE
  else
    for d in "$@"; do
      if [ -d "$d" ] && [ ! -L "$d" ]; then B=${d%/}/$CS_NAME; break; fi
    done
    if [ -z "$B" ]; then echo "no directory to keep the lock in: none of $* exists" >&2; exit 70; fi
  fi
  L=$B/lock
  P=${B%/*}
  cs_parent "${P:-/}"
  if [ ! -e "$B" ] && [ ! -L "$B" ]; then
    [ "$CS_MAKE" = 1 ] || return 1
    mkdir -m 700 -- "$B" 2>/dev/null
  fi
  if [ -L "$B" ]; then cs_unsafe "$B" "is a symbolic link"; fi
  if [ ! -d "$B" ]; then cs_unsafe "$B" "is not a directory"; fi
  [ "$(stat -c %u -- "$B")" = "$U" ] || cs_unsafe "$B" "does not belong to uid $U"
  [ "$(stat -c %a -- "$B")" = 700 ] || cs_unsafe "$B" "is not private (mode 700)"
  return 0
}
# the lock itself, when there: a real directory of ours (anything else was not made by
# cargoship). One lstat, so a lock renamed away meanwhile reads as absent, not as foreign.
cs_lock_ok() {
  st=$(stat -c '%u %F' -- "$L" 2>/dev/null) || return 0
  case $st in
    "$U directory") return 0 ;;
    *" symbolic link") cs_unsafe "$L" "is a symbolic link" ;;
    *" directory") cs_unsafe "$L" "does not belong to uid $U" ;;
    *) cs_unsafe "$L" "is not a directory" ;;
  esac
}
# a lock directory's record: only a regular file of ours, never more than 4 KiB of it
cs_record() {
  case $(stat -c '%u %F' -- "$1/holder" 2>/dev/null) in
    "$U regular file" | "$U regular empty file") head -c 4096 -- "$1/holder" ;;
  esac
  return 0
}
cs_field() { cs_record "$1" | sed -n "s/^$2=//p" | head -n 1; }
cs_token() { cs_field "$1" token | tr -cd 'A-Za-z0-9._-'; }
cs_age() {
  m=$(cs_mtime "$1") || m=
  now=$(date +%s)
  echo $(( now - ${m:-$now} ))
}
cs_show() {
  printf 'status=%s\npath=%s\nage=%s\nnow=%s\nstale=%s\n' "$1" "$L" "$2" "$(date +%s)" "${lim:-}"
  if [ -n "$3" ]; then printf 'owner=%s\n' "$(cs_owner "$3")"; fi
  echo --
  if [ -n "$3" ]; then cs_record "$3"; fi
  return 0
}
]]

-- Taking the lock. A plain take publishes a staging directory made for this take alone: of
-- two takers, exactly one rename succeeds. Taking over a stale lock renames it to a tombstone
-- named after its token (checked twice around the age, so the token and the age belong to
-- the same lock), then publishes. Every taker that judged the same lock stale renames onto
-- that same name, and rename(2) onto a non-empty directory fails, so a late taker can never
-- move aside the fresh lock the first one published. A tombstone's own mtime is set when it
-- is made (nothing is written inside a directory another run made); abandoned staging
-- directories go once they are older than the stale window, tombstones once they are ten times
-- older: a late taker is safe while the tombstone it would rename onto is there, so it must
-- stall for that long between its judgement and its rename (which asks the token again first)
-- before it could move a fresh lock aside. The stale window is the
-- larger of this taker's and the one the holder wrote in its record (its promise to have
-- stopped by then), so a run started with shorter timings never cuts a longer holder short.
local ACQUIRE = [[
CS_MAKE=1
cs_base "$@"
cs_lock_ok
S=$B/new.$CS_TOKEN
# the lock met is firm when its holder has taken all its hosts (lock.firm: firm.TOKEN in it)
cs_firm() { if [ -n "$id" ] && [ -e "$L/firm.$id" ]; then echo firm=1; fi; return 0; }
cs_take() {
  rm -rf -- "$S"
  mkdir -- "$S" || exit 70
  if ! ( set -C; { printf '%s\n' "$CS_RECORD"; printf 'started=%s\ntoken=%s\n' "$(date +%s)" "$CS_TOKEN"; } \
      >"$S/holder" ); then
    rm -rf -- "$S"
    echo "cannot write the holder record in $S" >&2
    exit 70
  fi
  if mv -T -- "$S" "$L" 2>/dev/null; then return 0; fi
  rm -rf -- "$S"
  return 1
}
now=$(date +%s)
for t in "$B"/old.* "$B"/new.*; do
  [ -e "$t" ] || continue
  m=$(cs_mtime "$t")
  g=$CS_STALE
  case $t in "$B"/old.*) g=$(( CS_STALE * 10 ));; esac
  if [ -n "$m" ] && [ $(( now - m )) -gt "$g" ]; then rm -rf -- "$t"; fi
done
n=0
while [ "$n" -lt 5 ]; do
  n=$(( n + 1 ))
  lim=$CS_STALE
  if cs_take; then cs_show acquired 0 ""; exit 0; fi
  cs_lock_ok
  id=$(cs_token "$L")
  m=$(cs_mtime "$L") || continue
  w=$(cs_field "$L" stale_after | tr -cd 0-9)
  [ "$(cs_token "$L")" = "$id" ] || continue
  if [ -n "$w" ] && [ "${#w}" -le 6 ] && [ "$w" -gt "$lim" ]; then lim=$w; fi
  now=$(date +%s)
  age=$(( now - m ))
  if [ "$age" -le "$lim" ]; then cs_firm; cs_show locked "$age" "$L"; exit 0; fi
  # a lock without a token (not made by cargoship) is named by its mtime and inode
  [ -n "$id" ] || id=m$(stat -c '%Y.%i' -- "$L")
  T=$B/old.$id
  # the lock judged stale, asked again at the last moment: a taker that stalled since has
  # found another's fresh lock there, whose tombstone name is not the one it holds
  c=$(cs_token "$L"); [ -n "$c" ] || c=m$(stat -c '%Y.%i' -- "$L" 2>/dev/null)
  [ "$c" = "$id" ] || continue
  if mv -T -- "$L" "$T" 2>/dev/null; then
    touch -c -- "$T"
    if cs_take; then echo "tomb=$id"; cs_show took_over "$age" "$T"; exit 0; fi
  fi
done
id=$(cs_token "$L")
cs_firm
cs_show locked "$(cs_age "$L")" "$L"
]]

-- Touching: only while the token is ours. A takeover landing between the check and the
-- touch only freshens the new holder's lock, and the next beat sees the theft.
local HEARTBEAT = [[
if ! cs_base "$@" || [ ! -d "$L" ]; then cs_show gone 0 ""; exit 0; fi
cs_lock_ok
if [ "$(cs_token "$L")" != "$CS_TOKEN" ]; then cs_show stolen "$(cs_age "$L")" "$L"; exit 0; fi
touch -c -- "$L" || exit 71
cs_show ok 0 ""
]]

-- The fast paths of the scripts a run sends to every host it holds (heartbeat, firm,
-- release), before the prelude: with the shell's own tests and `read`, a lock still ours is
-- touched, marked or released with at most two processes (`touch`; none; `mv` and `rm`)
-- instead of a dozen or more (the prelude's `id`, the parents' and the lock's `stat`s, the
-- record's `head | sed | head | tr`, `date`). At 1,000 hosts each of these goes to every host
-- at once. They check what could have changed since the take, with the same meaning: the
-- private directory, the lock and its record real (no symbolic link), of this uid, the record
-- a regular file whose first token line is ours. The modes and the parents above were checked
-- at the take, and only this uid or root can change them. Anything else (gone, stolen, a check
-- failing) falls through to the full script, which names it.
local FAST = [[
cs_ours() {
  [ -d "$1" ] && [ ! -L "$1" ] && [ -O "$1" ] && [ -f "$1/holder" ] && [ ! -L "$1/holder" ] \
    && [ -O "$1/holder" ] || return 1
  cs_t=
  while IFS= read -r cs_x; do case $cs_x in token=*) cs_t=${cs_x#token=}; break ;; esac; done <"$1/holder"
  [ -n "$cs_t" ] && [ "$cs_t" = "$CS_TOKEN" ]
}
cs_L=$CS_BASE/lock
cs_fast=0
if [ -n "$CS_BASE" ] && [ -d "$CS_BASE" ] && [ ! -L "$CS_BASE" ] && [ -O "$CS_BASE" ] && cs_ours "$cs_L"; then
  cs_fast=1
fi
cs_done() { printf 'status=%s\npath=%s\nage=0\n--\n' "$1" "$cs_L"; exit 0; }
]]
local HEARTBEAT_FAST = FAST .. [[
if [ "$cs_fast" = 1 ] && touch -c -- "$cs_L"; then cs_done ok; fi
]]
-- the marker made as the full script makes it: a subshell, since a failed redirection of
-- `:` (a special built-in) would end the script itself
local FIRM_FAST = FAST .. [[
if [ "$cs_fast" = 1 ]; then
  cs_F=$cs_L/firm.$CS_TOKEN
  if [ -e "$cs_F" ] || ( set -C; : >"$cs_F" ) 2>/dev/null; then cs_done ok; fi
fi
]]
-- rename aside to the tombstone name (only when no earlier attempt left one: the full script
-- clears it), then the moved directory must still be ours, or it goes back
local RELEASE_FAST = FAST .. [[
cs_R=$CS_BASE/old.$CS_TOKEN
if [ "$cs_fast" = 1 ] && [ ! -e "$cs_R" ] && [ ! -L "$cs_R" ] && mv -T -- "$cs_L" "$cs_R" 2>/dev/null; then
  if cs_ours "$cs_R"; then
    rm -rf -- "$cs_R" ${CS_PREV:+"$CS_BASE/old.$CS_PREV"}
    cs_done released
  fi
  mv -T -- "$cs_R" "$cs_L" 2>/dev/null
fi
]]

-- Making firm (handle:firm): marks this lock, by its own token, as one of a run that has taken
-- all its hosts; a taker that meets it fails at once (a lock not firm yet may be waited for:
-- M.acquire's opts.wait). A marker landing in a lock taken over meanwhile names the old token,
-- so it marks nothing for the new holder.
local FIRM = [[
if ! cs_base "$@" || [ ! -d "$L" ]; then cs_show gone 0 ""; exit 0; fi
cs_lock_ok
if [ "$(cs_token "$L")" != "$CS_TOKEN" ]; then cs_show stolen "$(cs_age "$L")" "$L"; exit 0; fi
F=$L/firm.$CS_TOKEN
if [ ! -e "$F" ]; then ( set -C; : >"$F" ) 2>/dev/null || [ -e "$F" ] || exit 71; fi
cs_show ok 0 ""
]]

-- Releasing: rename aside to this lock's tombstone name, then look at what was moved. Only
-- our own record is deleted; anything else goes back where it was. The tombstone is not
-- kept: a taker that judged this lock stale in the very moment it was released, and then
-- met a newer lock under the same name, is the one race left, and it needs a holder that
-- missed every heartbeat for the whole stale window yet released within milliseconds.
-- A run that took over removes the tombstone it left (CS_PREV) once it releases.
local RELEASE = [[
if ! cs_base "$@" || [ ! -d "$L" ]; then cs_show gone 0 ""; exit 0; fi
cs_lock_ok
if [ "$(cs_token "$L")" != "$CS_TOKEN" ]; then cs_show foreign "$(cs_age "$L")" "$L"; exit 0; fi
R=$B/old.$CS_TOKEN
rm -rf -- "$R"
if ! mv -T -- "$L" "$R" 2>/dev/null; then cs_show gone 0 ""; exit 0; fi
if [ "$(cs_token "$R")" = "$CS_TOKEN" ]; then
  rm -rf -- "$R"
  if [ -n "$CS_PREV" ]; then rm -rf -- "$B/old.$CS_PREV"; fi
  cs_show released 0 ""
  exit 0
fi
mv -T -- "$R" "$L" 2>/dev/null
cs_show foreign "$(cs_age "$L")" "$L"
]]

-- Breaking (cargoship unlock): only the lock the operator was shown, identified by its token.
local BREAK = [[
if ! cs_base "$@" || [ ! -d "$L" ]; then cs_show gone 0 ""; exit 0; fi
cs_lock_ok
if [ "$(cs_token "$L")" != "$CS_TOKEN" ]; then cs_show changed "$(cs_age "$L")" "$L"; exit 0; fi
R=$B/broken.$$
if mv -T -- "$L" "$R" 2>/dev/null; then rm -rf -- "$R"; cs_show broken 0 ""; else cs_show gone 0 ""; fi
]]

local READ = [[
if ! cs_base "$@" || [ ! -d "$L" ]; then cs_show free 0 ""; exit 0; fi
cs_lock_ok
lim=$(cs_field "$L" stale_after | tr -cd 0-9)
cs_show held "$(cs_age "$L")" "$L"
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

-- Where the lock is on a host with the default directories and /run present (for sentences).
function M.default_path()
  return M.DIRS[1] .. "/" .. M.NAME .. "/lock"
end

-- The private directory a lock path lives in ("/run/cargoship/lock" -> "/run/cargoship").
local function base_of(path)
  return path and path:match("^(/.+)/lock$") or ""
end

-- The script: variables through shell.fmt (the one quoting path), then fixed shell text.
local function script(body, vars, dirs, fast)
  local lines = {}
  for _, kv in ipairs(vars) do lines[#lines + 1] = shell.fmt(kv[1] .. "=%s", kv[2]) end
  dirs = dirs or M.DIRS
  for _, d in ipairs(dirs) do
    if d:sub(1, 1) ~= "/" then error("lock: a lock directory must be an absolute path, got " .. d, 3) end
  end
  lines[#lines + 1] = "set -- " .. shell.words(table.unpack(dirs))
  return table.concat(lines, "\n") .. "\n" .. (fast or "") .. PRELUDE .. body
end

-- "status=..." head and holder record of a script's output.
local function parse(out)
  local head, body = out:match("^(.-)\n%-%-\n(.*)$")
  if not head then head, body = out:match("^(.-)\n%-%-$") end
  if not head then return nil end
  local r = { record = {} }
  for k, v in head:gmatch("([%w_]+)=([^\n]*)") do r[k] = v end
  for k, v in (body or ""):gmatch("([%w_.]+)=([^\n]*)") do
    if r.record[k] == nil then r.record[k] = v end
  end
  r.age = tonumber(r.age)
  r.now = tonumber(r.now)
  r.stale = tonumber(r.stale)
  return r
end

local function span(seconds)
  seconds = math.max(0, seconds or 0)
  if seconds < 10 and seconds ~= math.floor(seconds) then return string.format("%.1f s", seconds) end
  seconds = math.floor(seconds)
  if seconds < 120 then return seconds .. " s" end
  if seconds < 7200 then return math.floor(seconds / 60) .. " min" end
  if seconds < 172800 then return math.floor(seconds / 3600) .. " h" end
  return math.floor(seconds / 86400) .. " days"
end
M.span = span

-- "root@ops (pid 42, cargoship 1.0, `apply c.yaml`), started 3 min ago, last heartbeat 5 s ago,
-- lock directory owned by root (uid 0)". The record says what the holder claims; the owner is
-- what the host's file system says, which is what to believe.
function M.describe(record, age, now, owner)
  record = record or {}
  local tail = owner and owner ~= "" and (", lock directory owned by " .. owner) or ""
  if not record.holder and not record.token then
    return string.format("an unknown holder (no record in the lock), last touched %s ago%s", span(age), tail)
  end
  local bits = {}
  if record.pid then bits[#bits + 1] = "pid " .. record.pid end
  if record.version then bits[#bits + 1] = "cargoship " .. record.version end
  if record.command then bits[#bits + 1] = "`" .. record.command .. "`" end
  local s = record.holder or "?"
  if #bits > 0 then s = s .. " (" .. table.concat(bits, ", ") .. ")" end
  local started = tonumber(record.started)
  if started and now then s = s .. ", started " .. span(now - started) .. " ago" end
  return s .. ", last heartbeat " .. span(age) .. " ago" .. tail
end

-- What the scripts say about a directory they refuse, for every caller alike.
local function unsafe_message(host, r)
  local uid = r.want or "?"
  return string.format("%s: lock: refusing %s: it %s (owner %s, mode %s); cargoship keeps its lock only in a "
    .. "directory it made itself (uid %s, mode 700) under parents only root or uid %s can write, and this one "
    .. "may have been planted to block or mislead it: check it, and remove it as root if it is not legitimate",
    host.name, r.path or "?", r.reason or "is not safe", r.owner or "unknown", r.mode ~= "" and r.mode or "?",
    uid, uid)
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
  if r.status == "unsafe" then return nil, unsafe_message(host, r), "unsafe", r end
  return r
end

-- M.timings{interval, stale_after, margin} -> t | nil, msg. The lock's clock, derived from
-- the stale window S (whole seconds, at least 2) and the interval I:
--   margin = max(1, S/4); lost_after = S - margin; interval defaults to min(15, lost_after/3)
--   and may be at most lost_after/2, so a missed beat is retried in time; retry = I/3;
--   beat_timeout = 10, cut to what is left before the deadline (a slow touch that still
--   lands in time keeps the lock). At the defaults: I 15, R 5, D 45, S 60, M 15.
function M.timings(o)
  o = o or {}
  local stale = o.stale_after or M.STALE_AFTER
  if type(stale) ~= "number" or stale ~= math.floor(stale) or stale < 2 then
    return nil, string.format("the lock's stale window must be a whole number of seconds, at least 2 (got %s)",
      tostring(stale))
  end
  local margin = o.margin or math.max(1, stale / 4)
  if type(margin) ~= "number" or margin <= 0 or margin >= stale then
    return nil, string.format("the lock's safety margin must be between 0 and %d s (got %s)", stale, tostring(margin))
  end
  local lost_after = stale - margin
  local interval = o.interval or math.min(M.INTERVAL, lost_after / 3)
  if type(interval) ~= "number" or interval <= 0 or interval > lost_after / 2 then
    return nil, string.format("the lock's heartbeat interval must be more than 0 and at most %g s (half of the "
      .. "%g s a holder keeps a lock without a good heartbeat: its %d s stale window less a %g s margin), "
      .. "got %s", lost_after / 2, lost_after, stale, margin, tostring(interval))
  end
  return {
    interval = interval, stale_after = stale, margin = margin, lost_after = lost_after,
    retry = interval / 3, beat_timeout = M.BEAT_TIMEOUT,
  }
end

-- ---- is the holder still running? -------------------------------------------------------
-- A record names its holder's machine and pid; a run killed with -9 (or a machine that lost
-- power) leaves its lock until the stale window ends. When the holder was this machine, this
-- boot, this PID namespace and this user, the record is checked against the process table:
-- a pid that is gone, or that now belongs to a program started later (the kernel reuses
-- pids), means the holder is gone, and the message says so instead of "free once that run
-- ends". The record carries for that (M.me):
--   boot_id     /proc/sys/kernel/random/boot_id: one per boot of one machine;
--   init_start  the start time of PID 1 as this process sees it: containers on one kernel
--               share the boot id, not their PID 1;
--   pid_start   the holder's own start time (clock ticks since boot, /proc/PID/stat field 22).
-- Where /proc says nothing (not Linux), or any of it differs, nothing is claimed: a record of
-- another machine (or of a build that wrote none of it) gets the usual message. Only the
-- same user: /proc mounted with hidepid hides other users' processes.

local function read_proc(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- start time of a process, in clock ticks since boot; nil when there is no such process
local function proc_start(pid)
  local s = read_proc("/proc/" .. pid .. "/stat")
  -- after the command name, which may hold spaces and parentheses: state is field 3, so
  -- the start time (field 22) is the 20th word
  local rest = s and s:match("^.*%) (.*)$")
  if not rest then return nil end
  local n = 0
  for w in rest:gmatch("%S+") do
    n = n + 1
    if n == 20 then return w:match("^%d+$") end
  end
  return nil
end
M.proc_start = proc_start

local function user_name(i)
  return (i and i.user) or os.getenv("USER") or os.getenv("LOGNAME") or "unknown"
end

-- M.me() -> { user, machine, pid, boot_id, init_start, pid_start }: this process as a record
-- names it (boot_id, init_start, pid_start nil where /proc has none).
function M.me()
  local boot = read_proc("/proc/sys/kernel/random/boot_id")
  local pid = util.getpid()
  return { user = user_name(), machine = util.hostname() or "unknown", pid = pid,
    boot_id = boot and boot:match("^%s*([%x-]+)%s*$"), init_start = proc_start(1), pid_start = proc_start(pid) }
end

-- M.holder_gone(record, me) -> nil | "gone" | "reused": whether the run a record names is
-- known to have ended (its pid is gone, or is a program started after it); nil when it runs
-- or cannot be told (another machine, boot, PID namespace or user; no /proc).
function M.holder_gone(record, me)
  me = me or M.me()
  record = record or {}
  local pid = tostring(record.pid or ""):match("^%d+$")
  if not pid or not record.boot_id or not me.boot_id or not me.pid_start then return nil end
  local user, machine = tostring(record.holder or ""):match("^(.*)@([^@]*)$")
  if user ~= me.user or machine ~= me.machine then return nil end
  if record.boot_id ~= me.boot_id or (record.init_start or "") ~= (me.init_start or "") then return nil end
  local start = proc_start(pid)
  if not start then return "gone" end
  if record.pid_start and record.pid_start ~= start then return "reused" end
  return nil
end

-- The clause a message about a gone holder starts with: "gone (pid 42, killed?)".
local function gone_clause(record, how)
  return string.format("gone (pid %s%s, killed?)", tostring(record.pid),
    how == "reused" and " is another program now" or "")
end

-- M.gone_note(record) -> "; that run is gone (pid 42, killed?) ..." | "": for sentences about a
-- holder (the dry run's plan), empty unless the holder is known to have ended.
function M.gone_note(record, me)
  local how = M.holder_gone(record, me)
  if not how then return "" end
  return "; that run is " .. gone_clause(record, how) .. ", `cargoship unlock` breaks its lock now"
end

local function default_info(info)
  local i = {}
  for k, v in pairs(info or {}) do i[k] = v end
  if not i.holder then
    i.holder = user_name(i) .. "@" .. (util.hostname() or "unknown")
  end
  -- this process: the record says how to tell, later, that it is gone
  if i.pid == nil or i.pid == util.getpid() then
    local me = M.me()
    i.pid = me.pid
    i.boot_id, i.init_start, i.pid_start = me.boot_id, me.init_start, me.pid_start
  end
  if not i.version then
    local ok, build = pcall(require, "cargoship.build")
    i.version = ok and type(build) == "table" and build.version or "unknown"
  end
  -- `cargoship unlock` shows which command holds a host: a lock without one says nothing
  if type(i.command) ~= "string" or i.command == "" then
    error("lock.acquire: info.command must name the command taking the lock (\"apply c.yaml\")", 3)
  end
  i.run_id = i.run_id or string.format("%d-%d", util.getpid(), math.floor(util.now() * 1000) % 1000000)
  return i
end

local Lock = {}
Lock.__index = Lock

-- kind: "stolen" or "gone" (the lock is not ours: leave it), "unreachable" (it may still be
-- ours: a release is still worth trying).
local function mark_lost(self, msg, kind)
  if self.lost then return end
  self.lost, self.lost_kind, self.lost_at = msg, kind, loop.now()
  -- the callback's owner reports the loss (ctx:host_lost fails the host, which logs it once)
  if not self.on_lost then
    self.log:error("%s", msg)
    return
  end
  local ok, err = pcall(self.on_lost, msg, self)
  if not ok then
    self.log:error("%s", msg)
    self.log:error("%s: lock: on_lost failed: %s", self.host.name, tostring(err))
  end
end

-- A heartbeat's or firm's answer that the lock is no longer ours: stolen, or gone.
local function lost_by(self, r)
  if r.status == "stolen" then
    mark_lost(self, string.format("%s: lost the lock at %s: taken over by %s; stopping work on this host",
      self.host.name, self.path, M.describe(r.record, r.age, r.now, r.owner)), "stolen")
  else
    mark_lost(self, string.format("%s: lost the lock at %s: it is gone (broken with `cargoship unlock`, "
      .. "or the host rebooted); stopping work on this host", self.host.name, self.path), "gone")
  end
  return nil, self.lost, "lost"
end

-- handle:heartbeat(opts) -> true | nil, msg, code ("lost" once the lock is gone or stolen).
-- One touch; on success, last_ok becomes the moment it was sent (the touch happened after).
function Lock:heartbeat(opts)
  if self.released or self.releasing then return true end
  if self.lost then return nil, self.lost, "lost" end
  local sent = loop.now()
  local r, err, code = run_script(self.host,
    script(HEARTBEAT, { { "CS_BASE", base_of(self.path) }, { "CS_TOKEN", self.token } }, nil, HEARTBEAT_FAST),
    "heartbeat",
    (opts and opts.timeout) or self.timings.beat_timeout)
  if not r then
    if code == "unsafe" then
      mark_lost(self, err .. "; so the lock is lost: stopping work on this host", "gone")
      return nil, self.lost, "lost"
    end
    return nil, err, code
  end
  if r.status == "ok" then
    self.beats = self.beats + 1
    if sent > self.last_ok then self.last_ok = sent end
    return true
  end
  -- our own release may have raced the beat: that is not a loss
  if self.releasing or self.released then return true end
  return lost_by(self, r)
end

-- handle:firm() -> true | nil, msg, code: marks the lock firm, once the run holds every host it
-- needs: from then on a taker meeting it fails at once instead of waiting (M.acquire's opts.wait).
function Lock:firm()
  if self.firmed then return true end
  if self.lost then return nil, self.lost, "lost" end
  local r, err, code = run_script(self.host,
    script(FIRM, { { "CS_BASE", base_of(self.path) }, { "CS_TOKEN", self.token } }, nil, FIRM_FAST), "firm",
    self.timeout)
  if not r then return nil, err, code end
  if r.status == "ok" then
    self.firmed = true
    return true
  end
  return lost_by(self, r)
end

-- handle:deadline() -> the loop.now() instant at which the holder counts the lock as lost.
function Lock:deadline()
  return self.last_ok + self.timings.lost_after
end

local function release_remote(self)
  local r, err, code = run_script(self.host, script(RELEASE,
    { { "CS_BASE", base_of(self.path) }, { "CS_TOKEN", self.token }, { "CS_PREV", self.tombstone or "" } }, nil,
    RELEASE_FAST), "release", self.timeout)
  if not r then
    if code == "unsafe" then return nil, err, "lost" end
    return nil, err, code
  end
  if r.status == "released" then return true end
  -- a first attempt that was cut off may have removed it already
  if r.status == "gone" and self.release_tried then return true end
  if r.status == "gone" then
    return nil, string.format("%s: lock at %s was already gone: another cargoship could have "
      .. "worked on this host meanwhile", self.host.name, self.path), "lost"
  end
  return nil, string.format("%s: lock at %s is held by %s, not by this run; left it alone",
    self.host.name, self.path, M.describe(r.record, r.age, r.now, r.owner)), "lost"
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

-- One beat in a task of its own, so the loss deadline does not wait for it: a stalled
-- session or a pulled link can hold a command far longer than any deadline the transport
-- enforces. -> "ok" | "lost" | "failed", err | "late" (the deadline came first)
local function beat_once(self)
  local deadline = self:deadline()
  local left = deadline - loop.now()
  if left <= 0 then return "late" end
  local t = loop.spawn(function()
    return self:heartbeat({ timeout = math.min(self.timings.beat_timeout, left) })
  end)
  self.beat_task = t
  local done, ok, err, code = t:join(left)
  self.beat_task = nil
  if not done then
    t:cancel()
    if err == "timeout" then return "late", "the heartbeat in flight had no answer" end
    return "failed", ok  -- the beat raised: its message
  end
  if ok then return "ok" end
  if code == "lost" then return "lost" end
  return "failed", err
end

-- The heartbeat task. It is also the lock's owner for cleanup: its destructor releases the
-- lock however the run ends (failure, cancellation, Ctrl-C cancelling every task, or the
-- main task ending), because the task that acquired it is usually a short per-host task
-- whose own destructors would run right after the acquire. A lock already lost is left to
-- the run's cleanup: one that went unreachable may still be ours, but its host is stalled.
local function beat(self)
  loop.defer(function()
    if self.beat_task then self.beat_task:cancel() end
    if self.released or self.releasing or self.lost then return end
    local ok, err = self:release()
    if not ok then
      self.log:warn("%s; it goes stale %d s after its last heartbeat", tostring(err), self.timings.stale_after)
    end
  end)
  local t = self.timings
  local wait, last_err = t.interval, nil
  while true do
    local now = loop.now()
    loop.sleep(math.max(0, math.min(now + wait, self:deadline()) - now))
    if self.released or self.releasing or self.lost then return end
    local how, err = beat_once(self)
    if how == "ok" then
      wait, last_err = t.interval, nil
    elseif how == "lost" then
      return
    else
      last_err = err or last_err
      if how == "late" or loop.now() >= self:deadline() then
        mark_lost(self, string.format("%s: lost the lock at %s: no heartbeat got through for %s (%s); another "
          .. "cargoship may take it over %s after the last one, so this run stops work on this host now",
          self.host.name, self.path, span(loop.now() - self.last_ok), tostring(last_err or "no answer"),
          span(t.stale_after)), "unreachable")
        return
      end
      wait = t.retry
      self.log:warn("could not refresh the lock at %s (%s); trying again in %s (it counts as lost in %s)",
        self.path, tostring(err), span(wait), span(self:deadline() - loop.now()))
    end
  end
end

-- Releases, when the current task ends, a lock of ours that an interrupted acquire may have
-- left; a lock with any other token stays. Never fails the task: the lock would go stale anyway.
local function forget_later(host, token, opts)
  loop.defer(function()
    local text = script(RELEASE, { { "CS_BASE", "" }, { "CS_NAME", opts.name or M.NAME }, { "CS_TOKEN", token } },
      opts.dirs)
    local ok, r = pcall(run_script, host, text, "release", opts.timeout or M.TIMEOUT)
    if ok and r and r.status == "released" and host.log then
      host.log:verbose("removed the lock an interrupted acquire had taken at %s", r.path)
    end
  end)
end

-- lock.acquire(host, info, opts) -> handle | nil, msg, code [, answer]
-- info: { holder = "user@machine" (or user, and this machine's name is added), pid, version,
--         command (required: "apply c.yaml", which unlock shows), run_id } (defaults filled in)
-- opts: { interval = 15, stale_after = 60, margin = stale_after/4, timeout = 20, wait = 0, dirs = M.DIRS,
--         name = M.NAME, on_lost = function(msg, handle), heartbeat = true, log = host.log }
-- Never waits for a held lock: another holder is an immediate "locked" failure naming it. A lock
-- that is not firm yet (handle:firm: its run is still taking its hosts) is waited for up to
-- opts.wait seconds, polling, then fails "taking"; one of this run_id never is. Without
-- opts.wait, firm or not, a held lock fails "locked".
-- Bad timings are a caller's mistake and raise.
function M.acquire(host, info, opts)
  opts = opts or {}
  info = default_info(info)
  local t, terr = M.timings(opts)
  if not t then error("lock.acquire: " .. terr, 2) end
  local token = safe_token(info.run_id) .. "." .. string.format("%08x", math.random(0, 0x7fffffff))
  local record = {}
  for _, k in ipairs { "holder", "pid", "version", "command", "run_id" } do
    record[#record + 1] = k .. "=" .. one_line(info[k])
  end
  for _, k in ipairs { "boot_id", "init_start", "pid_start" } do
    if info[k] then record[#record + 1] = k .. "=" .. one_line(info[k]) end
  end
  record[#record + 1] = "stale_after=" .. t.stale_after
  local text = script(ACQUIRE, {
    { "CS_BASE", "" }, { "CS_NAME", opts.name or M.NAME }, { "CS_TOKEN", token },
    { "CS_STALE", tostring(t.stale_after) }, { "CS_RECORD", table.concat(record, "\n") },
  }, opts.dirs)
  local began, pause = loop.now(), math.min(0.05, M.TAKING_POLL)
  local sent, r
  while true do
    -- the deadline counts from here: the lock on the host is no older than this moment
    sent = loop.now()
    local done, err, code, answer
    done, r, err, code, answer = pcall(run_script, host, text, "acquire", opts.timeout or M.TIMEOUT)
    if (not done and r == "cancelled") or (done and not r and (code == "timeout" or code == "closed")) then
      -- cut off mid-acquire: the host may have published our lock without our hearing of it.
      -- Try a token-checked release when this task ends (a destructor can still wait).
      forget_later(host, token, opts)
    end
    if not done then error(r, 0) end
    if not r then return nil, err, code, answer end
    if r.status ~= "locked" then break end
    local lim = r.stale or t.stale_after
    local how = M.holder_gone(r.record)
    if how then
      -- stale once its age is over lim in whole host seconds
      return nil, string.format("%s: the lock at %s is held by a run that is %s: %s; stale after %s more, "
        .. "or `cargoship unlock CLUSTER` breaks it now", host.name, r.path, gone_clause(r.record, how),
        M.describe(r.record, r.age, r.now, r.owner), span(math.max(1, lim - (r.age or 0) + 1))), "locked", r
    end
    -- a lock not firm yet: its run is still taking its hosts (or died doing so); never our own
    local taking = opts.wait and r.firm ~= "1" and r.record.run_id ~= one_line(info.run_id)
    if not taking then
      return nil, string.format("%s: another cargoship holds the lock at %s: %s; it is free once that "
        .. "run ends, or %d s after its last heartbeat (`cargoship unlock CLUSTER` breaks it)",
        host.name, r.path, M.describe(r.record, r.age, r.now, r.owner), lim), "locked", r
    end
    local left = (opts.wait or 0) - (loop.now() - began)
    if left <= 0 then
      return nil, string.format("%s: another cargoship is still taking its locks, this host's at %s among them: %s; "
        .. "waited %s for it to hold them all or let go (`cargoship unlock CLUSTER` breaks it)", host.name, r.path,
        M.describe(r.record, r.age, r.now, r.owner), span(loop.now() - began)), "taking", r
    end
    loop.sleep(math.min(pause, left))
    pause = math.min(pause * 2, M.TAKING_POLL)
  end
  local log = opts.log or host.log or NOLOG
  local self = setmetatable({
    host = host, path = r.path, token = token, info = info, log = log,
    timings = t, interval = t.interval, stale_after = t.stale_after,
    timeout = opts.timeout or M.TIMEOUT, on_lost = opts.on_lost,
    beats = 0, last_ok = sent, lost = nil, released = false, releasing = false,
  }, Lock)
  if r.status == "took_over" then
    self.took_over = r.record
    if r.tomb then self.tombstone = host_token(r.tomb) end
    log:warn("took over a stale lock at %s from %s (no heartbeat for over %d s)", r.path,
      M.describe(r.record, r.age, r.now, r.owner), r.stale or t.stale_after)
  else
    log:verbose("took the lock at %s", r.path)
  end
  if opts.heartbeat ~= false then self.task = loop.spawn(beat, self) end
  return self
end

-- lock.read(host, opts) -> { held = bool, path, age, now, record, token, owner, stale } |
-- { unsafe = msg, path, owner } | nil, msg, code. A read (host:probe): dry runs and
-- `cargoship unlock` use it to show the holder.
-- lock.read_command(opts) -> the text lock.read sends (as root), for a phase's prefetch.
function M.read_command(opts)
  opts = opts or {}
  return script(READ, { { "CS_BASE", base_of(opts.path) }, { "CS_NAME", opts.name or M.NAME } }, opts.dirs)
end

function M.read(host, opts)
  opts = opts or {}
  local text = M.read_command(opts)
  local r, err, code, answer = run_script(host, text, "read", opts.timeout or M.TIMEOUT, true)
  if not r and code == "unsafe" then
    return { held = false, unsafe = err, path = answer.path, owner = answer.owner }
  end
  if not r then return nil, err, code end
  return { held = r.status == "held", path = r.path, age = r.age, now = r.now, record = r.record,
    token = r.record.token and host_token(r.record.token) or "", owner = r.owner, stale = r.stale }
end

-- lock.break_lock(host, { path, token }) -> true, "broken"|"gone" | nil, msg, code
-- Removes the lock at path only if its token is still the one shown to the operator
-- (`token` from lock.read), so a run that took the lock since is not broken unseen.
function M.break_lock(host, opts)
  local text = script(BREAK, { { "CS_BASE", base_of(opts.path) }, { "CS_NAME", M.NAME },
    { "CS_TOKEN", opts.token or "" } }, opts.dirs)
  local r, err, code = run_script(host, text, "break", opts.timeout or M.TIMEOUT)
  if not r then return nil, err, code end
  if r.status == "broken" or r.status == "gone" then return true, r.status end
  return nil, string.format("%s: the lock at %s changed since it was shown: now held by %s; left it alone",
    host.name, r.path, M.describe(r.record, r.age, r.now, r.owner)), "changed"
end

-- Timings from the environment, for tests and slow links: CARGOSHIP_LOCK_INTERVAL and
-- CARGOSHIP_LOCK_STALE_AFTER (seconds). -> { interval, stale_after } | nil, msg
-- The pair must make sense together (M.timings): an interval the holder cannot keep within
-- its loss deadline would make every live lock look lost.
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
  local _, err = M.timings(o)
  if err then
    return nil, "CARGOSHIP_LOCK_INTERVAL / CARGOSHIP_LOCK_STALE_AFTER: " .. err
  end
  return o
end

M.Lock = Lock
M.parse = parse
return M

-- cargoship.phases.acquire_lock: phase 7, takes every host's exclusive lock; a heartbeat keeps it until phase 30.
--
-- Timings come from the lock module's defaults (touch every 15 s, counted lost 45 s after
-- the last good touch, stale after 60 s; see lock.lua) unless CARGOSHIP_LOCK_INTERVAL /
-- CARGOSHIP_LOCK_STALE_AFTER (seconds) say otherwise; the integration specs shrink them.
-- assess reads the lock and plans one step, take_lock, whose sentence says whom the run
-- meets there; run executes it one host at a time, in one canonical order (M.order). The handles
-- land in ctx.locks[host.name]. A host whose lock is later lost, stolen or not refreshed in
-- time reaches the run through the lock's own callback: ctx:host_lost fails it from then on.
-- A conflict is recorded in ctx.lock_conflicts (messages naming the holders), so the
-- command can exit with its "locked" code.
local action = require "cargoship.action"
local lock = require "cargoship.lock"

local M = {}

M.id = "acquire_lock"
M.title = "Acquire exclusive host lock"
-- dry_run stays unset: reported, not run. A dry run takes no lock, so it blocks no real run.
M.reads = {}
M.creates = { "lock" }
M.around = true  -- taken only for the other phases' work: alone, it is not pending work

local function getenv(ctx)
  if type(ctx.env) == "function" then return ctx.env end
  return os.getenv
end

local function timings(ctx)
  local o, err = lock.options_from_env(getenv(ctx))
  if not o then
    if ctx.log then ctx.log:warn("ignoring the lock timings from the environment: %s", err) end
    o = {}
  end
  return o
end

local function holder_info(ctx)
  local env = getenv(ctx)
  local file = ctx.options and ctx.options.cluster_file
  -- the command path sets options.command from the pipeline it walks (apply, reset, ...)
  local command = ctx.options and ctx.options.command
  return {
    user = env("USER") or env("LOGNAME"),
    command = command and (command .. (file and (" " .. file) or "")),
    run_id = ctx.run_id,
  }
end

function M.prepare(ctx)
  return ctx.hosts
end

-- Reads the lock to say whom a real run would meet there.
function M.assess(ctx, host)
  local cur = lock.read(host)
  local say
  if not cur then say = "take the lock at " .. lock.default_path()
  elseif cur.unsafe then say = "take the lock, but it would be refused: " .. cur.unsafe
  elseif not cur.held then say = "take the lock at " .. cur.path
  else
    local stale = cur.age and cur.age > math.max(timings(ctx).stale_after or lock.STALE_AFTER, cur.stale or 0)
    say = string.format("take the lock at %s (currently held by %s%s)", cur.path,
      lock.describe(cur.record, cur.age, cur.now, cur.owner),
      stale and "; stale, so it would be taken over" or lock.gone_note(cur.record))
  end
  return { action.step { name = "take_lock", say = say } }
end

M.steps = {}

function M.steps.take_lock(ctx, host)
  local o = timings(ctx)
  local h, err, code = lock.acquire(host, holder_info(ctx), {
    interval = o.interval, stale_after = o.stale_after,
    on_lost = function(msg) ctx:host_lost(host, msg) end,
  })
  if not h then
    if code == "locked" then ctx.lock_conflicts[#ctx.lock_conflicts + 1] = err end
    return nil, err
  end
  ctx.locks[host.name] = h
  return true
end

-- The key a host's lock is taken in order of: the machine's own name (facts.hostname, what
-- the host says, however the cluster file names it: an IP in one file, a DNS name in
-- another), then the address and port the file gives, then the entry's name.
local function order_key(host)
  local c = host.config and host.config.connection or {}
  local hostname = host.facts and host.facts.hostname
  return string.format("%s\0%s\0%s\0%s", hostname and hostname:lower() or "", tostring(c.address or ""),
    tostring(c.port or 22), tostring(host.name))
end

-- M.order(hosts) -> a new list of the hosts in the order every run takes their locks.
function M.order(hosts)
  local list, keys = {}, {}
  for i, h in ipairs(hosts) do list[i], keys[h] = h, order_key(h) end
  table.sort(list, function(a, b) return keys[a] < keys[b] end)
  return list
end

-- One host at a time, in one order for every run whatever order its file lists the hosts
-- in, stopping at the first it cannot take. Two runs over the same hosts then meet on the
-- first one and the loser holds nothing. Two runs over overlapping sets cannot both fail on
-- each other either: a run that fails on a host the other holds holds only hosts before it in
-- the order, and the other took that host before it reached any host after it, so the other
-- fails on no host the first holds. (The order of the file, first host alone and the others at
-- once, let two runs take one end each and both exit 4.) A held lock is an immediate failure,
-- never a wait: the loser exits 4 at once naming the holder (docs/lock.md says why). The price
-- is one round trip per host in turn instead of two in all.
function M.run(ctx, hosts)
  for _, host in ipairs(M.order(hosts)) do
    local ok, failures = ctx:each({ host }, function(h) return ctx:apply(h) end)
    if not ok then return nil, failures end
  end
  return true
end

-- Releases every lock this run took, however the run ends early.
function M.cleanup(ctx)
  local held = {}
  for _, host in ipairs(ctx.hosts) do
    if ctx.locks[host.name] then held[#held + 1] = host end
  end
  if #held == 0 then return end
  ctx:each(held, function(host)
    local ok, err = ctx.locks[host.name]:release()
    if not ok and host.log then host.log:warn("%s", err) end
    return true
  end)
end

return M

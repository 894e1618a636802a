-- cargoship.phases.acquire_lock: phase 7, takes every host's exclusive lock; a heartbeat keeps it until phase 30.
--
-- Timings come from the lock module's defaults (touch every 15 s, counted lost 45 s after
-- the last good touch, stale after 60 s; see lock.lua) unless CARGOSHIP_LOCK_INTERVAL /
-- CARGOSHIP_LOCK_STALE_AFTER (seconds) say otherwise; the integration specs shrink them.
-- assess reads the lock and plans one step, take_lock, whose sentence says whom the run
-- meets there; run executes it on every host at once, by the rule above M.run. The handles
-- land in ctx.locks[host.name]. A host whose lock is later lost, stolen or not refreshed in
-- time reaches the run through the lock's own callback: ctx:host_lost fails it from then on.
-- A conflict is recorded in ctx.lock_conflicts (messages naming the holders), so the
-- command can exit with its "locked" code.
local action = require "cargoship.action"
local lock = require "cargoship.lock"
local take = require "cargoship.phases.lib.take_locks"

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

-- The lock read of assess (and of phase 30's in a dry run), sent ahead (facts/prefetch.lua).
function M.prefetch()
  return { lock = lock.read_command() }
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

local waits, missed = take.waits, take.missed

function M.steps.take_lock(ctx, host)
  local o = timings(ctx)
  missed[host] = nil
  local h, err, code = lock.acquire(host, holder_info(ctx), {
    interval = o.interval, stale_after = o.stale_after, wait = waits[host] or 0,
    on_lost = function(msg) ctx:host_lost(host, msg) end,
  })
  if not h then
    missed[host] = code
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

-- Every host at once, by a rule that keeps the guarantees of taking them one at a time in
-- M.order: phases/lib/take_locks.lua says it, and why it holds.
function M.run(ctx, hosts)
  return take.run(ctx, M.order(hosts))
end

-- Releases every lock this run took, however the run ends early: through a new session
-- where the run's session dropped (sshd killed mid-phase). A lock that could not be
-- released fails the cleanup, naming the host and why: the report must not say it was done.
-- One that is another run's now is not ours to release: the run said so when it was lost.
function M.cleanup(ctx)
  local held = {}
  for _, host in ipairs(ctx.hosts) do
    if ctx.locks[host.name] then held[#held + 1] = host end
  end
  if #held == 0 then return end
  local left = {}
  ctx:each(held, function(host)
    local ok, err, code = host:revive()
    if ok then ok, err, code = ctx.locks[host.name]:release() end
    if not ok then
      if host.log then host.log:warn("%s", err) end
      -- "lost": the lock is another run's now (the loss failed the host when it happened)
      if code ~= "lost" then left[#left + 1] = tostring(err) end
    end
    return true
  end)
  if #left > 0 then
    table.sort(left)
    error("lock not released: " .. table.concat(left, "; "), 0)
  end
end

return M

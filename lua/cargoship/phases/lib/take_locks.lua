-- cargoship.phases.lib.take_locks: phase 7 takes every lock at once; two overlapping runs never both fail.
local lock = require "cargoship.lock"

local M = {}

-- Per host of a run, while phase 7 runs: how long take_lock may wait for a lock whose run is
-- still taking its hosts (set for one host at a time by M.run), and the code of its last miss
-- (take_lock sets it).
M.waits, M.missed = setmetatable({}, { __mode = "k" }), setmetatable({}, { __mode = "k" })
local waits, missed = M.waits, M.missed

-- Every host at once, then a rule in one canonical order (M.order) that keeps the guarantees
-- of taking them one at a time: two runs over overlapping host sets never both fail on each
-- other, the loser holds nothing, and a run that holds its locks is never waited for.
--  1. A round takes every host not held yet, at once. A lock taken is "tentative" until the
--     run holds all its hosts; then one more round marks them all firm (lock.firm).
--  2. Meeting a firm lock (its run holds all its hosts and takes no more, so it can fail on
--     nobody), or any other failure, fails the run at once, exit 4 for a lock: the runner's
--     cleanup releases everything, so the loser holds nothing. Never a wait.
--  3. Meeting only tentative locks (another run still taking its hosts): let c be the first
--     host in the order this run lacks. It releases every lock it took after c, then waits on
--     c alone (lock.acquire's wait: polls until c's holder lets go, then takes it; fails if
--     the holder firms it, or after lock.TAKING_WAIT), then starts a new round after c.
-- No two runs wait on each other, nor in any cycle: a run waiting on c holds nothing after
-- c, so if B waits on x that A holds tentatively, and A waits on y, then x < y (A kept x); a
-- chain of waits climbs the order and ends at a run that is not waiting, which will either
-- firm (the others fail on a firm lock: one winner), fail for its own reason (releasing all),
-- or release what it holds after its own c. So a run fails on another only when that other
-- holds all its hosts (it cannot fail on the first), and two runs over the same or
-- overlapping hosts end one 0 and one 4. The one bound that is time: a run still taking
-- after lock.TAKING_WAIT (killed, or stalled) is failed on like a holder ("taking").
-- Cost: 2 round trips per host, all hosts at once, where one host at a time cost N in turn.
-- "At once" is at most M.CONCURRENCY commands in flight (and --concurrency): each take and
-- firm runs a script of a dozen processes on its host, and 1,000 of them at once on hosts
-- that share a few cores (the lab) held back the heartbeats of locks already taken past
-- their loss deadline (bench/scale.sh 1000: 724 hosts lost; any order is fine for the rule).
M.CONCURRENCY = 64

-- M.run(ctx, order): order is the hosts in the canonical order (acquire_lock.order).
function M.run(ctx, order)
  local limit = { concurrency = math.min(ctx.options and ctx.options.concurrency or M.CONCURRENCY, M.CONCURRENCY) }
  local from = 1
  while true do
    local round = {}
    for i = from, #order do
      if not ctx.locks[order[i].name] then round[#round + 1] = order[i] end
    end
    local errs = {}
    for _, h in ipairs(round) do missed[h] = nil end
    local _, lost = ctx:each(round, function(h)
      local ok, err = ctx:apply(h)
      if not ok then errs[h] = err end
      return true
    end, limit)
    -- hosts lost for the run (fn never ran there) fail as they are
    for _, f in ipairs(lost or {}) do errs[f.host] = f.err end
    local failures, first = {}, nil
    for _, h in ipairs(round) do
      if errs[h] and missed[h] ~= "taking" then failures[#failures + 1] = { host = h, err = errs[h] } end
    end
    for i = from, #order do
      if not first and errs[order[i]] then first = i end
    end
    if #failures > 0 then
      for _, f in ipairs(failures) do
        if missed[f.host] == "locked" then ctx.lock_conflicts[#ctx.lock_conflicts + 1] = f.err end
      end
      return nil, failures
    end
    if not first then break end
    -- only runs still taking stood in the way: keep what lies before the first, wait for it
    local after = {}
    for i = first + 1, #order do
      if ctx.locks[order[i].name] then after[#after + 1] = order[i] end
    end
    local ok, fails = ctx:each(after, function(h)
      local r, err = ctx.locks[h.name]:release()
      if r then ctx.locks[h.name] = nil end
      return r, err
    end, limit)
    if not ok then return nil, fails end
    local c = order[first]
    waits[c] = lock.TAKING_WAIT
    local took, err = ctx:apply(c)
    waits[c] = nil
    if not took then
      if missed[c] == "locked" or missed[c] == "taking" then ctx.lock_conflicts[#ctx.lock_conflicts + 1] = err end
      return nil, { { host = c, err = err } }
    end
    from = first + 1
  end
  return ctx:each(order, function(h) return ctx.locks[h.name]:firm() end, limit)
end

return M

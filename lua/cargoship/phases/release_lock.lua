-- cargoship.phases.release_lock: phase 30, removes the lock each host holds for this run (only if still ours).
--
-- One step per host, release_lock, which the runner executes on every host at once (no run
-- of its own: nothing here needs ordering across hosts). It reads no state another phase
-- creates: where the lock lives is known before it is taken (lock.read says, as phase 7's
-- assess does), so a dry run's plan names the same path the real run releases, and the
-- phase is assessed in the plan rather than left unassessed.
local action = require "cargoship.action"
local lock = require "cargoship.lock"

local M = {}

M.id = "release_lock"
M.title = "Release exclusive host lock"
-- dry_run stays unset: reported, not run (a dry run held no lock).
M.reads = {}
M.creates = {}
M.around = true  -- released only after the other phases' work: alone, it is not pending work

function M.prepare(ctx)
  if ctx.dry_run then return ctx.hosts end
  local held = {}
  for _, host in ipairs(ctx.hosts) do
    if ctx.locks[host.name] then held[#held + 1] = host end
  end
  return held
end

function M.assess(ctx, host)
  local h = ctx.locks[host.name]
  local path = h and h.path
  if not path then
    local cur = lock.read(host)
    path = cur and cur.path or lock.default_path()
  end
  return { action.step { name = "release_lock", say = "release the lock at " .. path } }
end

M.steps = {}

-- A lock that is no longer ours fails the host: another run may have worked on it meanwhile.
function M.steps.release_lock(ctx, host)
  local h = ctx.locks[host.name]
  if not h then return "skipped" end
  local done, err = h:release()
  if not done then return nil, err end
  ctx.locks[host.name] = nil
  return true
end

return M

-- cargoship.phases.release_lock: phase 30, removes the lock each host holds for this run (only if still ours).
local lock = require "cargoship.lock"

local M = {}

M.id = "release_lock"
M.title = "Release exclusive host lock"
-- dry_run stays unset: reported, not run (a dry run held no lock).
M.reads = { "lock" }
M.creates = {}

local function locks(ctx)
  return (ctx.state and ctx.state.locks) or {}
end

function M.prepare(ctx)
  if ctx.dry_run then return ctx.hosts end
  local held, all = {}, locks(ctx)
  for _, host in ipairs(ctx.hosts) do
    if all[host.name] then held[#held + 1] = host end
  end
  return held
end

function M.assess(ctx, host)
  local h = locks(ctx)[host.name]
  return { "release the lock at " .. (h and h.path or lock.default_path()) }
end

-- A lock that is no longer ours fails the host: another run may have worked on it meanwhile.
function M.run(ctx, hosts)
  local all = locks(ctx)
  local ok, failures = ctx:each(hosts, function(host)
    local h = all[host.name]
    if not h then return true end
    local done, err = h:release()
    if not done then return nil, err end
    return true
  end)
  if not ok then return nil, failures end
  return true
end

return M

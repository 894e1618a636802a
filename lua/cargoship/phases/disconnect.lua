-- cargoship.phases.disconnect: phase 31, removes the temp files this run left on each host and closes the connections.
--
-- Plan and run say the same: one step per connected host, "remove this run's temp files and
-- disconnect". In a dry run it is its own dry-run path (that step, reported, nothing
-- touched: the command closes the plan's sessions itself); in a real run the runner
-- executes the step on every host at once.
local action = require "cargoship.action"

local M = {}

M.id = "disconnect"
M.title = "Disconnect from hosts"
M.reads = {}
M.creates = {}

M.SAY = "remove this run's temp files and disconnect"

function M.prepare(ctx)
  local hosts = {}
  for _, host in ipairs(ctx.hosts) do
    if host:connected() then hosts[#hosts + 1] = host end
  end
  return hosts
end

function M.assess(_ctx, _host)
  return { action.step { name = "disconnect", say = M.SAY } }
end

-- Its own dry-run path: the plan of every host, touching nothing.
function M.dry_run(ctx, hosts)
  local report = {}
  for _, host in ipairs(hosts) do report[#report + 1] = { host = host, actions = M.assess(ctx, host) } end
  return report
end

M.steps = {}

-- A temp file that will not go is worth a warning, not a failed apply: the work is done.
function M.steps.disconnect(_ctx, host)
  local ok, err = host:disconnect()
  if not ok and host.log then host.log:warn("could not remove this run's temp files: %s", tostring(err)) end
  return true
end

return M

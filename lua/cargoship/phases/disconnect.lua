-- cargoship.phases.disconnect: phase 31, removes the temp files this run left on each host and closes the connections.
local M = {}

M.id = "disconnect"
M.title = "Disconnect from hosts"
M.reads = {}
M.creates = {}

function M.prepare(ctx)
  local hosts = {}
  for _, host in ipairs(ctx.hosts) do
    if host.conn then hosts[#hosts + 1] = host end
  end
  return hosts
end

-- Its own dry-run path: says what it would remove and close, touching nothing.
function M.dry_run(_ctx, hosts)
  local report = {}
  for _, host in ipairs(hosts) do
    local actions = {}
    local temps = host.conn and host.conn.temps or {}
    if #temps > 0 then
      actions[#actions + 1] = "remove the temp files this run left: " .. table.concat(temps, ", ")
    end
    actions[#actions + 1] = "disconnect"
    report[#report + 1] = { host = host, actions = actions }
  end
  return report
end

-- A temp file that will not go is worth a warning, not a failed apply: the work is done.
function M.run(ctx, hosts)
  ctx:each(hosts, function(host)
    local ok, err = host.conn:remove_temps()
    if not ok and host.log then host.log:warn("could not remove this run's temp files: %s", tostring(err)) end
    return true
  end)
  if ctx.transport then
    ctx.transport:close_all()
  else
    for _, host in ipairs(hosts) do host.conn:close() end
  end
  return true
end

return M

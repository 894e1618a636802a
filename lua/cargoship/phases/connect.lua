-- Phase "Connect to hosts": opens one SSH session per host through the run's transport, and nothing else.
--
-- host:connect() opens it through the transport the command built for the run (the phase
-- never holds the transport). A host already connected is left as it is. Closing the
-- sessions is "Disconnect from hosts"' job.
local M = {
  id = "connect",
  title = "Connect to hosts",
  dry_run = "read_only",
  reads = {},
  creates = { "connection" },
}

function M.prepare(ctx)
  return ctx.hosts
end

function M.run(ctx, hosts)
  return ctx:each(hosts, function(host)
    if host:connected() then return true end
    local c = host.config.connection or {}
    local ok, err = host:connect()
    if not ok then return nil, err end
    if c.kind == "localhost" then
      host.log:verbose("running commands on this machine")
    else
      host.log:verbose("connected to %s%s%s%s", c.address, c.port and (":" .. c.port) or "",
        c.kind == "openssh" and " through the system's ssh" or (" as " .. (c.user or "root")),
        c.bastion and (" via " .. c.bastion.address) or "")
    end
    return true
  end)
end

-- However a real run ends early (a failed phase, Ctrl-C, --timeout), "Disconnect from hosts"
-- does not run: the temp names of uploads that were cut or failed are removed here, on
-- every host the run reached (through a new session where the old one dropped). Runs last
-- of the cleanups, after the lock's release: the names are this run's own, no other run
-- writes them. A host that cannot be reached keeps its temps for the next run, whose upload
-- phases find and remove them, saying so; this cleanup fails then, naming the host. Only
-- hosts with temp names to remove are visited: no report line when there were none.
function M.cleanup(ctx)
  if ctx.dry_run then return "skipped" end
  local hosts = {}
  for _, host in ipairs(ctx.hosts) do
    if host:connected() and host:temps_left() > 0 then hosts[#hosts + 1] = host end
  end
  if #hosts == 0 then return "skipped" end
  local left = {}
  ctx:each(hosts, function(host)
    local ok, err = host:revive()
    if ok then ok, err = host:remove_temps() end
    if not ok then left[#left + 1] = host.name .. ": " .. tostring(err) end
    return true
  end)
  if #left > 0 then
    table.sort(left)
    error("temp files of cut uploads left (the next run removes them): " .. table.concat(left, "; "), 0)
  end
end

return M

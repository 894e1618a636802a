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

return M

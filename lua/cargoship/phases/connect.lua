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

-- Connection kinds the config accepts but this transport cannot open yet: fail the host
-- with the reason rather than pretend.
local UNSUPPORTED = {
  openssh = "openSSH connections are not supported yet: this build's transport speaks SSH itself"
    .. " (libssh2) and does not run the system ssh, so ssh_config is not read; use an ssh: block",
  localhost = "localhost: true is not supported yet: every host is reached over SSH in this build;"
    .. " use an ssh: block pointing at this machine",
}

function M.prepare(ctx)
  return ctx.hosts
end

function M.run(ctx, hosts)
  return ctx:each(hosts, function(host)
    if host:connected() then return true end
    local c = host.config.connection or {}
    if c.kind and c.kind ~= "ssh" then
      return nil, host.name .. ": " .. (UNSUPPORTED[c.kind] or ("unknown connection kind " .. c.kind))
    end
    local ok, err = host:connect()
    if not ok then return nil, err end
    host.log:verbose("connected to %s:%d as %s%s", c.address, c.port or 22, c.user or "root",
      c.bastion and (" via " .. c.bastion.address) or "")
    return true
  end)
end

return M

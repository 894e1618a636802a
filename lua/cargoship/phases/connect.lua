-- Phase "Connect to hosts": opens one SSH session per host through the run's transport, and nothing else.
--
-- ctx.transport is created here once (transport.new with the run's known_hosts, host-key
-- policy and SSH timeout) and kept for every later phase. A host already connected is
-- left as it is. Closing the sessions is "Disconnect from hosts"' job.
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

local function transport_for(ctx)
  if ctx.transport then return ctx.transport end
  local o = ctx.options or {}
  -- required here, not at load: loading a phase must not open the runtime
  local transport = require "cargoship.transport"
  local ok, t = pcall(transport.new, {
    known_hosts = o.known_hosts,
    host_key_policy = o.host_key_policy,
    timeout = o.ssh_timeout,
    -- an encrypted key's passphrase comes from the environment, never from a file or flag
    passphrase = o.passphrase or function() return ctx.env and ctx.env("CARGOSHIP_SSH_PASSPHRASE") end,
    keepalive = o.keepalive,
  })
  if not ok then return nil, "cannot set up SSH: " .. tostring(t) end
  ctx.transport = t
  return t
end

function M.run(ctx, hosts)
  local t, err = transport_for(ctx)
  if not t then return nil, err end
  return ctx:each(hosts, function(host)
    if host.conn then return true end
    local c = host.config.connection or {}
    if c.kind and c.kind ~= "ssh" then
      return nil, host.name .. ": " .. (UNSUPPORTED[c.kind] or ("unknown connection kind " .. c.kind))
    end
    local conn, cerr = t:connect(c, host.name)
    if not conn then return nil, cerr end
    host:attach(conn)
    host.log:verbose("connected to %s:%d as %s%s", c.address, c.port or 22, c.user or "root",
      c.bastion and (" via " .. c.bastion.address) or "")
    return true
  end)
end

return M

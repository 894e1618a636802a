-- cargoship.pipeline.session: the one place a command gets its SSH transport, with the run's host-key options.
--
-- apply (and every pipeline command), exec, repl and unlock connect through this, so they
-- meet the same host keys, the same passphrase rules and the same defaults. The command
-- owns the transport it gets: it hands it to the hosts (host:connect, or t:connect for exec)
-- and closes it (close_all) when its pass ends; no phase holds it.
local M = {}

-- The --max-startups flag's help, the same in every command that connects.
M.MAX_STARTUPS_HELP = "open at most N SSH handshakes at once to any one host or bastion (sshd's default "
  .. "MaxStartups is 10); a handshake sshd drops under load is tried again with backoff"

-- M.options(ctx, o) -> the session part of a command's options, defaults filled in:
-- {known_hosts, host_key_policy, ssh_timeout, keepalive, max_startups, passphrase}. o holds the
-- parsed flags under these names (known_hosts, host_key_policy, ssh_timeout, keepalive, max_startups); an
-- encrypted key's passphrase comes from CARGOSHIP_SSH_PASSPHRASE or, on a terminal, a prompt,
-- never from a file or flag.
function M.options(ctx, o)
  return {
    known_hosts = o.known_hosts or ((ctx.env("HOME") or "") .. "/.ssh/known_hosts"),
    host_key_policy = o.host_key_policy,
    ssh_timeout = o.ssh_timeout,
    keepalive = o.keepalive,
    max_startups = o.max_startups,
    passphrase = require("cargoship.prompt").passphrase_source(ctx.env, ctx.isatty and ctx.isatty.stdin),
  }
end

-- M.transport_for(o, env [, logger]) -> transport | nil, msg: a transport over options shaped
-- as M.options returns them (missing ones take the transport's defaults); what the transport
-- has to say (a dropped handshake tried again) goes to logger's debug level.
function M.transport_for(o, env, logger)
  local transport = require "cargoship.transport"
  local ok, t = pcall(transport.new, {
    known_hosts = o.known_hosts,
    host_key_policy = o.host_key_policy,
    timeout = o.ssh_timeout,
    env = env,
    passphrase = o.passphrase or function() return env and env("CARGOSHIP_SSH_PASSPHRASE") end,
    keepalive = o.keepalive,
    max_startups = o.max_startups,
    upload_transport = o.upload_transport,
    log = logger and function(line) logger:debug("%s", line) end,
  })
  if not ok then return nil, "cannot set up SSH: " .. tostring(t) end
  return t
end

return M

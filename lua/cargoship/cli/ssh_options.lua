-- cargoship.cli.ssh_options: the options of every command that reaches hosts over SSH, written once.
--
-- Each function returns a fresh option spec (cargoship.cli.args' shape), so a command's table
-- lists them where --help should show them: ssh_options.known_hosts(), ...
local args = require "cargoship.cli.args"
local session = require "cargoship.pipeline.session"

local M = {}

function M.known_hosts()
  return { long = "known-hosts", value = "PATH", check = args.checks.nonempty,
           help = "known_hosts file to check host keys against (default ~/.ssh/known_hosts; a host's "
             .. "UserKnownHostsFile ssh option wins)" }
end

function M.host_key_policy()
  return { long = "host-key-policy", value = "POLICY", check = { "strict", "accept-new", "off" }, default = "strict",
           help = "strict: unknown or changed host keys fail the host; accept-new: learn unknown keys, "
             .. "changed ones still fail" }
end

function M.ssh_timeout()
  return { long = "ssh-timeout", value = "DURATION", check = args.checks.duration, default = 30,
           help = "per host: give up connecting after DURATION" }
end

function M.max_startups()
  return { long = "max-startups", value = "N", check = args.checks.positive_int, default = 10,
           help = session.MAX_STARTUPS_HELP }
end

return M

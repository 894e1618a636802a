-- cargoship.commands.exec: runs one command on many hosts at once, output prefixed by host.
local lines = require "cargoship.lines"
local args = require "cargoship.cli.args"
local ssh_options = require "cargoship.cli.ssh_options"
local loop = require "cargoship.loop"
local validate = require "cargoship.commands.validate"
local pool = require "cargoship.pool"
local session = require "cargoship.pipeline.session"
local command_path = require "cargoship.cli.pipeline"

local M = {}

M.name = "exec"
M.summary = "run a command on the cluster's hosts concurrently"
M.usage = [[
Usage: cargoship exec [options] CLUSTER -- COMMAND...

Connects to the hosts of the cluster file CLUSTER (all of them, or those chosen with
--hosts or --role) and runs COMMAND on each, concurrently. The words after -- are joined
with spaces and run by the login user's shell, as ssh does; with --sudo they run as root
(sudo -n when the login user is not root). Each line of output is prefixed with its host;
stdout lines go to stdout, stderr lines to stderr. A summary line follows on stderr.

Host keys are checked against ~/.ssh/known_hosts (or --known-hosts, or a host's own
UserKnownHostsFile ssh option); an unknown or changed key fails that host.

Exit code 0 when the command exited 0 on every host; 1 when any host could not be reached
or the command exited non-zero there.

Every run keeps a full debug log ($XDG_CACHE_HOME/cargoship/, or --log-file PATH).]]
M.options = {
  { long = "hosts", value = "NAMES", check = args.checks.nonempty,
    help = "only these hosts: names, hostnames or addresses, comma separated (apply's --hosts, as the "
      .. "Go tool's, is about /etc/hosts instead)" },
  { long = "role", value = "ROLE", check = { "controller", "worker" }, help = "only hosts of this role" },
  { long = "sudo", help = "run COMMAND as root" },
  { long = "concurrency", value = "N", check = args.checks.positive_int, default = 200,
    help = "connect to and run on at most N hosts at once" },
  { long = "timeout", value = "DURATION", check = args.checks.duration, default = 60,
    help = "per host: give up connecting, or on the command, after DURATION" },
  ssh_options.known_hosts(),
  ssh_options.host_key_policy(),
  ssh_options.max_startups(),
}
M.arguments = { { name = "CLUSTER" }, { name = "COMMAND", rest = true } }
M.keeps_log = true   -- every run that touches hosts keeps its debug log

-- Every line goes out as soon as it is whole, even into a pipe: a healthy host's lines do
-- not wait for the slowest host, and nothing already printed is lost if we are killed.
-- When the reader has gone (EPIPE), writing stops and every host's command is ended.
local function flushing(stream, shared)
  return { write = function(_, ...)
    if shared.broken then return nil end
    local ok, err = stream:write(...)
    if ok and stream.flush then ok, err = stream:flush() end
    if not ok then
      shared.broken = tostring(err)
      for conn in pairs(shared.conns) do loop.spawn(function() conn:kill_all() end) end
    end
    return ok, err
  end }
end

local function run_on(ctx, t, host, command, o, width, shared)
  local prefix = lines.prefix(host.name, width)
  local conn, err, code = t:connect(host.connection, host.name)
  if not conn then return nil, err, code end
  shared.conns[conn] = true
  local out = lines.writer(flushing(ctx.stdout, shared), prefix)
  local errw = lines.writer(flushing(ctx.stderr, shared), prefix)
  local _, cerr, status = conn:exec(command, {
    sudo = o.sudo, timeout = o.timeout,
    on_stdout = out.feed, on_stderr = errw.feed,
  })
  shared.conns[conn] = nil
  out.flush()
  errw.flush()
  conn:close()
  if shared.broken then
    return nil, host.name .. ": output closed (" .. shared.broken .. "): the command was ended", "io"
  end
  if status == nil or type(status) == "string" then return nil, cerr, status end
  return status
end

function M.run(ctx, a)
  local path = a.positional[1]
  local words = { table.unpack(a.positional, 2) }
  if #words == 0 then
    ctx.stderr:write("cargoship exec: no command given (put it after --)\n")
    return ctx.exit.usage
  end
  local command = table.concat(words, " ")
  local cluster, code = command_path.load_cluster(ctx, "exec", path, { hosts_checked_later = true })
  if not cluster then return code end
  local o = a.options
  local hosts, serr = require("cargoship.config").select_hosts(cluster, { hosts = o.hosts, role = o.role })
  if not hosts then
    ctx.stderr:write("cargoship exec: ", serr, "\n")
    return ctx.exit.usage
  end
  local refused = validate.refuse_unconnected(ctx, "exec", cluster, hosts)
  if refused then return refused end
  if #hosts == 0 then
    ctx.stderr:write("cargoship exec: no host matches\n")
    return ctx.exit.failure
  end
  -- the same transport as apply's, so both meet the same host keys and passphrase rules
  local t, terr = session.transport_for(session.options(ctx, { known_hosts = o.known_hosts,
    host_key_policy = o.host_key_policy, ssh_timeout = o.timeout, max_startups = o.max_startups }), ctx.env, ctx.log)
  if not t then
    ctx.stderr:write("cargoship exec: ", terr, "\n")
    return ctx.exit.failure
  end
  local width = 0
  for _, h in ipairs(hosts) do width = math.max(width, #h.name) end
  local shared = { conns = {} }
  local results = pool.map(hosts, o.concurrency, function(h)
    return run_on(ctx, t, h, command, o, width, shared)
  end)
  local ok, failed = 0, {}
  for i, r in ipairs(results) do
    local status = r.ok and r[1]
    if status == 0 then
      ok = ok + 1
    else
      local why = (r.ok and status and ("command exited " .. status)) or (r.ok and r[2]) or tostring(r.err)
      failed[#failed + 1] = why
      ctx.log:error("%s", why:find(hosts[i].name, 1, true) and why or (hosts[i].name .. ": " .. why))
    end
  end
  t:close_all()
  ctx.stderr:write(string.format("%d host%s: %d ok, %d failed\n", #hosts, #hosts == 1 and "" or "s",
    ok, #failed))
  return #failed == 0 and ctx.exit.ok or ctx.exit.failure
end

return M

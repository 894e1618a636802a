-- cargoship.commands.unlock: shows who holds the cluster's host locks and, once confirmed, breaks them.
local args = require "cargoship.cli.args"
local ssh_options = require "cargoship.cli.ssh_options"

local M = {}

M.name = "unlock"
M.summary = "show who holds the host locks of a cluster, and break them"
M.usage = [[
Usage: cargoship unlock [options] CLUSTER

Connects to every host of the cluster file CLUSTER and shows who holds its cargoship lock
(/run/cargoship/lock; /var/lib/cargoship/lock where /run is absent): the user and machine,
pid, cargoship version and command of the holding run, when it started, how long ago its
heartbeat last touched the lock (by the host's clock), and which user owns the lock
directory on the host (the record says who the holder claims to be; the owner is what the
host's file system says). A lock without a heartbeat for over 60 s is stale; the next apply
takes it over by itself.

cargoship keeps the lock only in a directory it made itself (mode 700) under parents only
root can write. A directory there that fails that check (another owner, a symlink, a wider
mode) is shown with its owner and left alone: it may have been planted, so remove it as
root yourself once you have looked at it.

Then, after a yes on the terminal (or with --yes), it breaks those locks. A lock is only
broken if it is still the one shown: a run that took it meanwhile keeps it. Breaking the
lock of a run that is still alive makes that run stop on the host at its next heartbeat.

Host keys are checked against ~/.ssh/known_hosts (or --known-hosts).

Exit code 0 when every lock shown was broken (or none was held); 1 when a host could not
be reached, a lock could not be broken, a lock directory was refused, or the breaking was
not confirmed.

Every run keeps a full debug log ($XDG_CACHE_HOME/cargoship/, or --log-file PATH).]]
M.options = {
  { long = "yes", short = "y", help = "break the locks without asking (needed when stdin is not a terminal)" },
  { long = "timeout", value = "DURATION", check = args.checks.duration, default = 30,
    help = "per host: give up connecting, or on a command, after DURATION" },
  ssh_options.known_hosts(),
  ssh_options.host_key_policy(),
  ssh_options.max_startups(),
}
M.arguments = { { name = "CLUSTER" } }
M.keeps_log = true   -- every run that touches hosts keeps its debug log

-- The same connection path as apply's first phase, so both meet the same host keys.
local function connect(ctx, cluster, o)
  local context = require "cargoship.pipeline.context"
  local session = require "cargoship.pipeline.session"
  local options = session.options(ctx, { known_hosts = o.known_hosts, host_key_policy = o.host_key_policy,
    ssh_timeout = o.timeout, max_startups = o.max_startups })
  options.concurrency = 50
  local transport = assert(session.transport_for(options, ctx.env))
  local run = context.new { cluster = cluster, log = ctx.log, dry_run = false, options = options,
    transport = transport, env = ctx.env }
  require("cargoship.phases.connect").run(run, run.hosts)
  return run
end

-- y/yes on the terminal; anything else, end of input or Ctrl-C is a no.
local function confirmed(ctx, n)
  ctx.stderr:write(string.format("Break %d lock%s? A run that still holds one stops on that host. [y/N] ",
    n, n == 1 and "" or "s"))
  if ctx.stderr.flush then ctx.stderr:flush() end
  -- wait in the loop, so Ctrl-C cancels the question instead of hanging in read(2)
  require("cargoship.loop").wait_fd(0, "r")
  local answer = io.stdin:read("l")
  return answer ~= nil and (answer:lower() == "y" or answer:lower() == "yes")
end

function M.run(ctx, a)
  local lock = require "cargoship.lock"
  local path = a.positional[1]
  local o = a.options
  local cluster, code = require("cargoship.cli.pipeline").load_cluster(ctx, "unlock", path)
  if not cluster then return code end
  local run = connect(ctx, cluster, o)
  local failed = 0
  -- true, values | nil, failures, values
  local ok, second, third = run:each(run.hosts, function(host)
    if not host:connected() then return nil, host.name .. ": not connected" end
    return lock.read(host, { timeout = o.timeout })
  end)
  local values = ok and second or third
  if not ok then failed = #second end
  local stale_after = (lock.options_from_env(ctx.env) or {}).stale_after or lock.STALE_AFTER
  local held = {}
  for _, host in ipairs(run.hosts) do
    local st = values[host]
    if st and st.unsafe then
      ctx.stdout:write(st.unsafe, "\n")
      failed = failed + 1
    elseif st and st.held then
      held[#held + 1] = { host = host, state = st }
      local stale = st.age and st.age > math.max(stale_after, st.stale or 0) and " (stale)" or ""
      ctx.stdout:write(string.format("%s: locked at %s by %s%s\n", host.name, st.path,
        lock.describe(st.record, st.age, st.now, st.owner), stale))
    elseif st then
      ctx.stdout:write(host.name, ": not locked\n")
    else
      ctx.stdout:write(host.name, ": could not check (see above)\n")
    end
  end
  if #held > 0 then
    if not o.yes and not ctx.isatty.stdin then
      ctx.stderr:write(string.format("cargoship unlock: left %d lock%s alone: stdin is not a terminal, "
        .. "so nobody can confirm; pass --yes to break them\n", #held, #held == 1 and "" or "s"))
      failed = failed + #held
    elseif not o.yes and not confirmed(ctx, #held) then
      ctx.stderr:write("cargoship unlock: not confirmed; left the locks alone\n")
      failed = failed + #held
    else
      local hosts = {}
      for i, e in ipairs(held) do hosts[i] = e.host end
      local by_host = {}
      for _, e in ipairs(held) do by_host[e.host] = e.state end
      local bok, bfail = run:each(hosts, function(host)
        local st = by_host[host]
        local done, how = lock.break_lock(host, { path = st.path, token = st.token, timeout = o.timeout })
        if not done then return nil, how end
        ctx.stdout:write(host.name, how == "gone" and ": lock already gone\n" or ": lock broken\n")
        return true
      end)
      if not bok then failed = failed + #bfail end
    end
  end
  if run.transport then run.transport:close_all() end
  return failed == 0 and ctx.exit.ok or ctx.exit.failure
end

return M

-- cargoship.commands.reset: reset's flags and usage over the reset pipeline; the shared command path does the rest.
--
-- What is reset's alone: --target-hosts (names checked against the cluster file before any
-- host is connected to) and the refusal the cluster file alone proves (every controller
-- targeted while other hosts stay); the refusals that need to know which controllers run
-- are phase "Check the hosts to reset", before the lock (cargoship.phases.check_targets).
local args = require "cargoship.cli.args"
local ssh_options = require "cargoship.cli.ssh_options"
local command_path = require "cargoship.cli.pipeline"

local M = {}

M.name = "reset"
M.summary = "take hosts out of the cluster and off the engine: drain, stop, delete the node, uninstall, clean up"
M.usage = [[
Usage: cargoship reset [options] CLUSTER
       cargoship reset [options] --config CLUSTER     (the Go tool's form)

Resets the hosts of the cluster file CLUSTER (all of them, or those --target-hosts names)
to a state from which apply installs from nothing (docs/reset.md):
  1-5   connect, detect the OS, gather host and engine facts (which engine runs where)
  6     check the hosts to reset: with --target-hosts, refuse to reset every running
        controller while other hosts stay, and more than one running controller in one run
  7     take the host lock
  8-9   Reset Worker, Reset Controller: each node drained through a controller that stays
        (unless --no-drain; a failed drain only warns), its engine stopped, its node deleted
        through that controller; workers in batches, then controllers one at a time in
        reverse config order, the leader last
  10    Uninstalling Engine: the service disabled, the engine's own reset command where it
        has one, the packages installed from staged files removed by the names the upload
        manifest records, the engine's data and config directories, every file of the
        upload manifest, then the manifest
  11    the SELinux policy cargoship applied undone from its state record
  12    cargoship's own host state: its /etc/hosts block, its sysctl file, fapolicyd rules,
        firewall table or rules, /etc/cargoship and /var/lib/cargoship
  13    the service manager reloaded; 14-15 the lock released, disconnect

Host names --target-hosts does not know are refused before any host is connected to, and
so is a list naming every controller of the cluster file while other hosts stay.

Dry run, consent, lock, report and exit codes are apply's: --dry-run lists what each phase
would do on each host and changes nothing (exit 3 when something is pending, 0 when the
hosts hold nothing to reset); without it the plan is shown and --confirm (or "y" on a
terminal) is needed. Exit codes: 0 reset or nothing to reset, 1 a phase failed, the plan
was refused or not confirmed, 2 usage (an unknown host name), 4 another cargoship holds a
host lock, 130 interrupted. --output json prints one JSON document (docs/dry-run.md).

Every run keeps a full debug log ($XDG_CACHE_HOME/cargoship/, or --log-file PATH).]]

M.pipeline = require "cargoship.pipelines.reset"
M.verb, M.verb_done = "reset", "reset"
M.heading = "Reset"

M.options = {
  { long = "target-hosts", value = "NAMES", check = args.checks.nonempty,
    help = "reset only these hosts: names, hostnames or addresses, comma separated (default: every host)" },
  { long = "no-drain", help = "stop and delete nodes without cordoning and draining them first" },
  { long = "dry-run", help = "report what would be done, change nothing; exit 3 when something is to reset" },
  { long = "confirm", help = "go ahead without asking (needed when stdin is not a terminal)" },
  { long = "config", value = "CLUSTER", check = args.checks.nonempty,
    help = "the cluster file, the Go tool's way: cargoship reset --config CLUSTER" },
  { long = "concurrency", short = "c", value = "N", check = args.checks.positive_int, default = 30,
    help = "work on at most N hosts at once" },
  { long = "drain-timeout", value = "DURATION", check = args.checks.duration, default = 120,
    help = "give up draining a node after DURATION (the reset goes on with a warning)" },
  { long = "output", value = "FORMAT", check = { "text", "json" }, default = "text",
    help = "report as text for people or json for machines" },
  { long = "timeout", value = "DURATION", check = args.checks.duration,
    help = "give up on the plan, and on the run, after DURATION each (default: none)" },
  ssh_options.known_hosts(),
  ssh_options.host_key_policy(),
  ssh_options.ssh_timeout(),
  ssh_options.max_startups(),
}
M.arguments = { { name = "CLUSTER", optional = true } }
M.keeps_log = true

-- The targets' names -> {[host name] = true} | nil (every host), or nil, message: an unknown
-- name, or every controller of the file named while other hosts stay. Reads the file only.
function M.targets(cluster, list)
  if not list then return nil end
  local chosen, err = require("cargoship.config").select_hosts(cluster, { hosts = list })
  if not chosen then return nil, "--target-hosts: " .. err end
  local set, controllers, named = {}, 0, 0
  for _, h in ipairs(chosen) do set[h.name] = true end
  for _, h in ipairs(cluster.hosts) do
    if h.role == "controller" then
      controllers = controllers + 1
      if set[h.name] then named = named + 1 end
    end
  end
  if controllers > 0 and named == controllers and #chosen < #cluster.hosts then
    return nil, "--target-hosts names every controller while other hosts stay: they would be left without a "
      .. "control plane; reset the whole cluster (no --target-hosts) instead"
  end
  return set
end

function M.run(ctx, a)
  local o = a.options
  local file = o.config or a.positional[1]
  if not file or (o.config and a.positional[1]) then
    ctx.stderr:write("cargoship reset: ", file and "give the cluster file once: CLUSTER or --config CLUSTER"
      or "missing CLUSTER (or --config CLUSTER)", "\nRun 'cargoship reset --help' for usage.\n")
    return ctx.exit.usage
  end
  local targets
  if o.target_hosts then
    local cluster, code = command_path.load_cluster(ctx, M.name, file)
    if not cluster then return code end
    local why
    targets, why = M.targets(cluster, o.target_hosts)
    if not targets then
      ctx.stderr:write("cargoship reset: ", why, "; no host was contacted.\n")
      return ctx.exit.usage
    end
  end
  return command_path.run(ctx, M, {
    cluster_file = file,
    target_hosts = targets,
    dry_run = o.dry_run,
    confirm = o.confirm,
    concurrency = o.concurrency,
    no_drain = o.no_drain,
    drain_timeout = o.drain_timeout,
    output = o.output,
    timeout = o.timeout,
    log_file = ctx.log:file_path(),
    known_hosts = o.known_hosts or ((ctx.env("HOME") or "") .. "/.ssh/known_hosts"),
    host_key_policy = o.host_key_policy,
    ssh_timeout = o.ssh_timeout,
  })
end

return M

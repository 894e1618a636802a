-- cargoship.commands.kubeconfig: a cluster's admin kubeconfig merged into the operator's (phase 28), or printed.
--
-- A pipeline command (cli/pipeline.lua: the same plan, report, dry-run rules and exit codes
-- as apply) over pipelines/kubeconfig.lua: connect, find the leader and its engine, phase 28.
-- It asks no question: the one write is the operator's own file, which the command names.
-- With `-` it runs as a dry run (nothing written anywhere) and prints the kubeconfig.
local args = require "cargoship.cli.args"
local ssh_options = require "cargoship.cli.ssh_options"
local command_path = require "cargoship.cli.pipeline"

local M = {}

M.name = "kubeconfig"
M.aliases = { "kube-config" }
M.summary = "merge a cluster's admin kubeconfig (through its load balancer) into yours, or print it"
M.usage = [[
Usage: cargoship kubeconfig [options] CLUSTER [--kubeconfig PATH | -]

Connects to the hosts of the cluster file CLUSTER, finds the leader (the first controller
whose engine service runs), reads the engine's admin kubeconfig there, points its server at
https://<loadbalancer>:6443 (an IPv6 address in brackets) and merges it into --kubeconfig
PATH, else the first file of $KUBECONFIG, else ~/.kube/config: cluster <name>, user
<name>-admin and context <name> (the cluster file's metadata.name), set as the current
context; every other entry of the file is kept. The file is written atomically, mode
0600. This is phase 28 of apply on its own; it takes no host lock and writes nothing on
any host.

With - (or --kubeconfig -) nothing is merged or written: the cluster's kubeconfig is
printed on stdout (it holds the admin credentials: keep it safe).

--dry-run says which entries would be added or changed and writes nothing (exit 3 when
something would change, 0 when the file is up to date). The report goes to stdout as
text or, with --output json, as one JSON document (docs/dry-run.md); exit codes as apply's.

Every run keeps a full debug log ($XDG_CACHE_HOME/cargoship/, or --log-file PATH).]]

M.pipeline = require "cargoship.pipelines.kubeconfig"
M.verb, M.verb_done = "update", "updated"
M.heading = "Kubeconfig"

M.options = {
  { long = "kubeconfig", value = "PATH", check = args.checks.nonempty,
    help = "the kubeconfig to merge into (default: the first file of $KUBECONFIG, else ~/.kube/config); "
      .. "- prints the cluster's kubeconfig instead" },
  { long = "dry-run", help = "say what would change in the file, write nothing; exit 3 when something would" },
  { long = "output", value = "FORMAT", check = { "text", "json" }, default = "text",
    help = "report as text for people or json for machines" },
  { long = "timeout", value = "DURATION", check = args.checks.duration,
    help = "give up after DURATION (30s, 5m, 1h or seconds; default: none)" },
  ssh_options.known_hosts(),
  ssh_options.host_key_policy(),
  ssh_options.ssh_timeout(),
  ssh_options.max_startups(),
}
M.arguments = { { name = "CLUSTER" }, { name = "-", optional = true, choices = { "-" } } }
M.keeps_log = true

-- `-` printed: what phase 28 read, or the report on stderr when it read nothing.
function M.print_kubeconfig(ctx, _, rep, run_ctx)
  local k = run_ctx and run_ctx.kubeconfig
  if rep.outcome == "failed" or not (k and k.text) then
    ctx.stderr:write(require("cargoship.pipeline.report").text(rep, { heading = "Kubeconfig" }))
    return rep.outcome == "interrupted" and ctx.exit.interrupted or ctx.exit.failure
  end
  -- the credentials are redacted from every log line and report, so not through ctx.stdout
  local out = ctx.raw_stdout or ctx.stdout
  out:write(k.text)
  if out.flush then out:flush() end
  return ctx.exit.ok
end

function M.run(ctx, a)
  local o = a.options
  local first, second = a.positional[1], a.positional[2]
  if not first then
    ctx.stderr:write("cargoship kubeconfig: missing CLUSTER\nRun 'cargoship kubeconfig --help' for usage.\n")
    return ctx.exit.usage
  end
  if second ~= nil and (second ~= "-" or (o.kubeconfig and o.kubeconfig ~= "-")) then
    ctx.stderr:write(string.format("cargoship kubeconfig: unknown operand %q: give - (print the kubeconfig) or "
      .. "--kubeconfig PATH, not both\n", second))
    return ctx.exit.usage
  end
  local target = second or o.kubeconfig
  local print_it = target == "-"
  local cmd = setmetatable({ dry_run_done = print_it and M.print_kubeconfig or false }, { __index = M })
  return command_path.run(ctx, cmd, {
    cluster_file = first,
    dry_run = o.dry_run or print_it,
    confirm = true,
    output = o.output,
    timeout = o.timeout,
    update_kubeconfig = true,
    kubeconfig = target,
    log_file = ctx.log:file_path(),
    known_hosts = o.known_hosts or ((ctx.env("HOME") or "") .. "/.ssh/known_hosts"),
    host_key_policy = o.host_key_policy,
    ssh_timeout = o.ssh_timeout,
  })
end

return M

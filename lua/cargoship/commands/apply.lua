-- cargoship.commands.apply: parses apply's flags, validates the cluster, hands over to the pipeline.
local args = require "cargoship.cli.args"
local validate = require "cargoship.commands.validate"

local M = {}

M.name = "apply"
M.summary = "install or upgrade the cluster a cluster file describes (not in this build yet)"
M.usage = [[
Usage: cargoship apply [options] CLUSTER

Brings every host of the cluster file CLUSTER to the state it describes, through the
phases listed in the cargoship documentation (connect, gather facts, validate hosts, lock,
prepare, upload, install or upgrade the engine, ...).

NOT AVAILABLE IN THIS BUILD YET: apply parses its options and validates CLUSTER (exit
code 1 on mistakes, as validate reports them), then stops with exit code 2, changing
nothing. The phase runner lands with the issue "The apply pipeline".

With --dry-run, apply connects to every host and runs the read-only preflight phases,
then reports the phases it would run instead of running them: exit code 3 when work is
pending, 0 when there is nothing to do. A dry run takes no host lock and needs no
--confirm. Without --dry-run, --confirm is needed when no one is at a terminal to answer
the question.

Every run keeps a full debug log ($XDG_CACHE_HOME/cargoship/, or --log-file PATH).]]

M.options = {
  { long = "dry-run", help = "report what would be done, change nothing; exit 3 when work is pending" },
  { long = "confirm", help = "go ahead without asking (needed when stdin is not a terminal)" },
  { long = "concurrency", value = "N", check = args.checks.positive_int, default = 30,
    help = "work on at most N hosts at once" },
  { long = "output", value = "FORMAT", check = { "text", "json" }, default = "text",
    help = "report as text for people or json for machines" },
  { long = "timeout", value = "DURATION", check = args.checks.duration,
    help = "give up on the whole apply after DURATION (30s, 5m, 1h, 1m30s or seconds; default: none)" },
  { long = "update-firewall", short = "F",
    help = "configure each node's firewall to trust the cluster and open its ports" },
  { long = "update-hosts", short = "H", help = "add every node of the cluster to each node's /etc/hosts" },
  { long = "allow-unmanaged-nodes",
    help = "go on although the cluster holds nodes the cluster file does not list" },
  { long = "values", value = "FILE", check = args.checks.nonempty, multiple = true,
    help = "override the distro package's values from FILE; later files win" },
}
M.arguments = { { name = "CLUSTER" } }
M.keeps_log = true

-- Everything the pipeline runner needs from the command line, in one plain table: the
-- runner (cargoship.pipeline.runner) takes it as is, so the CLI stays the only parser.
function M.apply_options(ctx, a)
  local o = a.options
  return {
    cluster_file = a.positional[1],
    dry_run = o.dry_run,
    confirm = o.confirm,
    concurrency = o.concurrency,
    output = o.output,
    timeout = o.timeout,
    update_firewall = o.update_firewall,
    update_hosts = o.update_hosts,
    allow_unmanaged_nodes = o.allow_unmanaged_nodes,
    values = o.values,
    log_file = ctx.log:file_path(),
  }
end

-- Where the pipeline plugs in. Until the runner exists, say so plainly: exit 2, not a
-- pretend success and not a pretend failure of the cluster.
local function run_pipeline(ctx, _cluster, _apply_options)
  ctx.stderr:write("cargoship: apply is not available in this build yet (the phase runner lands ",
    "with issue \"The apply pipeline\"); nothing was done.\n")
  return ctx.exit.usage
end

function M.run(ctx, a)
  local apply_options = M.apply_options(ctx, a)
  local path = apply_options.cluster_file
  ctx.log:debug("apply options: dry_run=%s confirm=%s concurrency=%d output=%s timeout=%s values=%d",
    apply_options.dry_run, apply_options.confirm, apply_options.concurrency, apply_options.output,
    apply_options.timeout or "none", #apply_options.values)
  local cluster, errors = validate.load(ctx, path)
  if not cluster and not errors then return validate.not_available(ctx, "apply") end
  if not cluster or #(errors or {}) > 0 then
    validate.report_errors(ctx, path, errors)
    return ctx.exit.failure
  end
  -- registry credentials may sit in the file in plain text; no line of this run may show them
  for _, reg in ipairs(cluster.registries or {}) do
    if reg.auth then
      ctx.log:redact(reg.auth.pass)
      ctx.log:redact(reg.auth.token)
    end
  end
  ctx.log:verbose("%s is valid", path)
  return run_pipeline(ctx, cluster, apply_options)
end

return M

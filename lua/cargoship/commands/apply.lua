-- cargoship.commands.apply: parses apply's flags, validates the cluster, runs the apply pipeline and reports.
local args = require "cargoship.cli.args"
local validate = require "cargoship.commands.validate"
local context = require "cargoship.pipeline.context"
local custom = require "cargoship.pipeline.custom"
local progress = require "cargoship.pipeline.progress"
local report = require "cargoship.pipeline.report"
local runner = require "cargoship.pipeline.runner"

local M = {}

M.name = "apply"
M.summary = "bring a cluster's hosts to what its cluster file describes: prepare, upload, install and start engines"
M.usage = [[
Usage: cargoship apply [options] CLUSTER [--distro PACKAGE]
       cargoship apply [options] PACKAGE --config CLUSTER     (the Go tool's form)

Brings every host of the cluster file CLUSTER to the state it describes, through the
ordered phases of apply (docs/dry-run.md lists them).

IN THIS BUILD: phases 1-7 (connect, detect operating systems, gather host facts, validate
hosts, gather distro facts, check for nodes no longer in the config, acquire the host
lock), 8-13 (prepare hosts: /etc/environment, sysctl and kernel modules from the host's
environment and the --distro package; container-selinux, fapolicyd rules with -f, SELinux
policy; /etc/hosts with -H; the firewall with -F), 14-17 (upload the distro package's
files, image tarballs and engine files: RPM, APT or binaries), 18-22 (import images where
the engine does not, write the engine's configuration, install and start the controllers,
the leader first and the others one at a time, each Ready through the leader's kubectl
before the next; apply the package's manifests from the leader; install and start the
workers in batches), 25 (install the staged engine files on hosts no phase above
installed), 30 (release the lock) and 31 (disconnect). A node whose engine service runs
is left to the upgrade phases. Phases 23-24 and 26-29 (upgrading engines, syncing config,
kubeconfig, labels) are not in this build, and the report says so. --skip-phases leaves
out phases of your choice (say 18-22: prepare and upload only); the report lists them.

-F/--firewall configures the front end the node runs (firewalld, ufw or nftables; one
installed but stopped is left alone, never started, and the report says why) and refuses
a .host.firewall.rules set that would close the SSH port apply is connected through.
-H/--hosts writes one managed block of every node into each /etc/hosts. The Go tool's
older spellings --update-firewall and --update-hosts are accepted too.

--distro PACKAGE is a package archive (cargoship package create), an unpacked package
directory, or a bare distro.yaml (engine facts only; nothing to upload). A built package
is verified whole before any host is touched: a missing, extra or altered file is an
error naming it. Uploads go to a temporary name beside each target, are fsync'd, checked
against their sha256 on the host and renamed; a file whose hash and mode already match is
not sent. At most --concurrent-uploads hosts upload at once (default 8: on a 1 Gbit link
eight streams already fill the pipe); on a terminal the progress line counts bytes.

With --dry-run, apply connects to every host and runs the read-only phases for real, then
reports every other phase with what it would do on each host, "nothing to do", or
"unassessed" (it would read host state an earlier reported phase has yet to create). A
dry run changes nothing (the hosts refuse every write), takes no host lock and needs no
--confirm. A host that fails is left out of the later phases; the other hosts go through
every phase. Exit codes: 0 nothing is pending, 3 work is pending, 1 a phase failed (on
any host), 130 interrupted.

Without --dry-run, apply first runs that dry run and shows it as the plan, then asks
"Proceed? [y/N]" on the terminal. When stdin is not a terminal, --confirm is needed:
without it apply stops before changing anything (exit 1). --confirm skips the question.
Exit codes: 0 applied, 1 a phase failed or the plan was not confirmed, 4 another
cargoship holds a host lock, 130 interrupted (phases that ran are cleaned up first, so
host locks are released).

An invalid CLUSTER fails as validate reports it (exit 1). Progress goes to stderr (one
live line per phase on a terminal); the report goes to stdout as text or, with
--output json, as one JSON document (schema in docs/dry-run.md).

Every run keeps a full debug log ($XDG_CACHE_HOME/cargoship/, or --log-file PATH).]]

-- -w/--work-concurrency parses as a profile's concurrency does (cluster-yaml.md §3.2).
function M.check_work_concurrency(v)
  local c, why = require("cargoship.config.profiles").parse_concurrency(v)
  if not c then return nil, why end
  return v
end

M.options = {
  { long = "dry-run", help = "report what would be done, change nothing; exit 3 when work is pending" },
  { long = "confirm", help = "go ahead without asking (needed when stdin is not a terminal)" },
  { long = "concurrency", short = "c", value = "N", check = args.checks.positive_int, default = 30,
    help = "work on at most N hosts at once" },
  { long = "work-concurrency", short = "w", value = "N|N%", check = M.check_work_concurrency,
    help = "batch size of the workers started together (phase 22) whose profile sets no concurrency: N, "
      .. "0 = all, or N% of the hosts sharing the profile; each batch finishes before the next starts "
      .. "(default: --concurrency; controllers go one at a time)" },
  { long = "config", value = "CLUSTER", check = args.checks.nonempty,
    help = "the cluster file, the Go tool's way: cargoship apply PACKAGE --config CLUSTER" },
  { long = "update-kubeconfig",
    help = "write the cluster's admin kubeconfig locally; IN THIS BUILD accepted and does nothing "
      .. "(the kubeconfig phase is not built)" },
  { long = "kubeconfig", value = "PATH", check = args.checks.nonempty,
    help = "where --update-kubeconfig writes; IN THIS BUILD accepted and unused" },
  { long = "label-nodes",
    help = "label nodes with their profile group; IN THIS BUILD accepted and does nothing "
      .. "(the labelling phase is not built)" },
  { long = "tmpdir", value = "DIR", check = args.checks.nonempty,
    help = "the Go tool's remote staging directory; IN THIS BUILD accepted and unused: uploads are "
      .. "staged under a temporary name beside each target" },
  { long = "output", value = "FORMAT", check = { "text", "json" }, default = "text",
    help = "report as text for people or json for machines" },
  { long = "timeout", value = "DURATION", check = args.checks.duration,
    help = "give up on the plan, and on the run, after DURATION each (30s, 5m, 1h, 1m30s or seconds; "
      .. "default: none)" },
  { long = "firewall", short = "F", aliases = { "--update-firewall" }, key = "update_firewall",
    help = "phase 13: configure each node's running firewall (firewalld, ufw or nftables) to trust the "
      .. "other nodes and the pod/service CIDRs, open .host.ports and apply .host.firewall.rules" },
  { long = "hosts", short = "H", aliases = { "--update-hosts" }, key = "update_hosts",
    help = "phase 12: write every node of the cluster into one managed block of each node's /etc/hosts "
      .. "(a flag: unlike exec's --hosts NAMES, it selects no hosts)" },
  { long = "fapolicyd", short = "f", key = "fapolicyd",
    help = "phase 10: write the distro package's fapolicyd rules where fapolicyd runs, and reload it" },
  { long = "allow-unmanaged-nodes",
    help = "go on although the cluster holds nodes the cluster file does not list" },
  { long = "values", value = "FILE", check = args.checks.nonempty, multiple = true,
    help = "override the distro package's values from FILE; later files win" },
  { long = "distro", value = "PACKAGE", check = args.checks.nonempty,
    help = "the distro package (archive, unpacked directory or distro.yaml): its files are uploaded, "
      .. "its engine and version judged against" },
  { long = "concurrent-uploads", value = "N", check = args.checks.positive_int, default = 8,
    help = "upload to at most N hosts at once" },
  { long = "allow-downgrade", help = "go on although a host runs a newer engine than the distro package" },
  { long = "known-hosts", value = "PATH", check = args.checks.nonempty,
    help = "known_hosts file to check host keys against (default ~/.ssh/known_hosts; a host's "
      .. "UserKnownHostsFile ssh option wins)" },
  { long = "host-key-policy", value = "POLICY", check = { "strict", "accept-new", "off" }, default = "strict",
    help = "strict: unknown or changed host keys fail the host; accept-new: learn unknown keys" },
  { long = "ssh-timeout", value = "DURATION", check = args.checks.duration, default = 30,
    help = "per host: give up connecting after DURATION" },
  { long = "max-clock-skew", value = "DURATION", check = args.checks.duration, default = 30,
    help = "fail hosts whose clock is further than DURATION from the median host clock" },
  { long = "ready-timeout", value = "DURATION", check = args.checks.duration, default = 300,
    help = "how long a started node may take to report Ready (through the leader's kubectl) before its "
      .. "start fails with the service's recent log" },
  { long = "skip-phases", value = "LIST", check = args.checks.number_list,
    help = "leave out these phases of the pipeline (numbers and ranges: 18-22,25); the report lists them "
      .. "as skipped. Phases 1-7, 30 and 31 cannot be skipped" },
  { long = "phases", value = "DIR", check = args.checks.nonempty,
    help = "add the custom phases in DIR/*.lua, each placed where it says (docs/phases.md)" },
}
M.arguments = { { name = "CLUSTER|PACKAGE", optional = true } }
M.keeps_log = true

-- The pipeline apply walks (phase module names, their spec numbers, what is not built).
-- A field, not a local, so specs can hand in fake phases.
M.pipeline = require "cargoship.pipelines.apply"

-- Everything the pipeline runner needs from the command line, in one plain table: the
-- runner (cargoship.pipeline.runner) takes it as is, so the CLI stays the only parser.
-- CLUSTER --distro PACKAGE, or the Go tool's PACKAGE --config CLUSTER.
-- -> cluster_file, distro | nil, message
function M.operands(a)
  local o, first = a.options, a.positional[1]
  if o.config then
    if o.distro and first then
      return nil, "give the package once: PACKAGE --config CLUSTER or CLUSTER --distro PACKAGE, not both"
    end
    return o.config, o.distro or first
  end
  if not first then return nil, "missing CLUSTER (or PACKAGE --config CLUSTER)" end
  return first, o.distro
end

function M.apply_options(ctx, a)
  local o = a.options
  local cluster_file, distro = M.operands(a)
  return {
    cluster_file = cluster_file,
    dry_run = o.dry_run,
    confirm = o.confirm,
    concurrency = o.concurrency,
    output = o.output,
    timeout = o.timeout,
    update_firewall = o.update_firewall,
    update_hosts = o.update_hosts,
    fapolicyd = o.fapolicyd,
    allow_unmanaged_nodes = o.allow_unmanaged_nodes,
    values = o.values,
    log_file = ctx.log:file_path(),
    distro = distro,
    work_concurrency = o.work_concurrency,
    update_kubeconfig = o.update_kubeconfig,
    kubeconfig = o.kubeconfig,
    label_nodes = o.label_nodes,
    tmpdir = o.tmpdir,
    allow_downgrade = o.allow_downgrade,
    concurrent_uploads = o.concurrent_uploads,
    known_hosts = o.known_hosts or ((ctx.env("HOME") or "") .. "/.ssh/known_hosts"),
    host_key_policy = o.host_key_policy,
    ssh_timeout = o.ssh_timeout,
    max_clock_skew = o.max_clock_skew,
    phases_dir = o.phases,
    skip_phases = o.skip_phases,
    ready_timeout = o.ready_timeout,
  }
end

-- M.transport_for(options, env) -> transport | nil, msg: the SSH transport of one pass,
-- with the run's known_hosts, host-key policy and SSH timeout. The command owns it: it is
-- built here, handed to the hosts (host:connect), and closed when the pass ends; no phase
-- holds it. repl and unlock build theirs the same way.
function M.transport_for(o, env)
  local transport = require "cargoship.transport"
  local ok, t = pcall(transport.new, {
    known_hosts = o.known_hosts,
    host_key_policy = o.host_key_policy,
    timeout = o.ssh_timeout,
    -- an encrypted key's passphrase comes from the environment, never from a file or flag
    passphrase = o.passphrase or function() return env and env("CARGOSHIP_SSH_PASSPHRASE") end,
    keepalive = o.keepalive,
  })
  if not ok then return nil, "cannot set up SSH: " .. tostring(t) end
  return t
end

-- One pass of the pipeline over fresh Host objects: a dry run (the plan) or the real run.
-- `late(report)` prints a report that was finished after an interruption (see runner.run).
-- -> report, the pass's context
local function pass(ctx, cluster, o, phases, pipeline, dry_run, deadline, late, plan)
  local loop = require "cargoship.loop"
  local transport, terr = M.transport_for(o, ctx.env)
  if not transport then error(terr, 0) end
  local pctx = context.new { cluster = cluster, options = o, log = ctx.log, dry_run = dry_run, now = ctx.now,
    env = ctx.env, transport = transport, distro = o.distro_package }
  local prog = progress.new { stream = ctx.stderr, tty = ctx.isatty and ctx.isatty.stderr,
    enabled = ctx.log:enabled("info"), logger = ctx.log, now = loop.now }
  local rep = runner.run(pctx, phases, { pipeline = pipeline, progress = prog, deadline = deadline,
    timeout = o.timeout, on_late_report = late, plan = plan })
  -- the plan's disconnect only says it would disconnect; no session may outlive its pass
  if rep.final then transport:close_all() end
  return rep, pctx
end

-- Exit code of a real run: "locked" when another cargoship's lock stopped it.
local function real_exit_code(ctx, rep, pctx)
  local conflicts = pctx.lock_conflicts
  if rep.outcome == "failed" and type(conflicts) == "table" and #conflicts > 0 then return ctx.exit.locked end
  return report.exit_code(rep, ctx.exit)
end

-- Writes the final report to stdout, as the operator asked.
local function emit(ctx, o, rep, heading)
  if o.output == "json" then
    ctx.stdout:write(report.json(rep))
  else
    ctx.stdout:write(report.text(rep, { heading = heading }))
  end
end

-- A line from the operator's terminal, or nil at end of input. Waiting on fd 0 first keeps
-- the loop (and Ctrl-C) alive while the operator thinks. A field so specs can answer.
function M.read_line(_ctx)
  local loop = require "cargoship.loop"
  loop.wait_fd(0, "r")
  return io.stdin:read("l")
end

-- Consent to apply the plan: --confirm, or "y" on a terminal. -> true | nil, outcome, message
local function consent(ctx, o)
  if o.confirm then return true end
  if not (ctx.isatty and ctx.isatty.stdin) then
    return nil, "not_confirmed", "not a terminal: re-run with --confirm to apply the plan above"
  end
  -- the plan went to stdout; it must be on screen before the question
  if ctx.stdout.flush then ctx.stdout:flush() end
  ctx.stderr:write("Proceed? [y/N] ")
  if ctx.stderr.flush then ctx.stderr:flush() end
  local line = M.read_line(ctx)
  if line and (line:match("^%s*[yY]%s*$") or line:match("^%s*[yY][eE][sS]%s*$")) then return true end
  if not line then ctx.stderr:write("\n") end
  return nil, "declined", "not applied: the answer was not yes"
end

local function run_pipeline(ctx, cluster, o)
  local chosen, serr = runner.without(M.pipeline, o.skip_phases)
  if not chosen then
    ctx.stderr:write("cargoship apply: --skip-phases: ", serr, "\n")
    return ctx.exit.usage
  end
  local phases, err, detail = runner.load(chosen)
  if not phases then
    if detail and detail.missing then
      ctx.stderr:write("cargoship: apply is not available in this build yet: ", err, "; nothing was done.\n")
      return ctx.exit.usage
    end
    error(err, 0) -- a phase that breaks the contract is a bug of this build
  end
  -- custom phases load (and fail on a syntax error) before any host is touched
  local pipeline
  phases, pipeline = custom.extend(phases, chosen, { cluster = cluster, dir = o.phases_dir, log = ctx.log })
  if not phases then
    ctx.stderr:write("cargoship: ", pipeline, "\n")
    return ctx.exit.failure
  end
  local loop = require "cargoship.loop"
  local deadline = o.timeout and loop.now() + o.timeout or nil

  if o.dry_run then
    local rep = pass(ctx, cluster, o, phases, pipeline, true, deadline, function(r) emit(ctx, o, r) end)
    if not rep.final then return ctx.exit.interrupted end
    emit(ctx, o, rep)
    return report.exit_code(rep, ctx.exit)
  end

  local plan = pass(ctx, cluster, o, phases, pipeline, true, deadline, function(r)
    if o.output == "json" then emit(ctx, o, report.stopped(r, "interrupted", "interrupted while making the plan"))
    else emit(ctx, o, r, "Plan") end
  end)
  if not plan.final then return ctx.exit.interrupted end
  local asking = not o.confirm and ctx.isatty and ctx.isatty.stdin
  if o.output ~= "json" then
    ctx.stdout:write(report.text(plan, { heading = "Plan" }))
  elseif asking then
    ctx.stderr:write(report.text(plan, { heading = "Plan" }))
  end
  if plan.outcome == "failed" or plan.outcome == "interrupted" then
    ctx.stderr:write("cargoship: the plan did not complete; nothing was changed.\n")
    if o.output == "json" then emit(ctx, o, report.stopped(plan, plan.outcome, plan.error or plan.outcome)) end
    return report.exit_code(plan, ctx.exit)
  end
  if plan.outcome == "ok" then
    ctx.stderr:write("cargoship: nothing to apply.\n")
    if o.output == "json" then emit(ctx, o, report.stopped(plan, "ok", "nothing to apply")) end
    return ctx.exit.ok
  end
  local yes, outcome, why = consent(ctx, o)
  if not yes then
    ctx.stderr:write("cargoship: ", why, "\n")
    if o.output == "json" then emit(ctx, o, report.stopped(plan, outcome, why)) end
    return ctx.exit.failure
  end
  -- the operator's time to answer is not apply's: the real run gets the whole --timeout
  deadline = o.timeout and loop.now() + o.timeout or nil
  local rep, pctx = pass(ctx, cluster, o, phases, pipeline, false, deadline, function(r)
    r.plan = plan
    emit(ctx, o, r)
  end, plan)
  rep.plan = plan
  if not rep.final then return ctx.exit.interrupted end
  emit(ctx, o, rep)
  return real_exit_code(ctx, rep, pctx)
end

function M.run(ctx, a)
  local cluster_operand, operr = M.operands(a)
  if not cluster_operand then
    ctx.stderr:write("cargoship apply: ", operr, "\nRun 'cargoship apply --help' for usage.\n")
    return ctx.exit.usage
  end
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
  -- registry credentials may sit in the file in plain text, or were decrypted from it;
  -- no line of this run may show them (the loader lists them in cluster.secrets)
  for _, secret in ipairs(cluster.secrets or {}) do ctx.log:redact(secret) end
  for _, reg in ipairs(cluster.registries or {}) do
    if reg.auth then
      ctx.log:redact(reg.auth.pass)
      ctx.log:redact(reg.auth.token)
    end
  end
  ctx.log:verbose("%s is valid", path)
  local refused = validate.refuse_unconnected(ctx, "apply", cluster)
  if refused then return refused end
  if apply_options.distro then
    -- the package is read before any host is touched: a bad one must stop the run here
    local pkg, perr = require("cargoship.package").read(apply_options.distro)
    if not pkg then
      ctx.stderr:write("cargoship apply: --distro: ", tostring(perr), "\n")
      return ctx.exit.failure
    end
    apply_options.distro_package = pkg
    ctx.log:verbose("distro package %s: %s %s for %s", apply_options.distro, pkg.type, pkg.version,
      table.concat(pkg.architectures or {}, ","))
  end
  apply_options.passphrase = require("cargoship.prompt").passphrase_source(ctx.env,
    ctx.isatty and ctx.isatty.stdin)
  local ok, code = pcall(run_pipeline, ctx, cluster, apply_options)
  -- an archive was unpacked to a temp directory of ours: gone with the run
  require("cargoship.package").release(apply_options.distro_package)
  if not ok then error(code, 0) end
  return code
end

return M

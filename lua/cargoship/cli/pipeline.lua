-- cargoship.cli.pipeline: every pipeline command's one path: load, plan, consent, lock, re-assess, run, report, exit.
--
-- A pipeline command (apply; reset, prepare, engine-config-sync and kube-config next) is a
-- thin module: its options and usage, and these fields, which this path reads at call time
-- (so specs can swap them):
--   name       "apply": messages say "cargoship apply: ..."
--   pipeline   the pipeline module (pipelines/<name>.lua): phases, required, command, ...
--   verb       what the run does to the plan, in "re-run with --confirm to <verb> the plan
--              above" and "nothing to <verb>" (default: name)
--   verb_done  "not <verb_done>: the answer was not yes" (default: verb .. "ed")
--   heading    the real run report's heading (default: the report's, "Apply")
--   read_line  how the question is answered (default: M.read_line, the terminal)
--   dry_run_done(ctx, o, report, run_ctx) -> exit code: a dry run's end, in place of the
--              report (kubeconfig - prints what phase 28 read instead)
-- and the options the command parsed, in one plain table (cluster_file, dry_run, confirm,
-- output, timeout, skip_phases, phases_dir, distro, values, and the session's known_hosts,
-- host_key_policy, ssh_timeout). Every pipeline command thus has the same dry-run rules
-- (a dry run takes no lock and needs no --confirm), the same consent, the same lock (its
-- record names the pipeline's command), the same text and JSON reports and the same exit
-- codes: 0 done or nothing pending, 3 a dry run with work pending, 1 a phase failed or the
-- plan was not confirmed, 4 a host lock is held by another cargoship, 2 a usage error, 130
-- interrupted.
--
-- It lives with the command line (section 4 of the design: nothing uses the command line):
-- it loads the cluster file through validate, talks to the terminal and picks exit codes.
local validate = require "cargoship.commands.validate"
local context = require "cargoship.pipeline.context"
local custom = require "cargoship.pipeline.custom"
local load = require "cargoship.pipeline.load"
local progress = require "cargoship.pipeline.progress"
local report = require "cargoship.pipeline.report"
local runner = require "cargoship.pipeline.runner"
local session = require "cargoship.pipeline.session"

local M = {}

local function verb(cmd) return cmd.verb or cmd.name end
local function verb_done(cmd) return cmd.verb_done or (verb(cmd) .. "ed") end

-- A line from the operator's terminal, or nil at end of input. Waiting on fd 0 first keeps
-- the loop (and Ctrl-C) alive while the operator thinks.
function M.read_line(_ctx)
  local loop = require "cargoship.loop"
  loop.wait_fd(0, "r")
  return io.stdin:read("l")
end

-- One pass of the pipeline over fresh Host objects: a dry run (the plan) or the real run.
-- `late(report)` prints a report that was finished after an interruption (see runner.run).
-- keep = {transport = the plan's, whose sessions this pass takes} | true (this pass's
-- sessions stay open for the next: transport:keep) | nil.
-- -> report, the pass's context, the transport it kept (the caller closes it)
local function pass(ctx, cluster, o, phases, pipeline, dry_run, deadline, late, plan, keep)
  local loop = require "cargoship.loop"
  local transport, terr = type(keep) == "table" and keep.transport, nil
  if not transport then transport, terr = session.transport_for(o, ctx.env, ctx.log) end
  if not transport then error(terr, 0) end
  local pctx = context.new { cluster = cluster, options = o, log = ctx.log, dry_run = dry_run, now = ctx.now,
    env = ctx.env, transport = transport, distro = o.distro_package }
  local prog = progress.new { stream = ctx.stderr, tty = ctx.isatty and ctx.isatty.stderr,
    enabled = ctx.log:enabled("info"), logger = ctx.log, now = loop.now }
  local rep = runner.run(pctx, phases, { pipeline = pipeline, progress = prog, deadline = deadline,
    timeout = o.timeout, on_late_report = late, plan = plan })
  -- the plan's disconnect only says it would disconnect; no session may outlive its pass,
  -- but the one the real run takes at once
  if keep == true and rep.final then
    transport:keep()
    return rep, pctx, transport
  end
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
    report.write_json(rep, ctx.stdout)
  else
    ctx.stdout:write(report.text(rep, { heading = heading }))
  end
end

-- Consent to carry out the plan: --confirm, or "y" on a terminal. -> true | nil, outcome, message
local function consent(ctx, cmd, o)
  if o.confirm then return true end
  if not (ctx.isatty and ctx.isatty.stdin) then
    return nil, "not_confirmed", "not a terminal: re-run with --confirm to " .. verb(cmd) .. " the plan above"
  end
  -- the plan went to stdout; it must be on screen before the question
  if ctx.stdout.flush then ctx.stdout:flush() end
  ctx.stderr:write("Proceed? [y/N] ")
  if ctx.stderr.flush then ctx.stderr:flush() end
  local line = (cmd.read_line or M.read_line)(ctx)
  if line and (line:match("^%s*[yY]%s*$") or line:match("^%s*[yY][eE][sS]%s*$")) then return true end
  if not line then ctx.stderr:write("\n") end
  return nil, "declined", "not " .. verb_done(cmd) .. ": the answer was not yes"
end

-- M.phases(pipeline, cluster, o, log) -> phases, pipeline | nil, message, why
-- The phases a run walks: the pipeline's, less o.skip_phases, with the custom phases of the
-- cluster file and o.phases_dir placed. why: "skip" (a refused --skip-phases), "missing"
-- (phase modules not in this build) or "custom" (a custom phase that does not load or place).
-- Touches no host; a built-in phase that breaks the contract raises (a bug of this build).
function M.phases(pipeline, cluster, o, log)
  local chosen, serr = load.without(pipeline, o.skip_phases)
  if not chosen then return nil, serr, "skip" end
  local phases, err, detail = load.load(chosen)
  if not phases then
    if detail and detail.missing then return nil, err, "missing" end
    error(err, 0)
  end
  local placed, where = custom.extend(phases, chosen, { cluster = cluster, dir = o.phases_dir, log = log })
  if not placed then return nil, where, "custom" end
  return placed, where
end

-- The phases of a command's run, or its exit code (the message written).
local function phases_of(ctx, cmd, cluster, o)
  local phases, pipeline, why = M.phases(cmd.pipeline, cluster, o, ctx.log)
  if phases then return phases, pipeline end
  if why == "skip" then
    ctx.stderr:write("cargoship ", cmd.name, ": --skip-phases: ", pipeline, "\n")
    return nil, ctx.exit.usage
  elseif why == "missing" then
    ctx.stderr:write("cargoship: ", cmd.name, " is not available in this build yet: ", pipeline,
      "; nothing was done.\n")
    return nil, ctx.exit.usage
  end
  ctx.stderr:write("cargoship: ", pipeline, "\n")
  return nil, ctx.exit.failure
end

local function run_pipeline(ctx, cmd, cluster, o)
  local phases, pipeline = phases_of(ctx, cmd, cluster, o)
  if not phases then return pipeline end
  local loop = require "cargoship.loop"
  local deadline = o.timeout and loop.now() + o.timeout or nil

  if o.dry_run then
    local rep, pctx = pass(ctx, cluster, o, phases, pipeline, true, deadline, function(r) emit(ctx, o, r) end)
    if not rep.final then return ctx.exit.interrupted end
    if cmd.dry_run_done then return cmd.dry_run_done(ctx, o, rep, pctx) end
    emit(ctx, o, rep)
    return report.exit_code(rep, ctx.exit)
  end

  -- --confirm: the real run follows the plan at once, over the plan's sessions
  local plan, _, spare = pass(ctx, cluster, o, phases, pipeline, true, deadline, function(r)
    if o.output == "json" then emit(ctx, o, report.stopped(r, "interrupted", "interrupted while making the plan"))
    else emit(ctx, o, r, "Plan") end
  end, nil, o.confirm and true or nil)
  if not plan.final then return ctx.exit.interrupted end
  local code = M.after_plan(ctx, cmd, o, plan)
  if code then
    if spare then spare:close_all() end
    return code
  end
  -- the operator's time to answer is not the run's: the real run gets the whole --timeout
  deadline = o.timeout and loop.now() + o.timeout or nil
  local rep, pctx = pass(ctx, cluster, o, phases, pipeline, false, deadline, function(r)
    r.plan = plan
    emit(ctx, o, r, cmd.heading)
  end, plan, spare and { transport = spare } or nil)
  rep.plan = plan
  if not rep.final then return ctx.exit.interrupted end
  emit(ctx, o, rep, cmd.heading)
  return real_exit_code(ctx, rep, pctx)
end

-- What follows a complete plan before the real run: the plan shown, and the run refused
-- (failed plan, failure foretold), needless (nothing to do) or not consented to.
-- -> exit code when the run does not follow | nil
function M.after_plan(ctx, cmd, o, plan)
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
  -- a failure foretold is refused before the lock and before the question: the operator fixes
  -- the host (or the package) first, instead of meeting it half-way through the run
  if (plan.predicted or 0) > 0 then
    local why = string.format("the plan foretells a failure on %d host%s (\"would fail\" above); nothing was changed",
      plan.predicted, plan.predicted == 1 and "" or "s")
    ctx.stderr:write("cargoship: ", why, ".\n")
    if o.output == "json" then emit(ctx, o, report.stopped(plan, "refused", why)) end
    return ctx.exit.failure
  end
  if plan.outcome == "ok" then
    ctx.stderr:write("cargoship: nothing to ", verb(cmd), ".\n")
    if o.output == "json" then emit(ctx, o, report.stopped(plan, "ok", "nothing to " .. verb(cmd))) end
    return ctx.exit.ok
  end
  local yes, outcome, why = consent(ctx, cmd, o)
  if not yes then
    ctx.stderr:write("cargoship: ", why, "\n")
    if o.output == "json" then emit(ctx, o, report.stopped(plan, outcome, why)) end
    return ctx.exit.failure
  end
  return nil
end

-- No line of this run may show a secret of the cluster file: registry credentials sit in
-- it in plain text, or were decrypted from it (the loader lists them in cluster.secrets).
local function redact_secrets(ctx, cluster)
  for _, secret in ipairs(cluster.secrets or {}) do ctx.log:redact(secret) end
  for _, reg in ipairs(cluster.registries or {}) do
    if reg.auth then
      ctx.log:redact(reg.auth.pass)
      ctx.log:redact(reg.auth.token)
    end
  end
end

-- M.load_cluster(ctx, name, path, opts) -> cluster | nil, exit code (the errors written)
-- The cluster file of every command that connects (the pipeline commands, exec, repl,
-- unlock): valid, its secrets redacted from the log, and, unless opts.hosts_checked_later
-- (exec checks the hosts it selects), every host with a connection.
function M.load_cluster(ctx, name, path, opts)
  local cluster, errors = validate.load(ctx, path)
  if not cluster and not errors then return nil, validate.not_available(ctx, name) end
  if not cluster or #(errors or {}) > 0 then
    validate.report_errors(ctx, path, errors)
    return nil, ctx.exit.failure
  end
  redact_secrets(ctx, cluster)
  ctx.log:verbose("%s is valid", path)
  if not (opts and opts.hosts_checked_later) then
    local refused = validate.refuse_unconnected(ctx, name, cluster)
    if refused then return nil, refused end
  end
  return cluster
end

-- M.run(ctx, cmd, o) -> exit code. o: the command's options (see the top of this file); the
-- path adds command (the lock record's), distro_package and the session's passphrase.
function M.run(ctx, cmd, o)
  ctx.log:debug("%s options: dry_run=%s confirm=%s concurrency=%s output=%s timeout=%s values=%d", cmd.name,
    o.dry_run, o.confirm, o.concurrency, o.output, o.timeout or "none", #(o.values or {}))
  local cluster, code = M.load_cluster(ctx, cmd.name, o.cluster_file)
  if not cluster then return code end
  -- the lock record says which command holds a host: the pipeline declares it
  o.command = cmd.pipeline.command or cmd.name
  if o.distro then
    -- the package is read before any host is touched: a bad one must stop the run here
    local pkg, perr = require("cargoship.package").read(o.distro, { tmpdir = o.tmpdir })
    if not pkg then
      ctx.stderr:write("cargoship ", cmd.name, ": --distro: ", tostring(perr), "\n")
      return ctx.exit.failure
    end
    o.distro_package = pkg
    ctx.log:verbose("distro package %s: %s %s for %s", o.distro, pkg.type, pkg.version,
      table.concat(pkg.architectures or {}, ","))
  end
  o.passphrase = session.options(ctx, o).passphrase
  local ok, result = pcall(run_pipeline, ctx, cmd, cluster, o)
  -- an archive was unpacked to a temp directory of ours, inline data staged to another: gone with the run
  require("cargoship.package").release(o.distro_package)
  require("cargoship.package.staging").cleanup()
  if not ok then error(result, 0) end
  return result
end

return M

-- cargoship.commands.repl: connects to a cluster's hosts and gives the operator a Lua prompt over them.
local args = require "cargoship.cli.args"
local ssh_options = require "cargoship.cli.ssh_options"
local context = require "cargoship.pipeline.context"

local M = {}

M.name = "repl"
M.summary = "connect to a cluster's hosts and explore them at a Lua prompt"
M.usage = [[
Usage: cargoship repl [options] CLUSTER

Connects to every host of the cluster file CLUSTER concurrently, detects their operating
systems and gathers their facts (the first three phases of apply), then gives a Lua
prompt with line editing, history and tab completion. While the prompt waits, the
connections stay alive. At hand (help() lists it):

  hosts.h1, h1         a host (name, role, address, facts, config); h1:run("uptime")
                       prints the output and returns stdout, stderr, exit code
  all, role("worker")  all:run("cmd") runs on every host at once, output prefixed by host
  plan()               what `cargoship apply` would do now, as its dry-run report
  readonly(true)       refuse writes, as a dry run does (host:probe still reads)

Values are shown nested, keys sorted; an error is shown and the session goes on.
Ctrl-C clears the line at the prompt and stops what is running otherwise; Ctrl-D or
exit() leaves. History is kept in $XDG_STATE_HOME/cargoship/repl_history (else
~/.local/state/cargoship/repl_history), readable by you only.

Without a terminal: -e CODE runs CODE after connecting and prints what it returns;
otherwise a script read from stdin runs the same way. Either is compiled before any
host is contacted. Exit code 0, or 1 when the code raised (or a host could not be
reached and --strict was given); 130 interrupted.

Every run keeps a full debug log ($XDG_CACHE_HOME/cargoship/, or --log-file PATH).]]

M.options = {
  { long = "eval", short = "e", value = "CODE", check = args.checks.nonempty, multiple = true,
    help = "run CODE after connecting, print its values and exit" },
  { long = "read-only", help = "refuse every write to the hosts (host:run, write_file ...) as a dry run does" },
  { long = "strict", help = "exit 1 without running anything when a host cannot be reached" },
  { long = "concurrency", value = "N", check = args.checks.positive_int, default = 30,
    help = "connect to, and fan commands out over, at most N hosts at once" },
  ssh_options.known_hosts(),
  ssh_options.host_key_policy(),
  ssh_options.ssh_timeout(),
  ssh_options.max_startups(),
  { long = "keepalive", value = "DURATION", check = args.checks.duration, default = 30,
    help = "send an SSH keepalive every DURATION while the prompt waits" },
}
M.arguments = { { name = "CLUSTER" } }
M.keeps_log = true   -- every run that touches hosts keeps its debug log

-- The code to run without a prompt: -e's, else stdin's when it is not a terminal.
-- -> list of {src, name} | nil (interactive)
local function batch_code(ctx, o)
  if #o.eval > 0 then
    local list = {}
    for i, src in ipairs(o.eval) do list[i] = { src = src, name = "=(-e #" .. i .. ")" } end
    return list
  end
  if ctx.isatty and ctx.isatty.stdin then return nil end
  return { { src = M.read_stdin(), name = "=stdin" } }
end

-- All of stdin (a script); a field so specs can hand one in.
function M.read_stdin()
  return io.stdin:read("a") or ""
end

-- The quiet logger the connecting phases speak through: their per-host lines are for
-- apply's log, not for a prompt, unless -v asks.
local function phase_logger(ctx)
  if ctx.options.verbose > 0 then return ctx.log end
  local log = require "cargoship.log"
  return log.new { level = "warn", stream = ctx.stderr,
    color = log.want_color { isatty = ctx.isatty and ctx.isatty.stderr, env = ctx.env,
      no_color = ctx.options.no_color } }
end

local function session_options(ctx, o)
  local options = require("cargoship.pipeline.session").options(ctx, o)
  options.concurrency = o.concurrency
  return options
end

-- plan(): the apply pipeline (with the cluster file's custom phases) as a dry run over
-- fresh dry-run Host objects that share the session's connections.
local function planner(ctx, pctx, options)
  return function()
    local host_mod = require "cargoship.host"
    local report = require "cargoship.pipeline.report"
    local runner = require "cargoship.pipeline.runner"
    -- the phases apply's run would walk (the command path's own choice, custom phases placed)
    local phases, pipeline = require("cargoship.cli.pipeline").phases(require "cargoship.pipelines.apply",
      pctx.cluster, {}, pctx.log)
    if not phases then error(pipeline, 0) end
    local hosts = {}
    for i, h in ipairs(pctx.hosts) do
      hosts[i] = host_mod.new { config = h.config_declared or h.config, dry_run = true, log = h.log,
        transport = pctx.transport }
      if h.conn then hosts[i]:attach(h.conn) end
    end
    local dctx = context.new { cluster = pctx.cluster, options = options, log = pctx.log, dry_run = true,
      hosts = hosts, env = ctx.env, now = ctx.now, transport = pctx.transport }
    local rep = runner.run(dctx, phases, { pipeline = pipeline })
    ctx.stdout:write(report.text(rep))
  end
end

local function say_connected(ctx, pctx, failed, elapsed)
  local n, bad = #pctx.hosts, 0
  for _, h in ipairs(pctx.hosts) do
    if failed[h] then
      bad = bad + 1
      ctx.stderr:write("cargoship: ", h.name, ": ", failed[h], "\n")
    end
  end
  if not ctx.log:enabled("info") then return bad end
  ctx.stderr:write(string.format("connected to %d of %d host%s, facts gathered (%.1f s)%s\n", n - bad, n,
    n == 1 and "" or "s", elapsed, bad > 0 and "; the others answer nothing" or ""))
  return bad
end

-- A private file for the history (directory 0700, file 0600), or nil and why.
local function history_file(ctx)
  local path = require("cargoship.repl").history_path(ctx.env)
  if not path then return nil, "neither XDG_STATE_HOME nor HOME is set" end
  local f, err = require("cargoship.log").open_file(path, true)
  if not f then return nil, err end
  f:close()
  return path
end

function M.run(ctx, a)
  local repl = require "cargoship.repl"
  local loop = require "cargoship.loop"
  local o = a.options
  local path = a.positional[1]
  local cluster, code = require("cargoship.cli.pipeline").load_cluster(ctx, "repl", path)
  if not cluster then return code end
  -- batch code is compiled against a stand-in environment first: a typo costs no connection
  local batch = batch_code(ctx, o)
  for _, b in ipairs(batch or {}) do
    local _, err = load(b.src, b.name, "t", {})
    if err and not load("return " .. b.src, b.name, "t", {}) then
      ctx.stderr:write("cargoship repl: ", err, "\n")
      return ctx.exit.failure
    end
  end
  local options = session_options(ctx, o)
  local transport, terr = require("cargoship.pipeline.session").transport_for(options, ctx.env)
  if not transport then
    ctx.stderr:write("cargoship repl: ", terr, "\n")
    return ctx.exit.failure
  end
  local pctx = context.new { cluster = cluster, options = options, log = phase_logger(ctx), dry_run = false,
    env = ctx.env, now = ctx.now, transport = transport }
  loop.defer(function() transport:close_all() end)
  local t0 = loop.now()
  local failed = repl.connect(pctx)
  local bad = say_connected(ctx, pctx, failed, loop.now() - t0)
  if bad > 0 and o.strict then return ctx.exit.failure end
  local s = repl.new { ctx = pctx, stdout = ctx.stdout, stderr = ctx.stderr, log = ctx.log,
    read_only = o.read_only, concurrency = o.concurrency, plan = planner(ctx, pctx, options) }
  if batch then
    for _, b in ipairs(batch) do
      local fn, err = s:compile(b.src, b.name)
      if not fn then
        ctx.stderr:write("cargoship repl: ", err, "\n")
        return ctx.exit.failure
      end
      if not s:run_chunk(fn) then
        s:flush()
        return ctx.exit.failure
      end
      if s.exit_code then break end
    end
    s:flush()
    return ctx.exit.ok
  end
  local history, herr = history_file(ctx)
  if not history then ctx.log:warn("no history for this session: %s", herr) end
  s:interactive { term = M.term or require "cargoship.term", history = history }
  if s.exit_code and s.exit_code ~= 0 then return ctx.exit.failure end
  return ctx.exit.ok
end

return M

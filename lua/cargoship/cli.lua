-- cargoship.cli: the command line: global options, dispatch to command modules, exit codes.
--
-- A command is a module lua/cargoship/commands/<name>.lua returning
--   name, summary, usage (synopsis and prose of its --help), options (an args.lua spec),
--   arguments (optional: list of {name=, optional=, rest=, choices = {words}: the words
--   shell completion offers there}), aliases (optional: other names of the command, the Go
--   tool's `v` for `version`), keeps_log (optional: a run writes a log file even without
--   --log-file), run(ctx, args) -> exit code.
-- run gets args = { positional = {...}, options = {...its own options, defaults filled} };
-- global options are in ctx.options.
local args = require "cargoship.cli.args"
local lines_lib = require "cargoship.lines"
local log = require "cargoship.log"

local M = {}

-- Adding a command is one word here (and its module under lua/cargoship/commands/).
M.COMMANDS = { "version", "validate", "apply", "prepare", "engine-config-sync", "reset", "kubeconfig", "exec",
  "unlock", "repl", "vault", "package", "create", "verify", "sha256sum", "inventory", "schema", "completion" }

M.EXIT = {
  ok = 0,
  failure = 1,
  usage = 2,
  pending = 3,
  locked = 4,
  internal = 70,
  interrupted = 130,
}

-- One table for the codes' documentation, so --help lists exactly what M.EXIT holds.
M.EXIT_DOC = {
  { "ok", "success; a dry run found nothing pending" },
  { "failure", "failure: an invalid cluster file, or a host failed" },
  { "usage", "usage error, or the command is not available in this build yet" },
  { "pending", "dry run finished and work is pending" },
  { "locked", "another cargoship holds a host lock" },
  { "internal", "internal error (a bug; re-run with -vv and report the traceback)" },
  { "interrupted", "interrupted (SIGINT, SIGTERM, SIGHUP or SIGQUIT)" },
}

M.GLOBAL_OPTIONS = {
  { long = "verbose", short = "v", multiple = true,
    help = "say more; -vv adds debug detail and tracebacks" },
  { long = "quiet", short = "q", help = "print only errors and results" },
  { long = "log-level", short = "l", value = "LEVEL", check = { "error", "warn", "info", "verbose", "debug" },
    help = "console log level (instead of -q/-v; the Go tool's debug|info|warn|error, plus verbose)" },
  { long = "log-format", short = "L", value = "FORMAT", check = { "text", "json" }, default = "text",
    help = "console log lines as text, or json: one object per line {time, level, host, msg}" },
  { long = "log-file", value = "PATH", check = args.checks.nonempty,
    help = "write the full debug log to PATH (default: $XDG_CACHE_HOME/cargoship/ for commands that reach hosts)" },
  { long = "no-color", help = "never colour the output (so does NO_COLOR in the environment)" },
  { long = "vault-password-file", value = "FILE", check = args.checks.nonempty,
    help = "read the Ansible Vault password of encrypted cluster-file values from FILE (else "
      .. "CARGOSHIP_VAULT_PASSWORD, then ANSIBLE_VAULT_PASSWORD)" },
  { long = "age-identity-file", value = "FILE", check = args.checks.nonempty, multiple = true,
    help = "decrypt age-encrypted cluster-file values with the identities in FILE (AGE-SECRET-KEY-1... "
      .. "lines or an unencrypted OpenSSH ed25519 private key)" },
  { long = "expand-env",
    help = "expand ${VAR} in cluster-file values from the environment ($$ is one $); without it the "
      .. "file is read literally, as the Go tool reads it" },
  { long = "help", short = "h", help = "show help and exit" },
  { long = "version", help = "print the version and exit" },
}

-- Loads and checks every command module: a malformed one fails loudly, at once.
function M.load_commands()
  local list, by_name = {}, {}
  for _, name in ipairs(M.COMMANDS) do
    local cmd = require("cargoship.commands." .. name)
    local shape = { name = "string", summary = "string", usage = "string", options = "table",
      run = "function" }
    for field, kind in pairs(shape) do
      assert(type(cmd[field]) == kind, "command module " .. name .. ": `" .. field .. "` must be a " .. kind)
    end
    assert(cmd.name == name, "command module " .. name .. " calls itself " .. tostring(cmd.name))
    list[#list + 1] = cmd
    by_name[name] = cmd
  end
  -- aliases after every name, so an alias can never shadow a command
  for _, cmd in ipairs(list) do
    for _, alias in ipairs(cmd.aliases or {}) do
      assert(not by_name[alias], "command " .. cmd.name .. ": alias " .. alias .. " is taken")
      by_name[alias] = cmd
    end
  end
  return list, by_name
end

function M.top_help(commands)
  local lines = {
    "Usage: cargoship [global options] <command> [options] [arguments]",
    "",
    "cargoship installs Kubernetes engines on hosts over SSH, as one cluster file describes.",
    "",
    "Commands:",
  }
  local width = 0
  for _, cmd in ipairs(commands) do width = math.max(width, #cmd.name) end
  for _, cmd in ipairs(commands) do
    local also = cmd.aliases and #cmd.aliases > 0 and (" (also " .. table.concat(cmd.aliases, ", ") .. ")") or ""
    lines[#lines + 1] = "  " .. lines_lib.pad(cmd.name, width) .. "  " .. cmd.summary .. also
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = "Global options (before or after the command):"
  lines[#lines + 1] = args.help(M.GLOBAL_OPTIONS)
  lines[#lines + 1] = ""
  lines[#lines + 1] = "Exit codes:"
  for _, doc in ipairs(M.EXIT_DOC) do
    lines[#lines + 1] = string.format("  %-4d %s", M.EXIT[doc[1]], doc[2])
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = "Run 'cargoship <command> --help' for a command's options."
  return table.concat(lines, "\n") .. "\n"
end

-- A command's --help: its own prose, then option tables rendered from the specs.
function M.command_help(cmd)
  local parts = { (cmd.usage:gsub("%s+$", "")) }
  if #cmd.options > 0 then
    parts[#parts + 1] = "Options:\n" .. args.help(cmd.options)
  end
  parts[#parts + 1] = "Global options:\n" .. args.help(M.GLOBAL_OPTIONS)
  return table.concat(parts, "\n\n") .. "\n"
end

local function usage_error(out, msg, cmd)
  out.stderr:write("cargoship: ", msg, "\n",
    "Run 'cargoship ", cmd and (cmd.name .. " ") or "", "--help' for usage.\n")
  return M.EXIT.usage
end

local function command_names(commands)
  local names = {}
  for _, cmd in ipairs(commands) do names[#names + 1] = cmd.name end
  return names
end

-- Which commands accept the long option in `word` (for a misplaced `cargoship --dry-run apply`).
local function owners_of(commands, word)
  local name, short = word:match("^%-%-([^=]+)"), word:match("^%-(%w)$")
  local owners = {}
  for _, cmd in ipairs(commands) do
    for _, opt in ipairs(cmd.options) do
      if (name and opt.long == name) or (short and opt.short == short) then owners[#owners + 1] = cmd.name end
    end
  end
  return owners
end

local function check_arity(cmd, positional)
  local spec = cmd.arguments or {}
  local required, rest = 0, false
  for _, a in ipairs(spec) do
    if not a.optional then required = required + 1 end
    rest = rest or a.rest
  end
  if #positional < required then
    return nil, "missing " .. spec[#positional + 1].name
  end
  if not rest and #positional > #spec then
    return nil, "unexpected argument '" .. positional[#spec + 1] .. "'"
  end
  return true
end

local function split_options(parsed, spec)
  local out = {}
  for _, opt in ipairs(spec) do
    local key = args.key_of(opt)
    out[key] = parsed[key]
  end
  return args.apply_defaults(out, spec)
end

local function console_level(options)
  if options.log_level then return options.log_level end
  if options.quiet then return "error" end
  if options.verbose >= 2 then return "debug" end
  if options.verbose == 1 then return "verbose" end
  return "info"
end

-- The process's real surroundings, unless a caller (a spec) hands in its own.
local function surroundings(sys)
  local isatty = sys.isatty
  if not isatty then
    local util = require "cargoship.util"
    isatty = { stdin = util.isatty("stdin"), stdout = util.isatty("stdout"), stderr = util.isatty("stderr") }
  end
  return {
    env = sys.env or os.getenv,
    stdout = sys.stdout or io.stdout,
    stderr = sys.stderr or io.stderr,
    isatty = isatty,
    now = sys.now or os.time,
    log_now = sys.now or require("cargoship.util").wall,   -- the log's stamps: to the millisecond
    pid = sys.pid,
  }
end

-- The logger of this run: console at the chosen level, plus a log file when the command
-- keeps one or --log-file asks. Returns logger, or nil and an exit code.
local function open_logger(out, cmd, options)
  local o = {
    level = console_level(options),
    color = log.want_color({ isatty = out.isatty.stderr, env = out.env, no_color = options.no_color }),
    stream = out.stderr,
    now = out.log_now,
    format = options.log_format,
  }
  if options.log_file then
    o.file = options.log_file
  elseif cmd.keeps_log then
    o.file, o.private_dir = log.default_file(out.env, out.now, out.pid), true
  end
  local logger, err = log.new(o)
  if logger then return logger end
  if options.log_file then
    out.stderr:write("cargoship: ", err, "\n")
    return nil, M.EXIT.failure
  end
  -- a run must not fail because ~/.cache is read-only; it only loses its record
  o.file = nil
  logger = log.new(o)
  logger:warn("no log file for this run: %s", err)
  return logger
end

-- Runs cmd.run inside the event loop, so every command has tasks, timers and the loop's
-- SIGINT/SIGTERM handling. Returns the exit code.
local function run_command(ctx, cmd, cargs)
  local failure
  local function handler(e)
    failure = { message = tostring(e), trace = debug.traceback(tostring(e), 2) }
    return failure
  end
  local function body()
    local ok, code = xpcall(cmd.run, handler, ctx, cargs)
    if not ok then return nil end
    return code
  end
  local loop = require "cargoship.loop"
  local code
  if loop.running() then
    code = body()
  else
    local ok, result, err = loop.run(body)
    if ok then code = result else failure = failure or { message = tostring(err), trace = tostring(err) } end
  end
  -- a cancelled command may fail or even return; either way the operator stopped it
  if loop.interrupted() then
    ctx.log:error("interrupted")
    return M.EXIT.interrupted
  end
  if failure then
    ctx.log:debug("%s", failure.trace)
    ctx.stderr:write("cargoship: internal error: ", failure.message, "\n")
    if not ctx.log:enabled("debug") then
      ctx.stderr:write("cargoship: re-run with -vv for a traceback\n")
    end
    return M.EXIT.internal
  end
  if math.type(code) ~= "integer" then
    ctx.stderr:write("cargoship: internal error: command ", cmd.name, " returned ",
      tostring(code), " instead of an exit code\n")
    return M.EXIT.internal
  end
  return code
end

local function dispatch(argv, out, state)
  -- global options before the command name; a failure here may be a command's option put
  -- too early, which deserves a better word than "unknown"
  local parsed, err, next_i = args.parse(argv, M.GLOBAL_OPTIONS, { stop_at_positional = true })
  state.debug = parsed and (parsed.verbose or 0) >= 2
  local commands, by_name = M.load_commands()
  if not parsed then
    local word = next_i
    local owners = owners_of(commands, word)
    if #owners > 0 then
      local opt = word:match("^[^=]*")
      err = string.format("option %s belongs after the command name (cargoship %s %s ...)",
        opt, owners[1], opt)
    end
    return usage_error(out, err)
  end
  local name = argv[next_i]
  if name == "--" then return usage_error(out, "expected a command before '--'") end
  if name == "help" then
    local topic = argv[next_i + 1]
    if topic and by_name[topic] then
      out.stdout:write(M.command_help(by_name[topic]))
      return M.EXIT.ok
    elseif topic then
      return usage_error(out, "no such command '" .. topic .. "'")
    end
    parsed.help = true
    name = nil
  end
  if not name then
    if parsed.version then name = "version"
    elseif parsed.help then
      out.stdout:write(M.top_help(commands))
      return M.EXIT.ok
    else
      out.stderr:write(M.top_help(commands))
      return M.EXIT.usage
    end
  end
  local cmd = by_name[name]
  if not cmd then
    local hint = args.suggest(name, command_names(commands))
    local msg = "unknown command '" .. args.shown(name) .. "'"
    if hint then msg = msg .. " (did you mean '" .. hint .. "'?)" end
    return usage_error(out, msg)
  end

  local merged, own = {}, {}
  for _, opt in ipairs(cmd.options) do merged[#merged + 1] = opt; own[opt.long] = true end
  -- a command may declare a global option itself (apply's --vault-password-file); one spec wins
  for _, opt in ipairs(M.GLOBAL_OPTIONS) do
    if not own[opt.long] then merged[#merged + 1] = opt end
  end
  local first = name == argv[next_i] and next_i + 1 or next_i
  local positional
  parsed, positional = args.parse(argv, merged, { first = first, result = parsed })
  if not parsed then
    err = positional
    return usage_error(out, err, cmd)
  end
  local options = split_options(parsed, M.GLOBAL_OPTIONS)
  state.debug = options.verbose >= 2 or options.log_level == "debug"
  if options.help then
    out.stdout:write(M.command_help(cmd))
    return M.EXIT.ok
  end
  if options.version then cmd, positional = by_name.version, {} end
  if options.quiet and options.verbose > 0 then
    return usage_error(out, "--quiet and --verbose contradict each other; use one", cmd)
  end
  local ok
  ok, err = check_arity(cmd, positional)
  if not ok then return usage_error(out, err, cmd) end

  local logger, code = open_logger(out, cmd, options)
  if not logger then return code end
  local ctx = {
    log = logger,
    env = out.env,
    stdout = logger:writer(out.stdout),
    stderr = logger:writer(out.stderr),
    -- stdout unredacted: only for output that is the secret the operator asked for
    -- (`kubeconfig -` prints the admin kubeconfig)
    raw_stdout = out.stdout,
    isatty = out.isatty,
    options = options,
    now = out.now,
    exit = M.EXIT,
    command = cmd.name,
  }
  local path = logger:file_path()
  if path then logger:verbose("full log: %s", path) end
  logger:debug("cargoship %s: %s %s", require("cargoship.build").version, cmd.name,
    table.concat(positional, " "))
  code = run_command(ctx, cmd, { positional = positional, options = split_options(parsed, cmd.options) })
  if path and code ~= M.EXIT.ok and code ~= M.EXIT.pending and code ~= M.EXIT.usage then
    logger:info("full log: %s", path)
  end
  logger:close()
  return code
end

-- cargoship's entry point: argv (a list of strings) -> exit code. `sys` lets specs replace
-- the process's surroundings: env (function), stdout, stderr (writers), isatty
-- ({stdin=, stdout=, stderr=}), now (clock), pid.
function M.main(argv, sys)
  local out = surroundings(sys or {})
  local state = {}
  local ok, code = xpcall(dispatch, debug.traceback, argv or {}, out, state)
  if ok then return code end
  -- only reached when the failure came before a logger existed (loading the commands)
  local message = tostring(code):match("^[^\n]*")
  out.stderr:write("cargoship: internal error: ", message, "\n")
  if state.debug then
    out.stderr:write(tostring(code), "\n")
  else
    out.stderr:write("cargoship: re-run with -vv for a traceback\n")
  end
  return M.EXIT.internal
end

return M

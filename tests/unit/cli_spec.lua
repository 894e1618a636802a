-- Specs of the command line: the option parser, dispatch, help, exit codes and the real binary.
local args = require "cargoship.cli.args"
local cli = require "cargoship.cli"
local util = require "cargoship.util"

-- A writer that keeps what is written, for the `sys` cli.main accepts.
local capture = require "unit.capture"

-- Runs cli.main in-process with captured output and a private environment.
local function run(argv, env)
  local out, err = capture(), capture()
  env = env or {}
  local code = cli.main(argv, {
    env = function(name) return env[name] end,
    stdout = out, stderr = err,
    isatty = { stdin = false, stdout = false, stderr = false },
    now = function() return 1700000000 end,
    pid = 4242,
  })
  return code, out.text(), err.text()
end

-- Registers a throwaway command module for the duration of fn.
local function with_command(cmd, fn)
  package.loaded["cargoship.commands." .. cmd.name] = cmd
  table.insert(cli.COMMANDS, cmd.name)
  local ok, e = pcall(fn)
  table.remove(cli.COMMANDS)
  package.loaded["cargoship.commands." .. cmd.name] = nil
  if not ok then error(e, 0) end
end

local function fake(run_fn, extra)
  local cmd = { name = "fake", summary = "a command for specs", usage = "Usage: cargoship fake", options = {},
    run = run_fn }
  for k, v in pairs(extra or {}) do cmd[k] = v end
  return cmd
end

describe("cli.args", function()
  local spec = {
    { long = "dry-run", help = "d" },
    { long = "verbose", short = "v", multiple = true },
    { long = "quiet", short = "q" },
    { long = "concurrency", short = "c", value = "N", check = args.checks.positive_int, default = 30 },
    { long = "output", value = "FORMAT", check = { "text", "json" }, default = "text" },
    { long = "timeout", value = "DURATION", check = args.checks.duration },
    { long = "values", value = "FILE", multiple = true },
    { long = "log-file", value = "PATH" },
  }
  local function parse(argv) return args.parse(argv, spec) end

  it("reads --opt value, --opt=value and short options", function()
    local r, pos = parse({ "--concurrency", "5", "x.yaml", "--output=json", "-q" })
    assert.are.equal(5, r.concurrency)
    assert.are.equal("json", r.output)
    assert.is_true(r.quiet)
    assert.are.same({ "x.yaml" }, pos)
  end)

  it("takes a short option's value from the same word or the next", function()
    assert.are.equal(7, parse({ "-c7" }).concurrency)
    assert.are.equal(8, parse({ "-c", "8" }).concurrency)
    assert.are.equal(9, parse({ "-vc9" }).concurrency)
  end)

  it("counts bundled and repeated flags", function()
    assert.are.equal(2, parse({ "-vv" }).verbose)
    assert.are.equal(3, parse({ "-v", "--verbose", "-v" }).verbose)
    local r = parse({ "-vqv" })
    assert.are.equal(2, r.verbose)
    assert.is_true(r.quiet)
  end)

  it("collects repeatable values in order", function()
    assert.are.same({ "a.yaml", "b.yaml" }, parse({ "--values", "a.yaml", "--values=b.yaml" }).values)
  end)

  it("treats everything after -- as positional", function()
    local r, pos = parse({ "c.yaml", "-v", "--", "uname", "-a", "--output", "xml" })
    assert.are.equal(1, r.verbose)
    assert.are.same({ "c.yaml", "uname", "-a", "--output", "xml" }, pos)
    assert.is_nil(r.output)
  end)

  it("keeps a lone - as a positional", function()
    local _, pos = parse({ "-" })
    assert.are.same({ "-" }, pos)
  end)

  it("stops at the first positional when asked", function()
    local r, _, i = args.parse({ "-v", "apply", "-v" }, spec, { stop_at_positional = true })
    assert.are.equal(1, r.verbose)
    assert.are.equal(2, i)
  end)

  it("fills defaults: declared ones, 0 for counters, false for flags, {} for lists", function()
    local r = args.apply_defaults(parse({}), spec)
    local want = { dry_run = false, verbose = 0, quiet = false, concurrency = 30, output = "text",
      values = {} }
    assert.are.same(want, r)
  end)

  describe("errors", function()
    local cases = {
      { { "--dryrun" }, "unknown option --dryrun (did you mean --dry-run?)" },
      { { "--concurency=4" }, "unknown option --concurency (did you mean --concurrency?)" },
      { { "--conc" }, "unknown option --conc (did you mean --concurrency?)" },
      { { "--zzzzzz" }, "unknown option --zzzzzz" },
      { { "-x" }, "unknown option -x" },
      { { "-vx" }, "unknown option -x in -vx" },
      { { "-dry-run" }, "unknown option -d in -dry-run (did you mean --dry-run?)" },
      { { "--concurrency" }, "option --concurrency needs a value (N)" },
      { { "--log-file", "--dry-run" }, "option --log-file needs a value (PATH)" },
      { { "-c" }, "option -c needs a value (N)" },
      { { "--dry-run=yes" }, "option --dry-run takes no value" },
      { { "--output", "xml" }, "option --output: bad value 'xml' (expected one of text, json)" },
      { { "--concurrency", "0" }, "option --concurrency: bad value '0' (expected a positive whole number)" },
      { { "--concurrency", "-1" }, "option --concurrency: bad value '-1' (expected a positive whole" },
      { { "--concurrency", "abc" }, "option --concurrency: bad value 'abc' (expected a positive whole" },
      { { "--concurrency", "1.5" }, "option --concurrency: bad value '1.5' (expected a positive whole" },
      { { "-c", "1e3" }, "option --concurrency: bad value '1e3' (expected a positive whole number)" },
      { { "--timeout", "5x" }, "option --timeout: bad value '5x' (expected a duration such as 30s, 5m" },
      { { "--output", "json", "--output=text" }, "option --output given more than once" },
    }
    for _, case in ipairs(cases) do
      it("rejects " .. table.concat(case[1], " "), function()
        local r, err = parse(case[1])
        assert.is_nil(r)
        assert.are.equal(case[2], err:sub(1, #case[2]))
      end)
    end

    it("names the offending word", function()
      local _, _, word = parse({ "x", "--dryrun" })
      assert.are.equal("--dryrun", word)
    end)
  end)

  describe("durations", function()
    local good = { ["30s"] = 30, ["5m"] = 300, ["1h"] = 3600, ["1m30s"] = 90, ["90"] = 90, ["1h2m3s"] = 3723,
      ["1.5s"] = 1.5, ["2.5"] = 2.5 }
    for text, seconds in pairs(good) do
      it("reads " .. text, function()
        assert.are.equal(seconds, args.checks.duration(text))
      end)
    end
    for _, text in ipairs({ "", "0", "0s", "5x", "s", "1m1h", "5s5s", "-5s", "1 m", "1m30", "abc" }) do
      it("rejects '" .. text .. "'", function()
        local v, why = args.checks.duration(text)
        assert.is_nil(v)
        assert.is_string(why)
      end)
    end
  end)

  it("suggests only close names", function()
    assert.are.equal("apply", args.suggest("aply", { "version", "validate", "apply" }))
    assert.are.equal("validate", args.suggest("valdate", { "version", "validate", "apply" }))
    assert.is_nil(args.suggest("frobnicate", { "version", "validate", "apply" }))
    assert.are.equal("validate", args.suggest("vali", { "version", "validate", "apply" }))
  end)

  it("does not compare a huge word whole, nor print it back whole", function()
    local huge = ("x"):rep(4 * 1024 * 1024)
    local t0 = os.clock()
    assert.is_nil(args.suggest(huge, { "version", "validate", "apply" }))
    local _, err = args.parse({ "--" .. huge }, { { long = "output", value = "F" } })
    assert.is_true(os.clock() - t0 < 1, "took " .. (os.clock() - t0) .. " s")
    assert.is_true(#err < 200, err:sub(1, 200))
    assert.matches("(4194306 bytes)", err, 1, true)
  end)

  it("refuses a spec that declares an option twice", function()
    assert.has_error(function() args.parse({}, { { long = "a" }, { long = "a" } }) end)
    assert.has_error(function()
      args.parse({}, { { long = "a", short = "x" }, { long = "b", short = "x" } })
    end)
  end)
end)

describe("cli.main", function()
  it("prints usage to stderr and exits 2 without arguments", function()
    local code, out, err = run({})
    assert.are.equal(2, code)
    assert.are.equal("", out)
    assert.matches("Usage: cargoship", err, 1, true)
  end)

  it("lists every command and every exit code in --help", function()
    local code, out = run({ "--help" })
    assert.are.equal(0, code)
    for _, name in ipairs(cli.COMMANDS) do
      local cmd = require("cargoship.commands." .. name)
      assert.matches("\n  " .. name:gsub("%p", "%%%0") .. " +" .. cmd.summary:gsub("%p", "%%%0"), out)
    end
    assert.matches("Exit codes:", out, 1, true)
    local documented = 0
    for key, value in pairs(cli.EXIT) do
      assert.matches("\n  " .. value .. " +%S", out, nil, false, "exit code " .. key .. " undocumented")
      documented = documented + 1
    end
    assert.are.equal(#cli.EXIT_DOC, documented)
    local e = cli.EXIT
    assert.are.same({ 0, 1, 2, 3, 4, 70, 130 },
      { e.ok, e.failure, e.usage, e.pending, e.locked, e.internal, e.interrupted })
  end)

  it("accepts -h and `help`", function()
    assert.are.equal(0, (run({ "-h" })))
    local code, out = run({ "help", "validate" })
    assert.are.equal(0, code)
    assert.matches("Usage: cargoship validate", out, 1, true)
    assert.are.equal(2, (run({ "help", "nosuch" })))
  end)

  it("suggests a command for a typo and exits 2", function()
    local code, out, err = run({ "aply", "x.yaml" })
    assert.are.equal(2, code)
    assert.are.equal("", out)
    assert.matches("unknown command 'aply' (did you mean 'apply'?)", err, 1, true)
  end)

  it("says where a command's option belongs when it comes before the command", function()
    local code, _, err = run({ "--dry-run", "apply", "x.yaml" })
    assert.are.equal(2, code)
    assert.matches("option --dry-run belongs after the command name (cargoship apply --dry-run", err, 1, true)
  end)

  it("reports a bad option value with the command's help hint", function()
    local code, _, err = run({ "apply", "x.yaml", "--concurrency", "abc" })
    assert.are.equal(2, code)
    assert.matches("cargoship: option --concurrency: bad value 'abc'", err, 1, true)
    assert.matches("Run 'cargoship apply --help' for usage.", err, 1, true)
  end)

  it("complains about missing and extra arguments", function()
    local code, _, err = run({ "validate" })
    assert.are.equal(2, code)
    assert.matches("missing FILE", err, 1, true)
    code, _, err = run({ "unlock", "a.yaml", "b.yaml" })
    assert.are.equal(2, code)
    assert.matches("unexpected argument 'b.yaml'", err, 1, true)
  end)

  it("refuses --quiet with --verbose", function()
    local code, _, err = run({ "-q", "version", "-v" })
    assert.are.equal(2, code)
    assert.matches("contradict", err, 1, true)
  end)

  it("prints the version for `version` and --version", function()
    local version = require("cargoship.build").version
    for _, argv in ipairs({ { "version" }, { "--version" }, { "-v", "--version" } }) do
      local code, out = run(argv)
      assert.are.equal(0, code)
      assert.matches("^cargoship " .. version:gsub("%p", "%%%0") .. "\nLua 5%.4\n", out)
    end
  end)

  it("takes global options before and after the command, and passes them in ctx", function()
    local seen
    local cmd = fake(function(ctx, a) seen = { ctx = ctx, a = a }; return 0 end,
      { options = { { long = "flag", short = "f" } }, arguments = { { name = "X", optional = true } } })
    with_command(cmd, function()
      assert.are.equal(0, (run({ "-v", "fake", "--no-color", "-vf", "--log-file", os.tmpname() })))
    end)
    assert.are.equal(2, seen.ctx.options.verbose)
    assert.is_true(seen.ctx.options.no_color)
    assert.is_true(seen.a.options.flag)
    assert.is_nil(seen.a.options.verbose)
    assert.are.same({}, seen.a.positional)
    for _, field in ipairs({ "log", "env", "stdout", "stderr", "isatty", "options", "now", "exit" }) do
      assert.is_not_nil(seen.ctx[field], "ctx." .. field)
    end
    assert.is_false(seen.ctx.isatty.stdout)
    assert.are.equal(1700000000, seen.ctx.now())
    os.remove(seen.ctx.log:file_path())
  end)

  it("passes everything after -- to the command as arguments", function()
    local seen
    with_command(fake(function(_, a) seen = a.positional; return 0 end,
      { arguments = { { name = "CLUSTER" }, { name = "COMMAND", rest = true } } }), function()
      assert.are.equal(0, (run({ "fake", "c.yaml", "--", "uname", "-a", "--help" })))
    end)
    assert.are.same({ "c.yaml", "uname", "-a", "--help" }, seen)
  end)

  it("turns a Lua error in a command into exit 70 with a hint, and a traceback at -vv", function()
    with_command(fake(function() error("kaboom") end), function()
      local code, out, err = run({ "fake" })
      local _
      assert.are.equal(70, code)
      assert.are.equal("", out)
      assert.matches("cargoship: internal error: .*kaboom", err)
      assert.matches("re-run with -vv for a traceback", err, 1, true)
      assert.not_matches("stack traceback", err, 1, true)
      code, _, err = run({ "-vv", "fake" })
      assert.are.equal(70, code)
      assert.matches("stack traceback", err, 1, true)
      assert.not_matches("re-run with -vv", err, 1, true)
    end)
  end)

  it("treats a command that returns no exit code as an internal error", function()
    with_command(fake(function() return "yes" end), function()
      local code, _, err = run({ "fake" })
      assert.are.equal(70, code)
      assert.matches("returned yes instead of an exit code", err, 1, true)
    end)
  end)

  it("exits 130 when interrupted by SIGINT", function()
    local loop = require "cargoship.loop"
    with_command(fake(function()
      -- not os.execute: system() ignores SIGINT in the caller while the child runs
      assert(io.popen("kill -INT " .. util.getpid())):close()
      loop.sleep(5)
      return 0
    end), function()
      local code, _, err = run({ "fake" })
      assert.are.equal(130, code)
      assert.matches("interrupted", err, 1, true)
    end)
  end)

  it("refuses an unwritable --log-file with exit 1", function()
    local code, _, err = run({ "version", "--log-file", "/proc/nonexistent/x.log" })
    assert.are.equal(1, code)
    assert.matches("cargoship: cannot create the log file /proc/nonexistent/x.log: mkdir: ", err, 1, true)
  end)
end)

describe("command modules", function()
  local commands = cli.load_commands()

  local function help_of(cmd)
    local code, out = run({ cmd.name, "--help" })
    assert.are.equal(0, code)
    return out
  end

  for _, cmd in ipairs(commands) do
    describe(cmd.name, function()
      it("has the interface the dispatcher relies on", function()
        assert.is_string(cmd.summary)
        assert.matches("^Usage: cargoship " .. cmd.name:gsub("%p", "%%%0"), cmd.usage)
        assert.is_function(cmd.run)
        for _, opt in ipairs(cmd.options) do
          assert.is_string(opt.help, "--" .. opt.long .. " has no help")
        end
      end)

      it("mentions in --help every option it accepts", function()
        local help = help_of(cmd)
        local accepted = {}
        for _, opt in ipairs(cmd.options) do accepted[#accepted + 1] = opt end
        for _, opt in ipairs(cli.GLOBAL_OPTIONS) do accepted[#accepted + 1] = opt end
        for _, opt in ipairs(accepted) do
          assert.matches("%-%-" .. opt.long:gsub("%-", "%%-") .. "%f[^%w-]", help, nil, false,
            "--" .. opt.long .. " missing from `" .. cmd.name .. " --help`")
          if opt.short then
            assert.matches("%-" .. opt.short .. ", %-%-" .. opt.long:gsub("%-", "%%-"), help)
          end
          -- and the parser really accepts what the help shows
          local argv = { cmd.name, "--" .. opt.long }
          if opt.value then argv[#argv + 1] = opt.value == "DURATION" and "30s" or opt.value == "N" and "3"
            or opt.value == "FORMAT" and "json" or "/dev/null" end
          local _, _, err = run(argv)
          assert.not_matches("unknown option", err, 1, true)
        end
      end)

      it("mentions no option in its prose that it does not accept", function()
        local known = {}
        for _, opt in ipairs(cmd.options) do
          known[opt.long] = true
          for _, alias in ipairs(args.alias_list(opt)) do
            local l = alias:match("^%-%-(.+)$")
            if l then known[l] = true end
          end
        end
        for _, opt in ipairs(cli.GLOBAL_OPTIONS) do known[opt.long] = true end
        for word in cmd.usage:gmatch("%-%-([%w][%w-]*)") do
          assert.is_true(known[word] ~= nil,
            "`" .. cmd.name .. "` usage mentions --" .. word .. ", which it rejects")
        end
      end)
    end)
  end
end)

describe("the cargoship executable", function()
  local bin = os.getenv("CARGOSHIP_BIN") or "build/bin/cargoship"

  local function sh(cmdline)
    local p = assert(io.popen(cmdline))
    local out = p:read("a")
    local ok, how, code = p:close()
    return out, ok, how, code
  end

  it("prints --help on stdout and exits 0", function()
    local out, ok, how, code = sh(util.quote(bin) .. " --help 2>/dev/null")
    assert.is_true(ok)
    assert.are.same({ "exit", 0 }, { how, code })
    assert.matches("Exit codes:", out, 1, true)
    assert.matches("validate", out, 1, true)
  end)

  it("prints its version", function()
    local out, ok = sh(util.quote(bin) .. " version")
    assert.is_true(ok)
    assert.matches("^cargoship %d+%.%d+%.%d+\nLua 5%.4\n", out)
  end)

  it("exits 2 on a usage error, with the message on stderr", function()
    local ok, how, code = os.execute(util.quote(bin) .. " apply --concurrency 0 x.yaml 2>/dev/null")
    assert.is_nil(ok)
    assert.are.same({ "exit", 2 }, { how, code })
    local out = sh(util.quote(bin) .. " aply 2>&1 >/dev/null")
    assert.matches("did you mean 'apply'", out, 1, true)
  end)

  it("exits 2 and prints usage to stderr without arguments", function()
    local ok, how, code = os.execute(util.quote(bin) .. " >/dev/null 2>&1")
    assert.is_nil(ok)
    assert.are.same({ "exit", 2 }, { how, code })
  end)
end)

describe("command aliases", function()
  it("may not take another command's name", function()
    local version = require "cargoship.commands.version"
    local saved = version.aliases
    version.aliases = { "apply" }
    local ok, err = pcall(cli.load_commands)
    version.aliases = saved
    assert.is_false(ok)
    assert.matches("alias apply is taken", err, 1, true)
  end)
end)

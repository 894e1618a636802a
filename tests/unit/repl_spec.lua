-- Specs of the repl: pretty printing, completion, the session's environment and evaluation, -e mode.
local loop = require "cargoship.loop"
local repl = require "cargoship.repl"
local pretty = require "cargoship.repl.pretty"
local complete = require "cargoship.repl.complete"
local S = require "unit.pipeline.support"
local C = require "unit.commands.support"

local SRC = os.getenv("CARGOSHIP_SOURCE_DIR") or "."

local function run(fn)
  local ok, a, b = loop.run(fn)
  if not ok then error(a, 0) end
  return a, b
end

-- A session over fake hosts (ctrl-1, ctrl-2, worker-1); conn = fake_conn options.
local function session(o)
  o = o or {}
  local out, err = S.capture(), S.capture()
  local ctx = S.ctx { conn = o.conn }
  for _, h in ipairs(ctx.hosts) do h.facts.os = { id = "debian", pretty_name = "Debian GNU/Linux 12" } end
  local s = repl.new { ctx = ctx, stdout = out, stderr = err, read_only = o.read_only, concurrency = 10,
    plan = o.plan }
  return s, out, err, ctx
end

-- Compiles and runs src in s. -> ok, results | message
local function eval(s, src)
  return run(function()
    local fn, err = s:compile(src, "=test")
    if not fn then return false, err end
    return s:eval(fn)
  end)
end

describe("repl.pretty", function()
  it("shows tables nested with sorted keys, short ones on one line", function()
    assert.are.equal('{ 1, 2, "x", a = true, b = "y", ["not id"] = 3 }',
      pretty.show { 1, 2, "x", b = "y", a = true, ["not id"] = 3 })
    local long = pretty.show { zeta = string.rep("z", 40), alpha = string.rep("a", 40), mid = { 1, 2 } }
    assert.are.equal('{\n  alpha = "' .. string.rep("a", 40) .. '",\n  mid = { 1, 2 },\n  zeta = "'
      .. string.rep("z", 40) .. '",\n}', long)
  end)

  it("limits depth, notices cycles, escapes strings and honours __tostring", function()
    local deep = { a = { b = { c = { d = { e = 1 } } } } }
    assert.are.equal("{ a = { b = { c = { d = {... 1 entry} } } } }", pretty.show(deep))
    local t = {}
    t.self = t
    assert.are.equal("{ self = <cycle> }", pretty.show(t))
    assert.are.equal('"a\\nb\\t\\"c\\"\\001"', pretty.show('a\nb\t"c"\1'))
    assert.are.equal("<thing>", pretty.show(setmetatable({}, { __tostring = function() return "<thing>" end })))
    assert.are.equal("{}", pretty.show {})
    assert.are.equal("0.5", pretty.show(0.5))
    assert.are.equal("nil", pretty.show(nil))
  end)
end)

describe("repl.complete", function()
  local env = setmetatable({
    hosts = { h1 = { facts = { os = { pretty_name = "x", id = "y" } } }, h2 = {} },
    help = function() end,
  }, { __index = { print = print } })
  local Obj = { run = function() end, probe = function() end, probes = function() end }
  Obj.__index = Obj
  env.h1 = setmetatable({ name = "h1", facts = env.hosts.h1.facts, _secret = 1 }, Obj)

  it("completes names in scope, through the environment's __index", function()
    assert.are.same({ "h1", "help", "hosts" }, complete.candidates(env, "h"))
    assert.are.same({ "print" }, complete.candidates(env, "pri"))
  end)

  it("completes host names, fields, fact keys and methods along a path", function()
    assert.are.same({ "hosts.h1", "hosts.h2" }, complete.candidates(env, "hosts.h"))
    assert.are.same({ "h1.facts.os.id", "h1.facts.os.pretty_name" }, complete.candidates(env, "h1.facts.os."))
    assert.are.same({ "h1:probe", "h1:probes" }, complete.candidates(env, "h1:pro"))
    assert.are.same({ "h1.facts", "h1.name", "h1.probe", "h1.probes", "h1.run" }, complete.candidates(env, "h1."))
    assert.are.same({}, complete.candidates(env, "nothing.here"))
    assert.are.same({}, complete.candidates(env, "h1.facts.os.id.x"))
  end)

  it("completes after an indexed expression, never evaluating the index", function()
    env.hosts[2] = env.h1
    env.hosts["ctrl-1"] = env.h1
    assert.are.same({ "hosts[2]:run" }, complete.candidates(env, "hosts[2]:ru"))
    assert.are.same({ 'hosts["ctrl-1"].facts' }, complete.candidates(env, 'hosts["ctrl-1"].fa'))
    assert.are.same({ "hosts[2].facts.os.id" }, complete.candidates(env, "hosts[2].facts.os.i"))
    assert.are.same({}, complete.candidates(env, "hosts[1+1]:ru"))
    assert.are.same({}, complete.candidates(env, "f(x)[2]:ru"))
    -- the line editor breaks words at brackets and quotes: the word is ":ru", the line says the rest
    assert.are.same({ ":run" }, complete.complete(env, ":ru", "hosts[2]:ru", 8))
    assert.are.same({ ":run" }, complete.complete(env, ":ru", "print(hosts[2]:ru", 14))
    assert.are.same({ ".facts" }, complete.complete(env, ".fa", 'x = hosts["ctrl-1"].fa', 19))
    assert.are.same({ ":probe", ":probes" }, complete.complete(env, ":pro", "hosts[2]:pro", 8))
    assert.are.same({}, complete.complete(env, ":ru", "f(x)[2]:ru", 7))
    assert.are.same({ "h1:run" }, complete.complete(env, "h1:ru", "h1:ru", 0))
    assert.are.same({ "hosts" }, complete.complete(env, "hos", "hosts[2]:run(hos", 13))
    env.hosts[2], env.hosts["ctrl-1"] = nil, nil
  end)

  it("never calls an __index function", function()
    local called = false
    local lazy = setmetatable({}, { __index = function() called = true end })
    assert.are.same({}, complete.candidates({ lazy = lazy }, "lazy.x"))
    assert.is_false(called)
  end)
end)

describe("repl session", function()
  it("shows an expression's values and runs statements", function()
    local s = session()
    local ok, res = eval(s, "1 + 1, 'x'")
    assert.is_true(ok)
    assert.are.same({ 2, "x", n = 2 }, res)
    ok, res = eval(s, "y = 5")
    assert.is_true(ok)
    assert.are.equal(0, res.n)
    assert.are.equal(5, s.env.y)
    assert.is_nil(rawget(_G, "y"))
  end)

  it("tells an unfinished chunk from a wrong one", function()
    local s = session()
    local fn, _, incomplete = s:compile("for i = 1, 2 do", "=repl")
    assert.is_nil(fn)
    assert.is_true(incomplete)
    local err
    fn, err, incomplete = s:compile("1 +* 2", "=repl")
    assert.is_nil(fn)
    assert.is_false(incomplete)
    assert.matches("repl:1:", err)
  end)

  it("offers hosts by name, in order, as variables, in groups and by role", function()
    local s = session()
    local env = s.env
    assert.are.equal("ctrl-1", env.hosts[1].name)
    assert.are.equal(env.hosts["worker-1"], env.worker_1)
    assert.are.equal(env.hosts["ctrl-2"], env.ctrl_2)
    assert.are.equal("Debian GNU/Linux 12", env.worker_1.facts.os.pretty_name)
    assert.are.equal(3, #env.all)
    assert.are.same({ "ctrl-1", "ctrl-2" }, env.role("controller"):names())
    local ok, err = eval(s, 'role("nope")')
    assert.is_false(ok)
    assert.matches('no host has that role %(roles here: controller, worker%)', err)
    assert.is_nil(env.hosts[1].conn)
  end)

  it("host:run prints the output and returns stdout, stderr, exit code", function()
    local s, out = session { conn = { answers = { hostname = "ctrl-1\n" } } }
    local ok, res = eval(s, 'ctrl_1:run("hostname")')
    assert.is_true(ok, tostring(res))
    assert.are.same({ "ctrl-1\n", "", 0, n = 3 }, res)
    assert.are.equal("ctrl-1\n", out.text())
  end)

  it("fans all:run out concurrently with per-host prefixed output", function()
    local s, out = session { conn = { delay = 0.2, answers = { uptime = "up\n" } } }
    local started = require("cargoship.util").now()
    local ok, res = eval(s, 'all:run("uptime")')
    local elapsed = require("cargoship.util").now() - started
    assert.is_true(ok, tostring(res))
    assert.is_true(elapsed < 0.5, "3 hosts of 0.2 s each took " .. elapsed .. " s")
    local r = res[1]
    assert.are.same({ stdout = "up\n", stderr = "", code = 0 }, r["worker-1"])
    assert.are.equal("<3 hosts: 3 exit 0>", pretty.show(r))
    local text = out.text()
    assert.matches("ctrl-1   | up\n", text, 1, true)
    assert.matches("worker-1 | up\n", text, 1, true)
  end)

  it("refuses writes in read-only mode through the hosts' dry-run flag; probes still read", function()
    local s, _, err = session { read_only = true }
    assert.is_true(s.ctx.hosts[1].dry_run)
    local ok, msg = eval(s, 'ctrl_1:run("touch /etc/x")')
    assert.is_false(ok)
    assert.matches("dry run: refused to run: touch /etc/x", msg, 1, true)
    s:show_error(msg)
    assert.matches(":probe reads; readonly%(false%) allows writes", err.text())
    assert.is_true((eval(s, 'ctrl_1:probe("true")')))
    local r = select(2, eval(s, 'all:run("touch /etc/x")'))[1]
    assert.matches("refused", r["ctrl-1"].error)
    assert.is_true((eval(s, "readonly(false)")))
    assert.is_false(s.ctx.hosts[1].dry_run)
    assert.is_true((eval(s, 'ctrl_1:run("touch /etc/x")')))
    assert.are.same({ false, n = 1 }, select(2, eval(s, "readonly()")))
  end)

  it("shows an error and goes on; exit() ends the session", function()
    local s = session()
    local ok, msg = eval(s, 'error("boom")')
    assert.is_false(ok)
    assert.are.equal("test:1: boom", msg)
    ok, msg = eval(s, "exit(3)")
    assert.is_false(ok)
    assert.are.equal(repl.EXIT, msg)
    assert.are.equal(3, s.exit_code)
  end)

  it("help() and plan() print; help alone shows the help too", function()
    local planned = false
    local s, out = session { plan = function() planned = true end }
    eval(s, "help()")
    assert.matches("host:run(cmd)", out.text(), 1, true)
    local ok, res = eval(s, "help")
    assert.is_true(ok)
    s:show(res)
    assert.matches("^At hand:.-host:run%(cmd%).-At hand:.-host:run%(cmd%)", out.text())
    assert.is_nil(out.text():find("function: 0x", 1, true))
    eval(s, "plan()")
    assert.is_true(planned)
  end)

  it("drives a line editor: lines, continuation, history, interrupt, end of input", function()
    local s, out, err = session()
    local script = {
      { "line", "x = 41" }, { "pending" }, { "line", "x + 1" }, { "line", "for i = 1, 2 do" },
      { "line", "print(i)" }, { "interrupt" }, { "line", "if true then" }, { "line", "print('in')" },
      { "line", "end" }, { "line", "error('boom')" }, { "line", "" }, { "eof" },
    }
    local prompts, history, closed, saved = {}, {}, false, 0
    local fake = { editor = function(o)
      assert.are.equal("/tmp/h", o.history)
      assert.are.same({ "worker_1" }, o.complete("worker"))
      local i = 0
      return {
        start = function(_, p) prompts[#prompts + 1] = p end,
        read_char = function()
          i = i + 1
          return table.unpack(script[i])
        end,
        add_history = function(_, l) history[#history + 1] = l end,
        save_history = function() saved = saved + 1 return true end,
        trap_interrupt = function() end,
        interrupt_fd = function() return -1 end,
        close = function() closed = true end,
      }
    end }
    run(function() s:interactive { term = fake, history = "/tmp/h", wait = function() end } end)
    assert.matches("\n42\nin\n$", out.text():gsub("^cargoship repl: [^\n]*", ""))
    assert.matches("error: repl:1: boom", err.text(), 1, true)
    assert.are.same({ "x = 41", "x + 1", "for i = 1, 2 do", "print(i)", "if true then", "print('in')", "end",
      "error('boom')" }, history)
    assert.are.equal(#history, saved)
    assert.are.same({ "cargoship> ", "cargoship> ", "cargoship> ", ">> ", ">> ", "cargoship> ", ">> ", ">> ",
      "cargoship> ", "cargoship> ", "cargoship> " }, prompts)
    assert.is_true(closed)
  end)
end)

describe("repl.connect", function()
  it("runs the phases in turn on the hosts the previous ones left standing", function()
    local ctx = S.ctx()
    package.preload["test.repl.one"] = function()
      return { id = "one", title = "One", run = function(c, hosts)
        c.state.one = #hosts
        return nil, { { host = hosts[2], err = "ctrl-2: refused" } }
      end }
    end
    package.preload["test.repl.two"] = function()
      return { id = "two", title = "Two", run = function(c, hosts) c.state.two = #hosts return true end }
    end
    local failed = run(function() return repl.connect(ctx, { "test.repl.one", "test.repl.two" }) end)
    assert.are.same({ 3, 2 }, { ctx.state.one, ctx.state.two })
    assert.are.equal("ctrl-2: refused", failed[ctx.hosts[2]])
    assert.is_nil(failed[ctx.hosts[1]])
  end)
end)

describe("cargoship repl -e", function()
  local saved
  local connects = 0
  before_each(function()
    saved = repl.CONNECT_PHASES
    connects = 0
    package.loaded["test.repl.fake_connect"] = { id = "fake_connect", title = "Connect", run = function(_, hosts)
      connects = connects + 1
      for _, h in ipairs(hosts) do h:attach(S.fake_conn { answers = { hostname = "name-of-" .. h.name .. "\n" } }) end
      return true
    end }
    repl.CONNECT_PHASES = { "test.repl.fake_connect" }
  end)
  after_each(function() repl.CONNECT_PHASES = saved end)

  local cluster = SRC .. "/tests/fixtures/clusters/spec-minimal.yaml"

  it("runs CODE after connecting, prints its values, exits 0", function()
    local code, out = C.run({ "repl", cluster, "-e", 'return hosts[2]:run("hostname")', "-e", "#all" })
    assert.are.equal(0, code)
    assert.are.equal(1, connects)
    assert.are.equal('name-of-192.0.2.20\n"name-of-192.0.2.20\\n"\n""\n0\n2\n', out)
  end)

  it("exits 1 when CODE raises", function()
    local code, _, err = C.run({ "repl", cluster, "-e", 'error("no")' })
    assert.are.equal(1, code)
    assert.matches("error: %(%-e #1%):1: no", err)
  end)

  it("refuses a syntax error before connecting to anything", function()
    local code, out, err = C.run({ "repl", cluster, "-e", "return (" })
    assert.are.equal(1, code)
    assert.are.equal("", out)
    assert.matches("%(%-e #1%):1:", err)
    assert.are.equal(0, connects)
  end)

  it("runs a script from stdin when stdin is not a terminal", function()
    local cmd = require "cargoship.commands.repl"
    local read = cmd.read_stdin
    cmd.read_stdin = function() return "local n = 0\nfor _ in pairs(hosts) do n = n + 1 end\nreturn n\n" end
    local code, out = C.run({ "repl", cluster })
    cmd.read_stdin = read
    assert.are.equal(0, code)
    assert.are.equal("4\n", out)
  end)

  it("refuses writes with --read-only", function()
    local code, _, err = C.run({ "repl", "--read-only", cluster, "-e", 'hosts[1]:run("reboot")' })
    assert.are.equal(1, code)
    assert.matches("dry run: refused to run: reboot", err, 1, true)
  end)
end)

describe("term", function()
  it("opens no editor without a terminal (or where GNU readline owns the rl_* names)", function()
    local term = require "cargoship.term"
    local ok, err = pcall(term.editor, {})
    assert.is_false(ok)
    assert.is_truthy(err:find("not a terminal", 1, true) or err:find("not libedit", 1, true))
  end)
end)

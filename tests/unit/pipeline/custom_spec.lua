-- Specs of cargoship.pipeline.custom: loading phase files in their sandbox, placing them, errors naming file:line.
local config = require "cargoship.config"
local custom = require "cargoship.pipeline.custom"
local log = require "cargoship.log"
local util = require "cargoship.util"
local S = require "unit.pipeline.support"

local dir

local function write(name, text)
  local path = dir .. "/" .. name
  os.execute("mkdir -p " .. util.quote(path:match("^(.*)/")))
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

-- A minimal phase file; `body` goes inside the returned table.
local function phase_file(name, body)
  return write(name, "return {\n  id = \"" .. name:gsub("%.lua$", ""):gsub("[^%w]", "_")
    .. "\",\n  title = \"Custom " .. name .. "\",\n" .. (body or "  run = function() return true end,\n") .. "}\n")
end

local function base_phases(calls)
  local list = {}
  for i, id in ipairs { "connect", "validate_hosts", "acquire_lock" } do list[i] = S.phase(calls, id) end
  return list, { name = "apply", phases = { { 1, "m.connect" }, { 4, "m.validate_hosts" }, { 7, "m.acquire_lock" } } }
end

local function ids(phases)
  local out = {}
  for i, p in ipairs(phases) do out[i] = p.id end
  return out
end

before_each(function()
  dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. util.quote(dir)))
end)

after_each(function()
  os.execute("rm -rf " .. util.quote(dir))
end)

describe("custom.load", function()
  it("loads a phase file, keeping its placement apart from the phase", function()
    local path = phase_file("mine.lua", '  after = "validate_hosts",\n  dry_run = "read_only",\n'
      .. '  run = function() return true end,\n')
    local phase, placement = custom.load(path)
    assert.is_table(phase)
    assert.are.equal("mine", phase.id)
    assert.are.equal("read_only", phase.dry_run)
    assert.is_nil(phase.after)
    assert.are.same({ placement = "after", anchor = "validate_hosts" }, placement)
  end)

  it("names the file and line of a syntax error", function()
    local path = write("broken.lua", 'return {\n  id = "broken",\n  title = "Broken"\n  run = function() end,\n}\n')
    local phase, err = custom.load(path)
    assert.is_nil(phase)
    assert.matches(path .. ":4: ", err, 1, true)
  end)

  it("names the file and line of an error while the file runs", function()
    local path = write("boom.lua", "local x = nil\n\nreturn x.field\n")
    local phase, err = custom.load(path)
    assert.is_nil(phase)
    assert.matches(path .. ":3: ", err, 1, true)
  end)

  it("refuses binary chunks", function()
    local path = write("bin.lua", string.dump(function() return {} end))
    local phase, err = custom.load(path)
    assert.is_nil(phase)
    assert.matches("binary", err)
  end)

  it("refuses a file that returns no phase, or one that breaks the contract, naming the file", function()
    local _, err = custom.load(write("nothing.lua", "local _ = 1\n"))
    assert.matches("nothing.lua: a custom phase file returns its phase table", err, 1, true)
    _, err = custom.load(write("norun.lua", 'return { id = "x", title = "X", Run = function() end }\n'))
    assert.matches("norun.lua: breaks the phase contract", err, 1, true)
    assert.matches("`assess` is missing", err, 1, true)
    assert.matches("did you mean `run`", err, 1, true)
    _, err = custom.load(write("two.lua", 'return { id = "x", title = "X", before = "a", after = "b", run = print }\n'))
    assert.matches("one placement", err)
    _, err = custom.load(write("badid.lua",
      'return { id = "x", title = "X", after = "Validate hosts", run = print }\n'))
    assert.matches("must name a phase by its id", err)
  end)

  for _, name in ipairs { "require", "io", "load", "loadfile", "dofile", "debug", "coroutine", "package" } do
    it("refuses `" .. name .. "`, naming file and line", function()
      local path = write("s_" .. name .. ".lua", "local ok = true\nlocal x = " .. name .. "\nreturn x\n")
      local phase, err = custom.load(path)
      assert.is_nil(phase)
      assert.matches(path .. ":2: " .. name .. " is not available to custom phases", err, 1, true)
    end)
  end

  it("refuses os.execute and friends but gives os.time, os.clock and os.date", function()
    local _, err = custom.load(write("exec.lua", 'return os.execute("true")\n'))
    assert.matches("exec.lua:1: os.execute is not available to custom phases", err, 1, true)
    local phase = custom.load(write("time.lua", 'local t = os.time() + os.clock()\nlocal d = os.date("%Y")\n'
      .. 'return { id = "t", title = "T", dry_run = "read_only", run = function() return t, d end }\n'))
    assert.is_table(phase)
  end)

  it("gives string, table, math, utf8, shell and json, and no runtime module", function()
    local phase, err = custom.load(write("libs.lua", [[
local parts = { string.upper("a"), table.concat({ "b", "c" }), tostring(math.max(1, 2)), utf8.char(100),
  shell.quote("it's"), json.encode({ k = json.null }), tostring(json.decode('{"n": 5}').n) }
assert(string.dump == nil, "string.dump is there")
assert(getmetatable("") == nil, "the string metatable is reachable")
return { id = "libs", title = "Libs", dry_run = "read_only", run = function() return parts end }
]]))
    assert.is_table(phase, err)
    local parts = phase.run(S.ctx(), {})
    assert.are.same({ "A", "bc", "2", "d", "'it'\\''s'", '{"k":null}', "5" }, parts)
  end)

  it("routes print to the logger, naming the file", function()
    local lines = {}
    local logger = log.new { level = "info", stream = { write = function(_, ...)
      for _, s in ipairs { ... } do lines[#lines + 1] = s end
    end } }
    custom.load(write("talk.lua", 'print("hello", 42)\nreturn { id = "t", title = "T", run = print }\n'),
      { log = logger })
    assert.matches("talk.lua: hello\t42", table.concat(lines), 1, true)
  end)
end)

describe("a custom phase at run time", function()
  it("sees host and context views with the phase API and none of the runtime", function()
    local path = write("look.lua", [[
return {
  id = "look", title = "Look", dry_run = "read_only",
  run = function(ctx, hosts)
    local h = hosts[1]
    ctx.state.seen = { name = h.name, role = h.role, conn = h.conn, attach = h.attach, transport = ctx.transport,
      n = #ctx.hosts, leader = ctx.leader.name, probe = type(h.probe), same = ctx.hosts[1] == h,
      mt = getmetatable(h) }
    local ok, err = pcall(function() h.name = "x" end)
    ctx.state.seen.write_field = ok or err
    return ctx:each(hosts, function(host) return host:probe("true") end)
  end,
}
]])
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, { assert(custom.load(path)) })
    assert.are.equal("ran", rep.phases[1].verdict)
    local seen = ctx.state.seen
    assert.are.same({ name = "ctrl-1", role = "controller", n = 3, leader = "ctrl-1", probe = "function",
      same = true, mt = "cargoship host view" }, { name = seen.name, role = seen.role, n = seen.n,
      leader = seen.leader, probe = seen.probe, same = seen.same, mt = seen.mt })
    assert.is_nil(seen.conn)
    assert.is_nil(seen.attach)
    assert.is_nil(seen.transport)
    assert.matches("read%-only to a custom phase", seen.write_field)
    assert.are.equal(1, #ctx.hosts[3].conn.calls)
  end)

  it("names file and line when a phase function fails on a host, and a dry run refuses its writes", function()
    local path = write("writer.lua", [[
return {
  id = "writer", title = "Writer", dry_run = "read_only",
  run = function(ctx, hosts)
    return ctx:each(hosts, function(host)
      host:write_file("/etc/motd", "hi")
      return true
    end)
  end,
}
]])
    local phase = assert(custom.load(path))
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, { phase })
    local p = rep.phases[1]
    assert.are.equal("failed", p.verdict)
    local e = S.host_of(p, "ctrl-1").error
    assert.matches(path .. ":5: ", e, 1, true)
    assert.matches("dry run: refused to write /etc/motd", e, 1, true)
  end)

  it("names file and line of a runtime error in run", function()
    local path = write("oops.lua", 'return {\n  id = "oops", title = "Oops", dry_run = "read_only",\n'
      .. '  run = function(ctx)\n'
      .. '    return ctx.nothing.here\n  end,\n}\n')
    local phase = assert(custom.load(path))
    local rep = S.run(S.ctx(), { phase })
    assert.are.equal("failed", rep.phases[1].verdict)
    assert.matches(path .. ":4: ", rep.phases[1].error, 1, true)
  end)

  it("is reported, not run, in a dry run unless it declares otherwise; its assess speaks per host", function()
    local path = write("rep.lua", [[
return {
  id = "rep", title = "Reported",
  assess = function(ctx, host) return host.role == "worker" and { "do a thing" } or {} end,
  run = function() error("ran in a dry run") end,
}
]])
    local rep = S.run(S.ctx { dry_run = true }, { assert(custom.load(path)) })
    local p = rep.phases[1]
    assert.are.equal("would_act", p.verdict)
    assert.are.same({ "do a thing" }, S.says(S.host_of(p, "worker-1")))
    assert.are.same({}, S.host_of(p, "ctrl-1").actions)
  end)

  it("maps failures, prepared hosts and its own dry-run results back to the run's hosts", function()
    local path = write("own.lua", [[
return {
  id = "own", title = "Own",
  prepare = function(ctx) return { ctx.hosts[3] } end,
  assess = function() return { "x" } end,
  dry_run = function(ctx, hosts) return { { host = hosts[1], actions = { "would x" } } } end,
  run = function(ctx, hosts) return nil, { { host = hosts[1], err = "bad host" } } end,
}
]])
    local phase = assert(custom.load(path))
    local rep = S.run(S.ctx { dry_run = true }, { phase })
    assert.are.same({ "would x" }, S.says(S.host_of(rep.phases[1], "worker-1")))
    rep = S.run(S.ctx(), { phase })
    assert.are.equal("failed", rep.phases[1].verdict)
    assert.are.equal("bad host", S.host_of(rep.phases[1], "worker-1").error)
  end)
end)

describe("a custom phase of action records", function()
  it("plans records in a dry run and has them executed, steps included, through views", function()
    local path = write("records.lua", [[
return {
  id = "records", title = "Records",
  assess = function(ctx, host)
    return { action.write { path = "/etc/x", content = "x=" .. host.name .. "\n" },
      action.step { name = "check", say = "check " .. host.name, want = host.role } }
  end,
  steps = {
    check = function(ctx, host, a)
      ctx.state[host.name] = { mt = getmetatable(host), role = a.want, conn = host.conn }
      return true
    end,
  },
}
]])
    local phase = assert(custom.load(path))
    assert.is_nil(phase.run, "no run: the runner executes the records")
    local plan = S.run(S.ctx { dry_run = true }, { phase })
    assert.are.same({ "write /etc/x (11 bytes)", "check worker-1" }, S.says(S.host_of(plan.phases[1], "worker-1")))
    local ctx = S.ctx()
    local rep = S.run(ctx, { phase })
    local h = S.host_of(rep.phases[1], "ctrl-2")
    assert.are.same({ "done", "done" }, { h.actions[1].outcome, h.actions[2].outcome })
    assert.are.same({ mt = "cargoship host view", role = "controller" }, ctx.state["ctrl-2"])
  end)

  it("names file and line of a step that raises", function()
    local path = write("badstep.lua", 'return {\n  id = "bad", title = "Bad",\n'
      .. '  assess = function() return { action.step { name = "s", say = "s" } } end,\n'
      .. '  steps = { s = function() error("no good") end },\n}\n')
    local rep = S.run(S.ctx(), { assert(custom.load(path)) })
    assert.are.equal("failed", rep.phases[1].verdict)
    assert.matches(path .. ":4: no good", S.host_of(rep.phases[1], "ctrl-1").actions[1].error, 1, true)
  end)
end)

describe("custom.assemble", function()
  local calls
  before_each(function() calls = {} end)

  local function c(id, placement, anchor)
    return { phase = S.phase(calls, id), placement = placement, anchor = anchor, origin = id .. ".lua", file = id }
  end

  it("places phases before, after and instead of pipeline phases, in the order given", function()
    local phases, pipeline = base_phases(calls)
    local out, p = custom.assemble(phases, pipeline, {
      c("a1", "after", "validate_hosts"), c("b1", "before", "connect"), c("a2", "after", "validate_hosts"),
      c("r1", "replace", "acquire_lock"), c("b2", "before", "acquire_lock"),
    })
    assert.are.same({ "b1", "connect", "validate_hosts", "a1", "a2", "b2", "r1" }, ids(out))
    local numbers = {}
    for i, e in ipairs(p.phases) do numbers[i] = e[1] end
    assert.are.same({ 0, 1, 4, 4, 4, 4, 7 }, numbers)
    assert.are.equal("m.connect", p.phases[2][2])
    assert.are.equal("apply", p.name)
  end)

  it("says which phase ids exist, with did-you-mean, for an unknown one", function()
    local phases, pipeline = base_phases(calls)
    local out, err = custom.assemble(phases, pipeline, { c("x", "after", "validate_host") })
    assert.is_nil(out)
    assert.matches('x.lua: unknown phase "validate_host" (did you mean "validate_hosts"?)', err, 1, true)
    assert.matches("connect, validate_hosts, acquire_lock", err, 1, true)
  end)

  it("refuses two replacements of one phase, and ids used twice", function()
    local phases, pipeline = base_phases(calls)
    local _, err = custom.assemble(phases, pipeline, { c("r1", "replace", "connect"), c("r2", "replace", "connect") })
    assert.matches("already replaced", err)
    _, err = custom.assemble(phases, pipeline, { c("connect", "after", "acquire_lock") })
    assert.matches("id already used", err)
  end)

  it("leaves the pipeline alone without custom phases", function()
    local phases, pipeline = base_phases(calls)
    local out, p = custom.assemble(phases, pipeline, {})
    assert.are.equal(phases, out)
    assert.are.equal(pipeline, p)
  end)
end)

describe("custom.load_all", function()
  it("reads --phases DIR in name order; each file must say where it goes", function()
    phase_file("b_two.lua", '  before = "acquire_lock",\n  dry_run = "read_only",\n  run = print,\n')
    phase_file("a_one.lua", '  after = "connect",\n  dry_run = "read_only",\n  run = print,\n')
    write("notes.txt", "not a phase")
    local customs = assert(custom.load_all { dir = dir })
    assert.are.same({ "a_one", "b_two" }, { customs[1].phase.id, customs[2].phase.id })
    assert.are.same({ "after", "connect" }, { customs[1].placement, customs[1].anchor })
    phase_file("c_three.lua", '  dry_run = "read_only",\n  run = print,\n')
    local none, err = custom.load_all { dir = dir }
    assert.is_nil(none)
    assert.matches("c_three.lua: says nowhere where it goes", err, 1, true)
  end)

  it("reports every broken file at once, and a missing directory", function()
    write("x1.lua", "return {")
    write("x2.lua", "return 1 +")
    local _, err = custom.load_all { dir = dir }
    assert.matches("x1.lua:1:", err, 1, true)
    assert.matches("x2.lua:1:", err, 1, true)
    _, err = custom.load_all { dir = dir .. "/nope" }
    assert.matches("--phases " .. dir .. "/nope", err, 1, true)
  end)

  it("loads the cluster file's entries relative to it; the entry's placement wins", function()
    phase_file("phases/mine.lua", '  after = "connect",\n  dry_run = "read_only",\n  run = print,\n')
    local path = write("cluster.yaml", [[
apiVersion: zarf.dev/v1alpha1
kind: ZarfCluster
metadata: {name: lab}
spec:
  config: {loadbalancer: lb.example.com}
  hosts:
    - role: controller
      ssh: {address: 10.0.0.1}
  phases:
    - file: phases/mine.lua
      before: acquire_lock
    - file: phases/missing.lua
      after: connect
]])
    local cluster = assert(config.load(path, { env = function() return nil end }))
    assert.are.equal(dir .. "/phases/mine.lua", cluster.phases[1].path)
    local _, err = custom.load_all { cluster = cluster }
    assert.matches(path .. ":12:13: spec.phases[1].file: cannot read " .. dir .. "/phases/missing.lua", err, 1, true)
    table.remove(cluster.phases, 2)
    local customs = assert(custom.load_all { cluster = cluster })
    assert.are.same({ "before", "acquire_lock" }, { customs[1].placement, customs[1].anchor })
    assert.are.equal(path .. ":11:15: spec.phases[0].before", customs[1].origin)
  end)
end)

describe("spec.phases in the cluster file", function()
  local function load(phases)
    return config.load_string(table.concat({
      "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata: {name: lab}", "spec:",
      "  config: {loadbalancer: lb.example.com}", "  hosts:", "    - role: controller",
      "      ssh: {address: 10.0.0.1}", "  phases:", phases }, "\n") .. "\n", "c.yaml")
  end

  it("reports each mistake with file:line:col", function()
    local _, errs = load(table.concat({
      "    - file: a.lua", "    - file: b.lua", "      after: x", "      before: y",
      "    - after: connect", "    - file: c.lua", "      after: Validate Hosts", "      aftr: connect" }, "\n"))
    local text = config.format_errors(errs)
    assert.matches('c.yaml:10:7: spec.phases[0]: missing placement', text, 1, true)
    assert.matches('c.yaml:11:7: spec.phases[1]: a phase has one placement, got "before", "after"', text, 1, true)
    assert.matches('c.yaml:14:7: spec.phases[2]: missing required field "file"', text, 1, true)
    assert.matches('c.yaml:16:14: spec.phases[3].after: expected a phase id', text, 1, true)
    assert.matches('c.yaml:17:7: spec.phases[3].aftr: unknown field "aftr" (did you mean "after"?)', text, 1, true)
  end)

  it("keeps valid entries in order with the file resolved and placement split out", function()
    local cluster = assert(load("    - file: /abs/x.lua\n      replace: validate_hosts\n    - file: rel/y.lua\n"
      .. "      after: connect"))
    assert.are.same({ "/abs/x.lua", "replace", "validate_hosts" },
      { cluster.phases[1].path, cluster.phases[1].placement, cluster.phases[1].anchor })
    assert.are.equal("rel/y.lua", cluster.phases[2].path)
  end)
end)

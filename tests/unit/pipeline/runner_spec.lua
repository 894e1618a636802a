-- Specs of cargoship.pipeline.runner with fake phases over real Host objects and fake connections.
local loop = require "cargoship.loop"
local runner = require "cargoship.pipeline.runner"
local report = require "cargoship.pipeline.report"
local cli = require "cargoship.cli"
local S = require "unit.pipeline.support"

local function cjson_null() return require("cjson").null end

local function names(hosts)
  local out = {}
  for i, h in ipairs(hosts) do out[i] = h.name end
  return out
end

-- Makes every host's fake connection wait (for a cancel) on a "sleep 600" command.
local function hang_on_sleep(ctx)
  for _, h in ipairs(ctx.hosts) do
    local exec = h.conn.exec
    h.conn.exec = function(self, cmd, o)
      if cmd:find("sleep 600", 1, true) then loop.sleep(600) end
      return exec(self, cmd, o)
    end
  end
end

describe("runner, dry run", function()
  local calls
  before_each(function() calls = {} end)

  it("reports a phase that declares nothing with the actions its assess gives per host", function()
    local ctx = S.ctx { dry_run = true }
    local phase = S.phase(calls, "prep", {
      assess = function(_, h)
        calls[#calls + 1] = "prep:assess:" .. h.name
        if h.role == "worker" then return { { action = "set vm.max_map_count" }, "write /etc/environment" } end
        return nil
      end,
    })
    local rep = S.run(ctx, { phase })
    local p = rep.phases[1]
    assert.are.equal("would_act", p.verdict)
    assert.are.equal("reported", p.dry_run_policy)
    assert.are.same({ "set vm.max_map_count", "write /etc/environment" }, S.says(S.host_of(p, "worker-1")))
    assert.are.same({}, S.says(S.host_of(p, "ctrl-1")))
    assert.are.same({ "ctrl-1", "ctrl-2", "worker-1" }, { p.hosts[1].host, p.hosts[2].host, p.hosts[3].host })
    for _, c in ipairs(calls) do assert.is_nil(c:match(":run:"), "a reported phase ran: " .. c) end
    assert.are.equal("pending", rep.outcome)
    assert.is_true(rep.pending)
    assert.is_true(rep.ok)
    assert.are.equal(cli.EXIT.pending, report.exit_code(rep, cli.EXIT))
  end)

  it("reports nothing to do when assess finds the work done everywhere", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, { S.phase(calls, "done", { assess = function() return {} end }) })
    assert.are.equal("nothing_to_do", rep.phases[1].verdict)
    assert.are.equal("ok", rep.outcome)
    assert.is_false(rep.pending)
    assert.are.equal(cli.EXIT.ok, report.exit_code(rep, cli.EXIT))
  end)

  it("keeps a sentence of the old contract as a record of kind note", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, { S.phase(calls, "lock", {
      prepare = function(c) return { c.hosts[1], c.hosts[3] } end,
    }) })
    local p = rep.phases[1]
    assert.are.equal("would_act", p.verdict)
    assert.are.same({ "ctrl-1", "worker-1" }, { p.hosts[1].host, p.hosts[2].host })
    assert.are.same({ { kind = "note", say = S.default_say("lock") } }, p.hosts[1].actions)
    assert.are.same({}, calls)
  end)

  it("runs a read_only phase, counting its round trips per host", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, { S.phase(calls, "facts", {
      dry_run = "read_only",
      run = function(c, hosts)
        calls[#calls + 1] = "facts:run:" .. table.concat(names(hosts), ",")
        return c:each(hosts, function(h)
          h.facts.hostname = h:probe("hostname")
          h:probes { arch = "uname -m", kernel = "uname -r" }
          return true
        end)
      end,
    }) })
    local p = rep.phases[1]
    assert.are.equal("ran", p.verdict)
    assert.are.same({ "facts:run:ctrl-1,ctrl-2,worker-1" }, calls)
    assert.are.equal(2, S.host_of(p, "ctrl-2").probes)
    assert.are.equal(0, S.host_of(p, "ctrl-2").writes)
    assert.are.equal(6, p.probes)
    assert.is_true(p.elapsed >= 0)
    assert.are.equal("ok", rep.outcome)
  end)

  it("runs a phase's own dry-run path instead of its run", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, { S.phase(calls, "disconnect", {
      dry_run = function(_, hosts)
        local out = {}
        for i, h in ipairs(hosts) do out[i] = { host = h, actions = { "close the SSH session" } } end
        out[#out + 1] = { host = "ctrl-1", actions = { { action = "remove 2 leftover temp files" } } }
        return out
      end,
      cleanup = function() calls[#calls + 1] = "disconnect:cleanup" end,
    }) })
    local p = rep.phases[1]
    assert.are.equal("own", p.verdict)
    assert.are.equal("own", p.dry_run_policy)
    assert.are.same({ "close the SSH session", "remove 2 leftover temp files" }, S.says(S.host_of(p, "ctrl-1")))
    assert.are.same({}, calls)
    assert.are.equal("ok", rep.outcome, "an own dry run did its work: nothing is pending")
  end)

  it("leaves unassessed, per host, a phase reading what an earlier reported phase would create", function()
    local ctx = S.ctx { dry_run = true }
    local stage = S.phase(calls, "stage", {
      title = "Upload files to hosts", creates = { "staged_files" },
      assess = function(_, h) if h.name == "ctrl-2" then return { "upload engine.tar" } end end,
    })
    local install = S.phase(calls, "install", {
      title = "Install staged files", reads = { "facts", "staged_files" },
      assess = function(_, h)
        calls[#calls + 1] = "install:assess:" .. h.name
        return { "move engine into place" }
      end,
    })
    local after = S.phase(calls, "after", { reads = { "staged_files" }, assess = function() return {} end })
    local rep = S.run(ctx, { stage, install, after })
    local p = rep.phases[2]
    assert.are.equal("would_act", p.verdict)
    assert.are.equal("reads staged_files, which Upload files to hosts would create", S.host_of(p, "ctrl-2").reason)
    assert.are.same({}, S.says(S.host_of(p, "ctrl-2")))
    assert.are.same({ "move engine into place" }, S.says(S.host_of(p, "ctrl-1")))
    table.sort(calls)
    assert.are.same({ "install:assess:ctrl-1", "install:assess:worker-1" }, calls)
    -- the first reported phase with pending work is the one named, however many follow
    local q = rep.phases[3]
    assert.are.equal("unassessed", q.verdict)
    assert.are.equal("reads staged_files, which Upload files to hosts would create", S.host_of(q, "ctrl-2").reason)
    assert.is_nil(S.host_of(q, "ctrl-1").reason)
    assert.are.equal("pending", rep.outcome)
  end)

  it("a phase unassessed on every host is unassessed, and propagates what it creates", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, {
      S.phase(calls, "a", { title = "Initialize Controller", creates = { "engine_running" } }),
      S.phase(calls, "b", { reads = { "engine_running" }, creates = { "manifests" },
        assess = function() error("must not be called") end }),
      S.phase(calls, "c", { reads = { "manifests" }, assess = function() error("must not be called") end }),
    })
    assert.are.equal("unassessed", rep.phases[2].verdict)
    assert.are.equal("unassessed", rep.phases[3].verdict)
    assert.are.equal("reads manifests, which Phase b would create", rep.phases[3].hosts[1].reason)
    assert.are.equal(cli.EXIT.pending, report.exit_code(rep, cli.EXIT))
  end)

  it("fails the dry run when a read_only phase writes, naming the refusal", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, {
      S.phase(calls, "sneaky", {
        dry_run = "read_only",
        run = function(c, hosts)
          return c:each(hosts, function(h)
            if h.name == "ctrl-2" then assert(h:write_file("/etc/hosts", "x")) end
            return true
          end)
        end,
      }),
      S.phase(calls, "later", { assess = function(_, h) calls[#calls + 1] = "later:assess:" .. h.name end }),
    })
    local p = rep.phases[1]
    assert.are.equal("failed", p.verdict)
    assert.are.equal("dry run: refused to write /etc/hosts", S.host_of(p, "ctrl-2").error)
    assert.is_nil(S.host_of(p, "ctrl-1").error)
    -- the dry run goes on without the failed host
    assert.are.equal("nothing_to_do", rep.phases[2].verdict)
    assert.are.equal("failed in phase 1 (Phase sneaky)", S.host_of(rep.phases[2], "ctrl-2").not_reached)
    table.sort(calls)
    assert.are.same({ "later:assess:ctrl-1", "later:assess:worker-1" }, calls)
    assert.are.equal("failed", rep.outcome)
    assert.are.equal(cli.EXIT.failure, report.exit_code(rep, cli.EXIT))
    local logged = ctx.log_stream.text()
    assert.matches("ctrl%-2%s+| error: ctrl%-2: dry run: refused to write /etc/hosts", logged)
    assert.are.equal(1, select(2, logged:gsub("refused to write", "")), "the refusal is logged once")
  end)

  it("fails the dry run even when the phase swallows the refusal", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, { S.phase(calls, "swallow", {
      dry_run = "read_only",
      run = function(c)
        pcall(c.hosts[1].run, c.hosts[1], "systemctl restart engine")
      end,
    }) })
    assert.are.equal("failed", rep.phases[1].verdict)
    assert.are.equal("dry run: refused to run: systemctl restart engine", rep.phases[1].hosts[1].error)
  end)

  it("fails the dry run when assess writes", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, { S.phase(calls, "bad", {
      assess = function(_, h) h:remove("/tmp/x") end,
    }) })
    assert.are.equal("failed", rep.phases[1].verdict)
    assert.are.equal("dry run: refused to remove /tmp/x", rep.phases[1].hosts[1].error)
  end)

  it("takes no host lock: the lock phase is only reported", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, { S.phase(calls, "acquire_lock", { creates = { "lock" } }) })
    assert.are.equal("would_act", rep.phases[1].verdict)
    assert.are.same({}, calls)
    for _, h in ipairs(ctx.hosts) do assert.are.equal(0, h.writes_sent) end
  end)
end)

describe("runner, dry run past a host's failure", function()
  local calls
  before_each(function() calls = {} end)

  -- connect fails on ctrl-2 (its link is down); then one phase of every dry-run policy
  local function pipeline(extra)
    local list = {
      S.phase(calls, "connect", { title = "Connect to hosts", dry_run = "read_only", run = function(c, hosts)
        return c:each(hosts, function(h)
          if h.name == "ctrl-2" then return nil, "ctrl-2: exec: connection lost: no answer from the host for 30 s" end
          return h:probe("true")
        end)
      end, cleanup = function() calls[#calls + 1] = "connect:cleanup" end }),
      S.phase(calls, "facts", { dry_run = "read_only", run = function(c, hosts)
        calls[#calls + 1] = "facts:run:" .. table.concat(names(hosts), ",")
        return c:each(hosts, function(h) return h:probe("hostname") end)
      end }),
      S.phase(calls, "prep", { assess = function(_, h)
        calls[#calls + 1] = "prep:assess:" .. h.name
        return { "write /etc/x on " .. h.name }
      end }),
      S.phase(calls, "bye", { dry_run = function(_, hosts)
        calls[#calls + 1] = "bye:dry_run:" .. table.concat(names(hosts), ",")
        local out = {}
        for i, h in ipairs(hosts) do out[i] = { host = h, actions = { "close the SSH session" } } end
        return out
      end }),
    }
    for _, p in ipairs(extra or {}) do list[#list + 1] = p end
    return list
  end

  it("takes the failed host out of every later phase; the others go through every phase", function()
    local ctx = S.ctx { dry_run = true }
    local sent_before
    local rep = S.run(ctx, pipeline {
      S.phase(calls, "count", { dry_run = "read_only", run = function()
        sent_before = #ctx.hosts[2].conn.calls
      end }),
    })
    assert.are.same({ "failed", "ran", "would_act", "own", "ran" }, { rep.phases[1].verdict, rep.phases[2].verdict,
      rep.phases[3].verdict, rep.phases[4].verdict, rep.phases[5].verdict })
    assert.matches("connection lost", S.host_of(rep.phases[1], "ctrl-2").error)
    for k = 2, 5 do
      local dead = S.host_of(rep.phases[k], "ctrl-2")
      assert.are.equal("failed in phase 1 (Connect to hosts)", dead.not_reached, rep.phases[k].id)
      assert.is_nil(dead.error)
      assert.are.same({}, dead.actions)
    end
    assert.are.same({ "write /etc/x on worker-1" }, S.says(S.host_of(rep.phases[3], "worker-1")))
    table.sort(calls)
    assert.are.same({ "bye:dry_run:ctrl-1,worker-1", "connect:cleanup", "facts:run:ctrl-1,worker-1",
      "prep:assess:ctrl-1", "prep:assess:worker-1" }, calls)
    -- nothing more went to the dead host after its failure
    assert.are.equal(0, sent_before)
    assert.are.equal("failed", rep.outcome)
    assert.is_false(rep.ok)
    assert.are.equal("phase 1 (Connect to hosts) failed", rep.error)
    assert.are.equal(cli.EXIT.failure, report.exit_code(rep, cli.EXIT))
    assert.are.equal("connect", rep.cleanup[1].id, "a dry run that went on past a failure cleans up too")
  end)

  it("takes out a host that fails later too, and a host lost for the run", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, pipeline {
      S.phase(calls, "lost", { dry_run = "read_only",
        run = function(c) c:host_lost(c.hosts[3], "worker-1: gone") end }),
      S.phase(calls, "last", { assess = function(_, h)
        calls[#calls + 1] = "last:assess:" .. h.name
      end }),
    })
    assert.are.equal("failed", rep.phases[5].verdict)
    assert.are.equal("gone", S.host_of(rep.phases[5], "worker-1").error)
    local last = rep.phases[6]
    assert.are.equal("nothing_to_do", last.verdict)
    assert.are.equal("failed in phase 5 (Phase lost)", S.host_of(last, "worker-1").not_reached)
    assert.are.equal("failed in phase 1 (Connect to hosts)", S.host_of(last, "ctrl-2").not_reached)
    local assessed = {}
    for _, c in ipairs(calls) do
      if c:match("^last:") then assessed[#assessed + 1] = c end
    end
    assert.are.same({ "last:assess:ctrl-1" }, assessed)
    assert.are.equal("failed", rep.outcome)
    assert.are.equal("phase 1 (Connect to hosts) failed", rep.error, "the first failure is named")
  end)

  it("a phase every host it concerns failed before is skipped, naming them", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, pipeline {
      S.phase(calls, "leader", { prepare = function(c) return { c.hosts[2] } end,
        assess = function() error("must not be called") end }),
    })
    local p = rep.phases[5]
    assert.are.equal("skipped", p.verdict)
    assert.are.equal("failed in phase 1 (Connect to hosts)", S.host_of(p, "ctrl-2").not_reached)
    assert.are.equal("skipped (not reached: 1 host failed earlier)", report.summary(p))
  end)

  it("still stops at a failure of the phase as a whole, or when no host is left", function()
    local rep = S.run(S.ctx { dry_run = true }, {
      S.phase(calls, "whole", { dry_run = "read_only",
        run = function() return nil, "no controller in the cluster" end }),
      S.phase(calls, "after"),
    })
    assert.are.same({ "failed", "skipped" }, { rep.phases[1].verdict, rep.phases[2].verdict })
    assert.are.same({}, rep.phases[2].hosts)
    rep = S.run(S.ctx { dry_run = true }, {
      S.phase(calls, "all", { dry_run = "read_only", run = function(c, hosts)
        return c:each(hosts, function() return nil, "unreachable" end)
      end }),
      S.phase(calls, "after"),
    })
    assert.are.same({ "failed", "skipped" }, { rep.phases[1].verdict, rep.phases[2].verdict })
    assert.are.equal("FAILED on 3 of 3 hosts", report.summary(rep.phases[1], false))
  end)

  it("a real run still stops after the phase where a host failed", function()
    local ctx = S.ctx { dry_run = false }
    local rep = S.run(ctx, pipeline())
    assert.are.same({ "failed", "skipped", "skipped", "skipped" }, { rep.phases[1].verdict, rep.phases[2].verdict,
      rep.phases[3].verdict, rep.phases[4].verdict })
    assert.are.same({ "connect:cleanup" }, calls)
  end)
end)

describe("runner, real run", function()
  local calls
  before_each(function() calls = {} end)

  it("assesses, then runs only on the hosts with work, and skips a phase with none", function()
    local ctx = S.ctx { dry_run = false }
    local rep = S.run(ctx, {
      S.phase(calls, "a", { assess = function(_, h) if h.role == "worker" then return { "x" } end end }),
      S.phase(calls, "b", { assess = function() return {} end }),
      S.phase(calls, "c"),
    })
    assert.are.same({ "a:run:worker-1", "c:run:ctrl-1,ctrl-2,worker-1" }, calls)
    assert.are.same({ "ran", "nothing_to_do", "ran" },
      { rep.phases[1].verdict, rep.phases[2].verdict, rep.phases[3].verdict })
    assert.are.equal("ok", rep.outcome)
    assert.is_false(rep.pending)
    assert.are.equal(cli.EXIT.ok, report.exit_code(rep, cli.EXIT))
  end)

  it("fails a phase when a host fails, cleans up the started phases in reverse, skips the rest", function()
    local ctx = S.ctx { dry_run = false }
    local function cleanup(id) return function() calls[#calls + 1] = id .. ":cleanup" end end
    local rep = S.run(ctx, {
      S.phase(calls, "one", { cleanup = cleanup("one") }),
      S.phase(calls, "two", { cleanup = cleanup("two") }),
      S.phase(calls, "idle", { assess = function() end, cleanup = cleanup("idle") }),
      S.phase(calls, "three", {
        cleanup = cleanup("three"),
        run = function(c, hosts)
          return c:each(hosts, function(h)
            if h.name == "ctrl-2" then return nil, "ctrl-2: engine: exit 1" end
            if h.name == "worker-1" then error("worker-1: disk full", 0) end
            return true
          end)
        end,
      }),
      S.phase(calls, "four", { cleanup = cleanup("four") }),
    })
    assert.are.same({ "one:run:ctrl-1,ctrl-2,worker-1", "two:run:ctrl-1,ctrl-2,worker-1",
      "three:cleanup", "two:cleanup", "one:cleanup" }, calls)
    local p = rep.phases[4]
    assert.are.equal("failed", p.verdict)
    assert.are.equal("engine: exit 1", S.host_of(p, "ctrl-2").error)
    assert.are.equal("disk full", S.host_of(p, "worker-1").error)
    assert.is_nil(S.host_of(p, "ctrl-1").error)
    assert.are.equal("skipped", rep.phases[5].verdict)
    assert.are.same({ "three", "two", "one" }, { rep.cleanup[1].id, rep.cleanup[2].id, rep.cleanup[3].id })
    assert.are.equal("failed", rep.outcome)
    assert.are.equal("phase 4 (Phase three) failed", rep.error)
    assert.are.equal(cli.EXIT.failure, report.exit_code(rep, cli.EXIT))
    -- every failure logged once, on its host's line
    local logged = ctx.log_stream.text()
    local _, n = logged:gsub("engine: exit 1", "")
    assert.are.equal(1, n)
    assert.matches("worker%-1 | error: worker%-1: disk full", logged)
  end)

  it("fails a phase on ctx:fail although its run returns normally", function()
    local ctx = S.ctx { dry_run = false }
    local rep = S.run(ctx, { S.phase(calls, "validate", {
      run = function(c, hosts)
        c:fail(hosts[2], "hostname ctrl-2 is not unique")
      end,
    }) })
    assert.are.equal("failed", rep.phases[1].verdict)
    assert.are.equal("hostname ctrl-2 is not unique", S.host_of(rep.phases[1], "ctrl-2").error)
  end)

  it("stops on a host lost through ctx:host_lost (the lock's callback), during a phase", function()
    local ctx = S.ctx { dry_run = false }
    local rep = S.run(ctx, {
      S.phase(calls, "lock", { run = function() end }),
      -- the heartbeat task reports the loss while another phase runs
      S.phase(calls, "next", { run = function(c) c:host_lost(c.hosts[1], "lock stolen by op@elsewhere") end }),
      S.phase(calls, "after", { run = function() end }),
    })
    assert.are.equal("ran", rep.phases[1].verdict)
    assert.are.equal("failed", rep.phases[2].verdict)
    assert.are.equal("lock stolen by op@elsewhere", S.host_of(rep.phases[2], ctx.hosts[1].name).error)
    assert.are.equal("skipped", rep.phases[3].verdict)
  end)

  it("fails a host lost between phases in the next phase, even when no phase called ctx:fail", function()
    local ctx = S.ctx { dry_run = false }
    local rep = S.run(ctx, {
      S.phase(calls, "lock", { run = function(c)
        -- a task of its own, like the heartbeat's: it ends after the phase returned
        loop.spawn(function() loop.sleep(0.01) c:host_lost(c.hosts[2], "lock lost") end)
      end }),
      S.phase(calls, "wait", { assess = function() loop.sleep(0.05) return {} end }),
      S.phase(calls, "after", { run = function() end }),
    })
    assert.are.equal("ran", rep.phases[1].verdict)
    assert.are.equal("failed", rep.phases[2].verdict)
    assert.are.equal("lock lost", S.host_of(rep.phases[2], "ctrl-2").error)
    assert.are.equal("skipped", rep.phases[3].verdict)
  end)

  it("fails a host in the running phase when its lock's callback calls ctx:host_lost", function()
    local ctx = S.ctx { dry_run = false }
    local h2 = ctx.hosts[2]
    local rep = S.run(ctx, {
      S.phase(calls, "lock", { run = function() end }),
      S.phase(calls, "work", { run = function(c)
        -- the lock's heartbeat task, beside the phase's own work
        local t = loop.spawn(function() c:host_lost(h2, "lost the lock at /run/cargoship/lock: taken over") end)
        t:join()
      end }),
      S.phase(calls, "after", { run = function() end }),
    })
    assert.are.equal("failed", rep.phases[2].verdict)
    assert.are.equal("lost the lock at /run/cargoship/lock: taken over", S.host_of(rep.phases[2], h2.name).error)
    assert.are.equal("skipped", rep.phases[3].verdict)
  end)

  it("fails a phase that returns an error object, or an empty failure list", function()
    local rep = S.run(S.ctx(), { S.phase({}, "a", { run = function() return nil, { err = "boom", code = "io" } end }) })
    assert.are.equal("boom", rep.phases[1].error)
    rep = S.run(S.ctx(), { S.phase({}, "a", { run = function() return nil, {} end }) })
    assert.are.equal("failed", rep.phases[1].verdict)
    assert.are.equal("failed, naming no host and no reason", rep.phases[1].error)
  end)

  it("fails a phase on a phase-wide error", function()
    local ctx = S.ctx { dry_run = false }
    local rep = S.run(ctx, {
      S.phase(calls, "a", { run = function() return nil, "no controller in the cluster" end }),
      S.phase(calls, "b", { prepare = function() error("prepare broke", 0) end }),
    })
    assert.are.equal("no controller in the cluster", rep.phases[1].error)
    assert.are.equal("failed", rep.phases[1].verdict)
    rep = S.run(S.ctx(), { S.phase(calls, "b", { prepare = function() error("prepare broke", 0) end }) })
    assert.are.equal("prepare broke", rep.phases[1].error)
  end)

  it("runs at most ctx.options.concurrency hosts at once", function()
    local hosts = {}
    for i = 1, 12 do hosts[i] = { name = "h" .. i, role = "worker" } end
    local ctx = S.ctx { hosts = hosts, concurrency = 4 }
    local inside, most = 0, 0
    local rep = S.run(ctx, { S.phase(calls, "p", {
      run = function(c, list)
        return c:each(list, function()
          inside = inside + 1
          most = math.max(most, inside)
          loop.sleep(0.002)
          inside = inside - 1
          return true
        end)
      end,
    }) })
    assert.are.equal("ran", rep.phases[1].verdict)
    assert.are.equal(4, most)
  end)

  it("gives up after the deadline, as a failure, and cleans up", function()
    local ctx = S.ctx { dry_run = false }
    local rep = S.run(ctx, {
      S.phase(calls, "lock", { cleanup = function(c)
        assert(c:each(c.hosts, function(h) return h:check("rm -f /var/lib/cargoship/lock") end))
        calls[#calls + 1] = "lock:cleanup"
      end }),
      S.phase(calls, "slow", { run = function() loop.sleep(30) end }),
    }, { deadline = loop.now() + 0.05, timeout = 0.05 })
    assert.are.equal("failed", rep.phases[2].verdict)
    assert.matches("gave up: the run took longer than %-%-timeout", rep.error)
    assert.are.same({ "lock:run:ctrl-1,ctrl-2,worker-1", "lock:cleanup" }, calls)
    assert.are.equal(cli.EXIT.failure, report.exit_code(rep, cli.EXIT))
  end)
end)

describe("runner, a host lost for the run (its lock lost)", function()
  local calls
  before_each(function() calls = {} end)

  -- a lock-like phase whose cleanup reaches every host; then `work` per host
  local function phases(work)
    return {
      S.phase(calls, "lock", { cleanup = function(ctx)
        assert(ctx:each(ctx.hosts, function(h) return h:check("rm -f /var/lib/cargoship/lock") end))
        calls[#calls + 1] = "lock:cleanup"
      end }),
      S.phase(calls, "work", { run = function(ctx, hosts) return ctx:each(hosts, work) end }),
      S.phase(calls, "after"),
    }
  end

  -- the heartbeat task: it calls ctx:host_lost from a task of its own, `after` s into the phase
  local function lose_later(ctx, h, after, seen)
    loop.spawn(function()
      loop.sleep(after)
      seen.at, seen.sent = loop.now(), #h.conn.calls
      ctx:host_lost(h, h.name .. ": lost the lock at /run/cargoship/lock: taken over by op@elsewhere")
    end)
  end

  it("stops the host's work there at once and sends it nothing more; the other hosts go on", function()
    local ctx = S.ctx()
    local h2 = ctx.hosts[2]
    local seen, t_end = {}, nil
    local rep = S.run(ctx, phases(function(h)
      if h == h2 then lose_later(ctx, h2, 0.05, seen) end
      -- ctrl-2 would go on for 10 s; the others do 20 rounds (0.2 s), past the loss
      for _ = 1, h == h2 and 1000 or 20 do
        h:probe("echo tick")
        loop.sleep(0.01)
      end
      if h ~= h2 then calls[#calls + 1] = "work:done:" .. h.name end
      t_end = loop.now()
      return true
    end))
    local p = rep.phases[2]
    assert.are.equal("failed", p.verdict)
    assert.matches("lost the lock at /run/cargoship/lock", S.host_of(p, "ctrl-2").error)
    assert.is_nil(S.host_of(p, "ctrl-1").error)
    assert.is_nil(S.host_of(p, "worker-1").error)
    assert.is_true(t_end - seen.at < 0.5, "the phase went on " .. (t_end - seen.at) .. " s after the loss")
    assert.are.equal("skipped", rep.phases[3].verdict)
    table.sort(calls)
    assert.are.same({ "lock:cleanup", "lock:run:ctrl-1,ctrl-2,worker-1", "work:done:ctrl-1", "work:done:worker-1" },
      calls)
    -- ctrl-2: its ticks up to the loss, then only the cleanup's release
    local after_loss = {}
    for i = seen.sent + 1, #h2.conn.calls do after_loss[#after_loss + 1] = h2.conn.calls[i].cmd end
    assert.are.equal(1, #after_loss, table.concat(after_loss, " | "))
    assert.matches("rm %-f /var/lib/cargoship/lock", after_loss[1])
    for _, h in ipairs { ctx.hosts[1], ctx.hosts[3] } do
      local ticks = 0
      for _, c in ipairs(h.conn.calls) do if c.cmd:find("echo tick", 1, true) then ticks = ticks + 1 end end
      assert.are.equal(20, ticks, h.name .. " did all its work")
    end
  end)

  it("ends a command the host's task is waiting on, and the phase does not wait for it", function()
    local ctx = S.ctx()
    hang_on_sleep(ctx)
    local h2 = ctx.hosts[2]
    local seen = {}
    -- without the cancel the run would wait for "sleep 600" until this deadline
    local rep = S.run(ctx, phases(function(h)
      if h == h2 then
        lose_later(ctx, h2, 0.05, seen)
        h:run("sleep 600")
        calls[#calls + 1] = "work:after-sleep"
      end
      return true
    end), { deadline = loop.now() + 3, timeout = 3 })
    assert.is_true(rep.elapsed < 1, "took " .. rep.elapsed .. " s")
    assert.are.equal("failed", rep.phases[2].verdict)
    assert.matches("taken over by op@elsewhere", S.host_of(rep.phases[2], "ctrl-2").error)
    assert.is_nil(S.host_of(rep.phases[2], "ctrl-1").error)
    for _, c in ipairs(calls) do assert.are_not.equal("work:after-sleep", c) end
    -- one host's task was cancelled, not the run
    assert.are.equal("failed", rep.outcome)
    assert.are.equal("phase 2 (Phase work) failed", rep.error)
  end)

  it("executes none of a lost host's records when the phase orders hosts itself (ctx:apply)", function()
    local ctx = S.ctx()
    local action = require "cargoship.action"
    local done = {}
    local rep = S.run(ctx, { S.phase(calls, "steps", {
      assess = function(_, h) return { action.step { name = "one", say = "step on " .. h.name } } end,
      steps = { one = function(c, h)
        done[#done + 1] = h.name
        -- the loss arrives while the first host is worked on
        if h.name == "ctrl-1" then c:host_lost(c.hosts[2], "ctrl-2: lock gone") end
        return true
      end },
      run = function(c, hosts)
        for _, h in ipairs(hosts) do c:apply(h) end
        return true
      end,
    }) })
    local p = rep.phases[1]
    assert.are.same({ "ctrl-1", "worker-1" }, done)
    assert.are.equal("failed", p.verdict)
    assert.are.equal("lock gone", S.host_of(p, "ctrl-2").error)
    assert.are.equal("not_run", S.host_of(p, "ctrl-2").actions[1].outcome)
    assert.are.equal("done", S.host_of(p, "worker-1").actions[1].outcome)
  end)
end)

describe("runner, cancellation", function()
  local calls
  before_each(function() calls = {} end)

  -- The lock phase's cleanup reaches every host over the (fake) connections, so it waits.
  local function phases(c)
    return {
      S.phase(c, "lock", { cleanup = function(ctx)
        assert(ctx:each(ctx.hosts, function(h) return h:check("rm -f /var/lib/cargoship/lock") end))
        c[#c + 1] = "lock:cleanup"
      end }),
      S.phase(c, "long", {
        run = function(ctx, hosts)
          return ctx:each(hosts, function(h) h:run("sleep 600") return true end)
        end,
        cleanup = function() c[#c + 1] = "long:cleanup" end,
      }),
      S.phase(c, "never"),
    }
  end

  it("runs the cleanup of the phases that ran when everything is cancelled (Ctrl-C)", function()
    local ctx = S.ctx { conn = { delay = 0.01 } }
    -- the slow command only: make "sleep 600" really long
    hang_on_sleep(ctx)
    local returned, late
    local ok = loop.run(function()
      loop.spawn(function()
        returned = runner.run(ctx, phases(calls), { on_late_report = function(r) late = r end })
      end)
      loop.sleep(0.05)
      loop.cancel_all() -- what SIGINT does
    end)
    assert.is_true(ok)
    assert.are.same({ "lock:run:ctrl-1,ctrl-2,worker-1", "long:cleanup", "lock:cleanup" }, calls)
    assert.are.equal(returned, late)
    assert.is_true(late.final)
    assert.are.equal("interrupted", late.outcome)
    assert.are.equal("interrupted", late.phases[2].verdict)
    assert.are.equal("skipped", late.phases[3].verdict)
    assert.are.same({ "long", "lock" }, { late.cleanup[1].id, late.cleanup[2].id })
    assert.is_true(late.cleanup[2].ok)
    assert.are.equal(cli.EXIT.interrupted, report.exit_code(late, cli.EXIT))
    for _, h in ipairs(ctx.hosts) do
      assert.are.equal("rm -f /var/lib/cargoship/lock", h.conn.calls[#h.conn.calls].cmd:match("rm %-f [^'\"]+"))
    end
  end)

  it("runs the cleanup when the loop's main task is the one running the pipeline (the CLI's case)", function()
    local ctx = S.ctx()
    hang_on_sleep(ctx)
    local late
    local ok, returned = loop.run(function()
      loop.spawn(function()
        loop.sleep(0.02)
        loop.cancel_all()
      end)
      return runner.run(ctx, phases(calls), { on_late_report = function(r) late = r end })
    end)
    assert.is_true(ok)
    assert.is_false(returned.final == nil)
    assert.are.same({ "lock:run:ctrl-1,ctrl-2,worker-1", "long:cleanup", "lock:cleanup" }, calls)
    assert.are.equal("interrupted", late.outcome)
    assert.is_true(late.cleanup[2].ok)
  end)

  it("runs the cleanup when only the caller's task is cancelled, before the caller's task ends", function()
    local ctx = S.ctx()
    hang_on_sleep(ctx)
    local late
    loop.run(function()
      local t = loop.spawn(function()
        return runner.run(ctx, phases(calls), { on_late_report = function(r) late = r end })
      end)
      loop.sleep(0.02)
      t:cancel()
      t:join()
      assert.are.same({ "lock:run:ctrl-1,ctrl-2,worker-1", "long:cleanup", "lock:cleanup" }, calls)
      assert.are.equal("interrupted", late.outcome)
    end)
    assert.is_not_nil(late)
  end)
end)

describe("runner, contract", function()
  it("refuses a pipeline with a malformed phase before any phase runs", function()
    local calls = {}
    local good = S.phase(calls, "good", { prepare = function(c) calls[#calls + 1] = "prepare" return c.hosts end })
    local bad = S.phase(calls, "bad", { dry_run = "yes", assess = "no", reads = { 1 } })
    local ctx = S.ctx { dry_run = true }
    local ok, err = pcall(S.run, ctx, { good, bad })
    assert.is_false(ok)
    assert.matches("pipeline refused before it ran", err)
    assert.matches('phase 2 %(bad%): `dry_run` must be "read_only", a function', err)
    assert.matches("phase 2 %(bad%): `assess` must be a function, not a string", err)
    assert.are.same({}, calls)
    for _, h in ipairs(ctx.hosts) do assert.are.same({}, h.conn.calls) end
  end)
end)

describe("runner, plan then run: action records", function()
  local action = require "cargoship.action"

  local function writer(path)
    local p = S.phase({}, "files", {
      assess = function(_, h)
        if h.role == "worker" then return {} end
        return { action.write { path = path, content = "secret=" .. h.name, mode = "0600" },
          action.run { cmd = "touch /x/" .. h.name } }
      end,
    })
    p.run = nil -- the runner executes the records
    return p
  end

  it("plans records in a dry run, with no outcome and never a file's content", function()
    local rep = S.run(S.ctx { dry_run = true }, { writer("/etc/a") })
    local h = S.host_of(rep.phases[1], "ctrl-1")
    assert.are.same({ kind = "write", say = "write /etc/a (13 bytes, mode 0600)", path = "/etc/a", mode = "0600" },
      h.actions[1])
    assert.are.same({ kind = "run", say = "run touch /x/ctrl-1", cmd = "touch /x/ctrl-1" }, h.actions[2])
    assert.is_nil(report.json(rep):find("secret=", 1, true))
  end)

  it("executes exactly the assessed records through host:apply when the phase has no run", function()
    local ctx = S.ctx { conn = { answers = { ["dst='/etc/a'"] = "cs-skipped\n" } } }
    local rep = S.run(ctx, { writer("/etc/a") })
    local p = rep.phases[1]
    assert.are.equal("ran", p.verdict)
    local h = S.host_of(p, "ctrl-2")
    assert.are.same({ "skipped", "done" }, { h.actions[1].outcome, h.actions[2].outcome })
    assert.are.same({}, S.host_of(p, "worker-1").actions)
    local checks = {}
    for _, c in ipairs(ctx.hosts[2].conn.calls) do
      if c.op == "check" then checks[#checks + 1] = c.cmd end
    end
    assert.are.equal(2, #checks)
    assert.are.equal("touch /x/ctrl-2", checks[2])
    assert.are.equal(0, #ctx.hosts[3].conn.calls)
  end)

  it("stops a host at its first failed record, the rest not run, and fails the phase", function()
    local ctx = S.ctx { conn = { answers = { ["dst='/etc/a'"] = { error = "ctrl-1: disk full" } } } }
    local rep = S.run(ctx, { writer("/etc/a") })
    local h = S.host_of(rep.phases[1], "ctrl-1")
    assert.are.equal("failed", rep.phases[1].verdict)
    assert.are.same({ "failed", "not_run" }, { h.actions[1].outcome, h.actions[2].outcome })
    -- the error names the host and the record (sent in one batch with the next: its own status)
    assert.matches("^ctrl%-1: write /etc/a %(13 bytes, mode 0600%): command failed %(exit 1%): .*disk full$",
      h.actions[1].error)
    local doc = require("cjson").decode(report.json(rep))
    assert.are.equal("failed", doc.phases[1].hosts[1].actions[1].outcome)
    assert.are.equal(cjson_null(), doc.phases[1].hosts[1].actions[2].error)
  end)

  it("lets a phase with run execute its records in its own order with ctx:apply", function()
    local order = {}
    local ctx = S.ctx()
    local rep = S.run(ctx, { S.phase({}, "seq", {
      assess = function(_, h) return { action.step { name = "one", say = "step on " .. h.name } } end,
      steps = { one = function(_, h) order[#order + 1] = h.name return true end },
      run = function(c, hosts)
        for i = #hosts, 1, -1 do
          local ok, err = c:apply(hosts[i])
          if not ok then return nil, err end
        end
        return true
      end,
    }) })
    assert.are.same({ "worker-1", "ctrl-2", "ctrl-1" }, order)
    assert.are.equal("done", S.host_of(rep.phases[1], "ctrl-1").actions[1].outcome)
  end)

  it("refuses ctx:apply of a record the phase did not assess", function()
    local rep = S.run(S.ctx(), { S.phase({}, "rogue", {
      assess = function() return { action.run { cmd = "true" } } end,
      run = function(c, hosts) return c:apply(hosts[1], { action.run { cmd = "rm -rf /" } }) end,
    }) })
    assert.are.equal("failed", rep.phases[1].verdict)
    assert.matches("is not one this phase assessed", rep.phases[1].error)
  end)

  it("logs where the live hosts moved since the plan, and does what it assessed now", function()
    local phase = S.phase({}, "moving", { assess = function(_, h)
      return { action.run { cmd = "echo " .. h.name } }
    end })
    phase.run = nil
    local plan = S.run(S.ctx { dry_run = true }, { phase })
    -- between plan and run, ctrl-2 changed: the plan said something else there
    plan.phases[1].hosts[2].actions = { { kind = "run", say = "run echo old" } }
    local ctx = S.ctx()
    local rep = S.run(ctx, { phase }, { plan = plan })
    local log = ctx.log_stream.text()
    assert.matches("Phase moving: ctrl%-2 moved since the plan: planned %[run echo old%], "
      .. "assessed now %[run echo ctrl%-2%]", log)
    assert.is_nil(log:find("ctrl-1 moved", 1, true))
    assert.are.equal("done", S.host_of(rep.phases[1], "ctrl-2").actions[1].outcome)
  end)

  it("reports a note of the old contract done or failed with its host", function()
    local rep = S.run(S.ctx(), { S.phase({}, "old", {
      run = function(c, hosts) return c:each(hosts, function(h)
        if h.name == "ctrl-2" then return nil, "ctrl-2: broke" end
        return true
      end) end,
    }) })
    local p = rep.phases[1]
    assert.are.equal("done", S.host_of(p, "ctrl-1").actions[1].outcome)
    assert.are.equal("failed", S.host_of(p, "ctrl-2").actions[1].outcome)
  end)
end)

describe("runner.load", function()
  after_each(function()
    package.loaded["fake.phase.one"], package.loaded["fake.phase.bad"] = nil, nil
  end)

  it("lists every phase module missing from the build", function()
    package.loaded["fake.phase.one"] = { id = "one", title = "One", dry_run = "read_only", run = function() end }
    local phases, err, detail = runner.load { name = "demo",
      phases = { { 1, "fake.phase.one" }, { 2, "fake.phase.two" }, { 3, "fake.phase.three" } } }
    assert.is_nil(phases)
    assert.are.equal("the demo pipeline needs phase modules this build does not have yet: "
      .. "fake.phase.two, fake.phase.three", err)
    assert.are.same({ "fake.phase.two", "fake.phase.three" }, detail.missing)
  end)

  it("names the module of a phase that breaks the contract", function()
    package.loaded["fake.phase.bad"] = { id = "Bad", title = "Bad", dry_run = "read_only", run = function() end,
      Cleanup = function() end }
    local phases, err = runner.load { name = "demo", phases = { { 1, "fake.phase.bad" } } }
    assert.is_nil(phases)
    assert.matches("fake.phase.bad: phase 1 %(Bad%): `id` must be a snake_case string", err)
    assert.matches("`Cleanup` is not a phase field; did you mean `cleanup`%?", err)
  end)

  it("loads the phases in order", function()
    package.loaded["fake.phase.one"] = { id = "one", title = "One", dry_run = "read_only", run = function() end }
    local phases = assert(runner.load { name = "demo", phases = { { 1, "fake.phase.one" } } })
    assert.are.equal("one", phases[1].id)
  end)
end)

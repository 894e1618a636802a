-- Specs of cargoship.pipeline.report: golden text, the JSON schema of docs/dry-run.md, exit codes.
local cjson = require "cjson"
local cli = require "cargoship.cli"
local report = require "cargoship.pipeline.report"
local S = require "unit.pipeline.support"

local PIPELINE = { name = "apply",
  phases = { { 1, "connect" }, { 3, "gather_facts" }, { 7, "acquire_lock" }, { 8, "prepare" }, { 30, "release_lock" },
    { 31, "disconnect" } },
  not_in_build = { first = 9, last = 29, text = "phases 9-29 are not in this build" } }

-- A dry run touching every verdict a successful dry run can give.
local function dry_run_report()
  local calls = {}
  local ctx = S.ctx { dry_run = true }
  return S.run(ctx, {
    S.phase(calls, "connect", { title = "Connect to hosts", dry_run = "read_only" }),
    S.phase(calls, "gather_facts", { title = "Gather host facts", dry_run = "read_only",
      run = function(c, hosts) return c:each(hosts, function(h) return h:probe("hostname") end) end }),
    S.phase(calls, "acquire_lock", { title = "Acquire exclusive host lock", creates = { "lock" },
      assess = function() return { "take the lock" } end }),
    S.phase(calls, "prepare", { title = "Prepare hosts", reads = { "facts" },
      -- finishing out of config order must not change the report
      assess = function(_, h)
        if h.name == "worker-1" then return { "write /etc/sysctl.d/99-cargoship.conf" } end
        if h.name == "ctrl-2" then return { "set vm.swappiness=0", { action = "write /etc/environment" } } end
      end }),
    S.phase(calls, "release_lock", { title = "Release exclusive host lock", reads = { "lock" } }),
    S.phase(calls, "disconnect", { title = "Disconnect from hosts", dry_run = function(_, hosts)
      local out = {}
      for i, h in ipairs(hosts) do out[i] = { host = h, actions = { "close the SSH session" } } end
      return out
    end }),
  }, { pipeline = PIPELINE })
end

local GOLDEN_DRY = [[
Dry run of cluster "lab" on 3 hosts (apply pipeline, 6 phases)
  1. Connect to hosts: ran, reads only
  3. Gather host facts: ran, reads only
  7. Acquire exclusive host lock: would act on 3 of 3 hosts
       all 3 hosts  take the lock
  8. Prepare hosts: would act on 2 of 3 hosts
       ctrl-2    set vm.swappiness=0
       ctrl-2    write /etc/environment
       worker-1  write /etc/sysctl.d/99-cargoship.conf
       (nothing to do on 1 other host)
     phases 9-29 are not in this build
 30. Release exclusive host lock: unassessed on 3 of 3 hosts
       all 3 hosts  unassessed: reads lock, which Acquire exclusive host lock would create
 31. Disconnect from hosts: own dry run
       all 3 hosts  close the SSH session
Work is pending: 2 phases would act, 1 unassessed. Nothing was changed.
Note: phases 9-29 are not in this build; this report covers only the phases above.
]]

local GOLDEN_FAILED = [[
Apply of cluster "lab" on 3 hosts (a pipeline, 3 phases)
  1. Acquire exclusive host lock: ran
       all 3 hosts  take the lock: done
  2. Validate hosts: FAILED on 2 of 3 hosts
       ctrl-1    error: hostname is not unique
       worker-1  error: no sudo
  3. Install: skipped (not reached)
Cleanup after 2. Validate hosts: done
Cleanup after 1. Acquire exclusive host lock: FAILED: ctrl-2: connection closed
Apply failed: phase 2 (Validate hosts) failed.
]]

describe("report text", function()
  it("renders a dry run in pipeline order, hosts in config order, the same every time", function()
    local a, b = report.text(dry_run_report()), report.text(dry_run_report())
    assert.are.equal(GOLDEN_DRY, a)
    assert.are.equal(a, b)
  end)

  it("renders a failed real run with the errors per host and the cleanup", function()
    local calls = {}
    local ctx = S.ctx { dry_run = false }
    local rep = S.run(ctx, {
      S.phase(calls, "lock", { title = "Acquire exclusive host lock",
        assess = function() return { "take the lock" } end,
        cleanup = function() error("ctrl-2: connection closed", 0) end }),
      S.phase(calls, "validate", { title = "Validate hosts", cleanup = function() end, dry_run = "read_only",
        run = function(c, hosts)
          c:fail(hosts[3], "no sudo")
          c:fail(hosts[1], "hostname is not unique")
        end }),
      S.phase(calls, "install", { title = "Install" }),
    })
    assert.are.equal(GOLDEN_FAILED, report.text(rep))
  end)

  it("ends a finished real run in the command's word: Applied for apply, the heading for another", function()
    local calls = {}
    local rep = S.run(S.ctx { dry_run = false }, {
      S.phase(calls, "look", { title = "Look", dry_run = "read_only", run = function() return true end }) })
    assert.are.equal("ok", rep.outcome)
    assert.matches("\nApplied: every phase finished.\n$", report.text(rep))
    local text = report.text(rep, { heading = "Kubeconfig" })
    assert.matches("\nKubeconfig: every phase finished.\n$", text)
    assert.is_nil(text:find("Applied", 1, true))
  end)

  it("says once what three or more hosts would do alike, naming a few", function()
    local hosts = {}
    for i = 1, 7 do hosts[i] = { name = "n" .. i, role = i == 1 and "controller" or "worker" } end
    local ctx = S.ctx { dry_run = true, hosts = hosts }
    local rep = S.run(ctx, { S.phase({}, "acquire_lock", { title = "Acquire exclusive host lock",
      assess = function(_, h)
        local i = tonumber(h.name:match("%d+"))
        if i == 7 then return nil end
        return { i % 2 == 1 and "take the lock at /run/lock/cargoship.lock" or "take the lock at /tmp/cargoship.lock" }
      end }) })
    local text = report.text(rep)
    assert.matches("\n       n1, n3, n5  take the lock at /run/lock/cargoship.lock\n", text, 1, true)
    assert.matches("\n       n2, n4, n6  take the lock at /tmp/cargoship.lock\n", text, 1, true)
    assert.matches("(nothing to do on 1 other host)", text, 1, true)
    assert.is_nil(text:find("n3  take", 1, true))
  end)

  it("says why a phase leaves a host alone (ctx:leave), which is not pending work", function()
    local hosts = { { name = "a", role = "controller" }, { name = "b", role = "worker" } }
    local ctx = S.ctx { dry_run = true, hosts = hosts }
    local rep = S.run(ctx, { S.phase({}, "fw", { title = "Firewall", assess = function(c, h)
      if h.name == "b" then c:leave(h, "ufw is installed but inactive") end
      return {}
    end }) })
    local text = report.text(rep)
    assert.matches("\n  1. Firewall: nothing to do\n       b  left alone: ufw is installed but inactive\n", text, 1,
      true)
    assert.is_false(rep.pending)
    local doc = require("cjson").decode(report.json(rep))
    assert.are.same({ require("cjson").null, "ufw is installed but inactive" },
      { doc.phases[1].hosts[1].left_alone, doc.phases[1].hosts[2].left_alone })
  end)

  it("lists a failure foretold (ctx:predict) under its host: pending work, exit 3, counted once per host", function()
    local hosts = { { name = "a", role = "controller" }, { name = "b", role = "worker" } }
    local ctx = S.ctx { dry_run = true, hosts = hosts }
    local rep = S.run(ctx, { S.phase({}, "validate", { title = "Validate hosts", dry_run = "read_only",
      run = function(c, hs)
        c:predict(hs[2], "cannot resolve lb.example:6443 (the load balancer): the engine could not join")
        c:predict(hs[2], "no space left for the uploads on /var (/var/lib/x): 1.0 MiB free, 2.0 MiB needed")
        return true
      end }) })
    local text = report.text(rep)
    assert.matches("\n  1. Validate hosts: ran, reads only\n       b  would fail: cannot resolve lb.example:6443"
      .. " (the load balancer): the engine could not join\n       b  would fail: no space left", text, 1, true)
    assert.matches("\nForetold: 1 host would fail later", text, 1, true)
    assert.are.same({ "pending", true, 1 }, { rep.outcome, rep.pending, rep.predicted })
    assert.are.equal(cli.EXIT.pending, report.exit_code(rep, cli.EXIT))
    local doc = require("cjson").decode(report.json(rep))
    local got = doc.phases[1].hosts
    assert.are.same({ {}, 2, 1 }, { got[1].predicted, #got[2].predicted, doc.predicted })
  end)

  it("renders a dry run that went on past a host's failure, the host not reached after it", function()
    local ctx = S.ctx { dry_run = true }
    local rep = S.run(ctx, {
      S.phase({}, "validate", { title = "Validate hosts", dry_run = "read_only", run = function(c, hosts)
        c:fail(hosts[2], "no sudo")
      end }),
      S.phase({}, "prepare", { title = "Prepare hosts", assess = function(_, h)
        if h.role == "worker" then return { "write /etc/sysctl.d/99-cargoship.conf" } end
      end }),
      S.phase({}, "leader", { title = "Apply manifests", prepare = function(c) return { c.hosts[2] } end }),
    }, { pipeline = { name = "apply", phases = { { 4, "v" }, { 8, "p" }, { 21, "m" } } } })
    assert.are.equal([[
Dry run of cluster "lab" on 3 hosts (apply pipeline, 3 phases)
  4. Validate hosts: FAILED on 1 of 3 hosts
       ctrl-2  error: no sudo
  8. Prepare hosts: would act on 1 of 2 hosts (1 not reached)
       ctrl-2    not reached: failed in phase 4 (Validate hosts)
       worker-1  write /etc/sysctl.d/99-cargoship.conf
       (nothing to do on 1 other host)
 21. Apply manifests: skipped (not reached)
       ctrl-2  not reached: failed in phase 4 (Validate hosts)
Dry run failed: phase 4 (Validate hosts) failed. ctrl-2 was left out of the phases after it failed. Nothing was changed.
]], report.text(rep))
    local doc = cjson.decode(report.json(rep))
    assert.are.equal("failed in phase 4 (Validate hosts)", doc.phases[2].hosts[2].not_reached)
    assert.are.equal(cjson.null, doc.phases[2].hosts[3].not_reached)
    assert.are.same({ "failed", "would_act", "skipped" }, { doc.phases[1].verdict, doc.phases[2].verdict,
      doc.phases[3].verdict })
    assert.are.equal("failed", doc.outcome)
    assert.are.equal(cli.EXIT.failure, report.exit_code(rep, cli.EXIT))
    assert.are.equal("would act on 1 of 2 hosts (1 not reached)", report.summary(rep.phases[2], false))
  end)

  it("says a dry run with nothing pending changed nothing and found nothing to do", function()
    local rep = S.run(S.ctx { dry_run = true }, { S.phase({}, "x", { title = "X", assess = function() end }) })
    assert.matches("\n  1. X: nothing to do\nNothing to do. Nothing was changed.\n$", report.text(rep))
  end)
end)

describe("report JSON", function()
  local function is_type(t, v, what)
    assert(type(v) == t or (t == "null" and v == cjson.null), what .. " should be " .. t .. ", is " .. tostring(v))
  end

  -- The schema of docs/dry-run.md, checked field by field.
  local function check_schema(doc)
    assert.are.equal("cargoship.report/v2", doc.schema)
    for _, k in ipairs({ "dry_run", "ok", "pending", "interrupted" }) do is_type("boolean", doc[k], k) end
    is_type("string", doc.outcome, "outcome")
    for _, k in ipairs({ "pipeline", "cluster", "run_id" }) do
      assert(doc[k] == cjson.null or type(doc[k]) == "string", k .. " should be a string or null")
    end
    is_type("number", doc.elapsed, "elapsed")
    assert(doc.error == cjson.null or type(doc.error) == "string")
    assert.is_true(({ ok = true, pending = true, failed = true, interrupted = true, not_confirmed = true,
      declined = true })[doc.outcome])
    is_type("table", doc.hosts, "hosts")
    is_type("table", doc.phases, "phases")
    is_type("table", doc.cleanup, "cleanup")
    for _, p in ipairs(doc.phases) do
      for _, k in ipairs({ "index", "number", "elapsed", "probes", "writes", "round_trips" }) do
        is_type("number", p[k], k)
      end
      for _, k in ipairs({ "id", "title", "dry_run_policy", "verdict" }) do is_type("string", p[k], k) end
      assert.is_true(({ read_only = true, own = true, reported = true })[p.dry_run_policy])
      assert.is_true(({ ran = true, own = true, would_act = true, nothing_to_do = true, unassessed = true,
        failed = true, skipped = true, interrupted = true })[p.verdict])
      for _, h in ipairs(p.hosts) do
        is_type("string", h.host, "host")
        is_type("table", h.actions, "actions")
        for _, a in ipairs(h.actions) do
          is_type("string", a.kind, "action kind")
          is_type("string", a.say, "action say")
          assert.is_nil(a.content, "an action never carries a file's content")
          if doc.dry_run then
            assert.are.equal(cjson.null, a.outcome, "a dry run's actions have no outcome")
          else
            assert.is_true(({ done = true, skipped = true, failed = true, not_run = true })[a.outcome],
              "outcome " .. tostring(a.outcome))
          end
          assert(a.error == cjson.null or (type(a.error) == "string" and a.outcome == "failed"), "action error")
        end
        assert(h.reason == cjson.null or type(h.reason) == "string")
        assert(h.error == cjson.null or type(h.error) == "string")
        assert(h.not_reached == cjson.null or type(h.not_reached) == "string")
        is_type("number", h.probes, "probes")
        is_type("number", h.writes, "writes")
        is_type("number", h.round_trips, "round_trips")
      end
    end
  end

  it("is one line of JSON that parses and follows the documented schema", function()
    local text = report.json(dry_run_report())
    assert.are.equal(1, select(2, text:gsub("\n", "")))
    local doc = cjson.decode(text)
    check_schema(doc)
    assert.is_true(doc.dry_run)
    assert.are.equal("pending", doc.outcome)
    assert.are.same({ "ctrl-1", "ctrl-2", "worker-1" }, doc.hosts)
    assert.are.same({ first = 9, last = 29, text = "phases 9-29 are not in this build" }, doc.not_in_build)
    assert.are.equal(cjson.null, doc.plan)
    local gather = doc.phases[2]
    assert.are.same({ 2, 3, "gather_facts", "read_only", "ran" },
      { gather.index, gather.number, gather.id, gather.dry_run_policy, gather.verdict })
    assert.are.same({ host = "ctrl-2", actions = {}, reason = cjson.null, left_alone = cjson.null, error = cjson.null,
      not_reached = cjson.null, probes = 1, writes = 0, round_trips = 0, predicted = {} }, gather.hosts[2])
    assert.are.equal(0, doc.predicted)
    assert.are.same({ { kind = "note", say = "set vm.swappiness=0", outcome = cjson.null, error = cjson.null },
      { kind = "note", say = "write /etc/environment", outcome = cjson.null, error = cjson.null } },
      doc.phases[4].hosts[2].actions)
    assert.are.equal("reads lock, which Acquire exclusive host lock would create", doc.phases[5].hosts[1].reason)
  end)

  it("embeds the plan in a real run's report, also when it stopped before it began", function()
    local plan = dry_run_report()
    local doc = cjson.decode(report.json(report.stopped(plan, "not_confirmed", "not a terminal")))
    check_schema(doc)
    check_schema(doc.plan)
    assert.is_false(doc.dry_run)
    assert.are.equal("not_confirmed", doc.outcome)
    assert.are.equal("skipped", doc.phases[1].verdict)
    assert.are.equal("pending", doc.plan.outcome)
  end)
end)

describe("report JSON of a real run", function()
  local action = require "cargoship.action"

  it("has the dry run's shape, each action with its outcome", function()
    local ctx = S.ctx { conn = { answers = { ["dst='/etc/b'"] = "cs-skipped\n", ["exit 9"] = { error = "boom" } } } }
    local p = S.phase({}, "files", { title = "Files", assess = function()
      return { action.write { path = "/etc/a", content = "A" }, action.write { path = "/etc/b", content = "B" },
        action.run { cmd = "exit 9" }, action.remove { path = "/etc/c" } }
    end })
    p.run = nil
    local doc = cjson.decode(report.json(S.run(ctx, { p })))
    local acts = doc.phases[1].hosts[1].actions
    assert.are.same({ "done", "skipped", "failed", "not_run" },
      { acts[1].outcome, acts[2].outcome, acts[3].outcome, acts[4].outcome })
    assert.are.same({ kind = "write", say = "write /etc/a (1 bytes)", path = "/etc/a", outcome = "done",
      error = cjson.null }, acts[1])
    assert.matches("^ctrl%-1: run exit 9: command failed %(exit 1%): boom$", acts[3].error)
  end)
end)

describe("exit codes", function()
  local E = cli.EXIT
  for _, case in ipairs({
    { true, "ok", E.ok }, { true, "pending", E.pending }, { true, "failed", E.failure },
    { true, "interrupted", E.interrupted },
    { false, "ok", E.ok }, { false, "failed", E.failure }, { false, "interrupted", E.interrupted },
    { false, "not_confirmed", E.failure }, { false, "declined", E.failure },
  }) do
    it(string.format("%s %s -> %d", case[1] and "dry run" or "real run", case[2], case[3]), function()
      assert.are.equal(case[3], report.exit_code({ dry_run = case[1], outcome = case[2] }, E))
    end)
  end
end)

-- Specs of `cargoship apply` running a pipeline of fake phases: dry run, plan and consent, reports, exit codes.
local cjson = require "cjson"
local cli = require "cargoship.cli"
local apply = require "cargoship.commands.apply"
local support = require "unit.commands.support"
local S = require "unit.pipeline.support"

local CLUSTER = S.cluster({ { name = "ctrl-1", role = "controller" }, { name = "worker-1", role = "worker" } })
CLUSTER.profiles, CLUSTER.registries = {}, {}

-- Five fake phases standing for apply's; `seen` records what ran, per pass.
local function fake_pipeline(seen, o)
  o = o or {}
  local function note(s) seen[#seen + 1] = s end
  local phases = {
    connect = { id = "connect", title = "Connect to hosts", dry_run = "read_only", creates = { "connection" },
      run = function(ctx, hosts)
        note((ctx.dry_run and "dry " or "") .. "connect")
        if o.transports then o.transports[#o.transports + 1] = ctx.transport end
        for _, h in ipairs(hosts) do h:attach(S.fake_conn()) end
      end },
    gather = { id = "gather_facts", title = "Gather host facts", dry_run = "read_only",
      run = function(ctx, hosts)
        return ctx:each(hosts, function(h)
          h.facts.hostname = h:probe("hostname")
          return true
        end)
      end },
    lock = { id = "acquire_lock", title = "Acquire exclusive host lock", creates = { "lock" },
      assess = function() return { "take the lock" } end,
      run = function(ctx, hosts)
        note("lock")
        return ctx:each(hosts, function(h)
          if o.lock_fails == h.name then
            if o.conflict then
              ctx.lock_conflicts[#ctx.lock_conflicts + 1] = h.name .. ": locked by alice (apply c.yaml), 5 s ago"
            end
            return nil, h.name .. ": lock: held by someone else"
          end
          return h:check("touch /var/lib/cargoship/lock")
        end)
      end,
      cleanup = function() note("lock cleanup") end },
    release = { id = "release_lock", title = "Release exclusive host lock", run = function() note("release") end,
      assess = function() return { "release the lock" } end },
    disconnect = { id = "disconnect", title = "Disconnect from hosts",
      assess = function() return { "close the SSH session" } end,
      dry_run = function(_, hosts)
        note("dry disconnect")
        local out = {}
        for i, h in ipairs(hosts) do out[i] = { host = h, actions = { "close the SSH session" } } end
        return out
      end,
      run = function() note("disconnect") end },
  }
  local entries = {}
  local numbers = { connect = 1, gather = 3, lock = 7, release = 30, disconnect = 31 }
  for _, key in ipairs({ "connect", "gather", "lock", "release", "disconnect" }) do
    if not (o.only_reads and (key == "lock" or key == "release")) then
      local mod = "fake.apply." .. key
      package.loaded[mod] = phases[key]
      entries[#entries + 1] = { numbers[key], mod }
    end
  end
  return { name = "apply", command = "apply", phases = entries, required = { 1, 3, 7, 30, 31 },
    not_in_build = { first = 8, last = 29, text = "phases 8-29 (...) are not in this build" } }
end

describe("apply with a pipeline", function()
  local cache, saved_pipeline, saved_read, seen
  before_each(function()
    cache = support.temp_dir()
    saved_pipeline, saved_read = apply.pipeline, apply.read_line
    seen = {}
  end)
  after_each(function()
    support.remove_tree(cache)
    apply.pipeline, apply.read_line = saved_pipeline, saved_read
    for _, k in ipairs({ "connect", "gather", "lock", "release", "disconnect" }) do
      package.loaded["fake.apply." .. k] = nil
    end
  end)

  -- cli.main with the fake cluster; tty = {stdin=, stderr=}
  local function run(argv, tty)
    local out, err = support.capture(), support.capture()
    local code
    support.with_config(support.fake_config(CLUSTER, {}), function()
      code = cli.main(argv, {
        env = function(name) return ({ XDG_CACHE_HOME = cache, HOME = cache })[name] end,
        stdout = out, stderr = err,
        isatty = { stdin = tty and tty.stdin or false, stdout = false, stderr = tty and tty.stderr or false },
        now = function() return 1700000000 end, pid = 4242,
      })
    end)
    return code, out.text(), err.text()
  end

  it("--dry-run runs the read-only phases, reports the rest, changes nothing, exits 3", function()
    apply.pipeline = fake_pipeline(seen)
    local code, out, err = run({ "apply", "--dry-run", "c.yaml" })
    assert.are.equal(3, code)
    assert.are.same({ "dry connect", "dry disconnect" }, seen)
    assert.matches('^Dry run of cluster "lab" on 2 hosts %(apply pipeline, 5 phases%)\n', out)
    assert.matches("\n  7. Acquire exclusive host lock: would act on 2 of 2 hosts\n", out, 1, true)
    assert.matches("\n     phases 8-29 (...) are not in this build\n 30. Release", out, 1, true)
    assert.matches("Work is pending: 2 phases would act, 0 unassessed. Nothing was changed.\n", out, 1, true)
    -- progress: plain lines on stderr, never on stdout
    assert.matches("phase 2/5 Gather host facts: ran %(2 hosts, %d+%.%d%d s%)\n", err)
    assert.not_matches("phase 2/5", out, 1, true)
  end)

  it("--skip-phases leaves phases out of both passes and lists them in the text and JSON reports", function()
    apply.pipeline = fake_pipeline(seen)
    local code, out = run({ "apply", "--dry-run", "--skip-phases", "7", "c.yaml" })
    assert.are.equal(cli.EXIT.usage, code)
    assert.are.equal("", out)
    apply.pipeline = fake_pipeline(seen)
    code, out = run({ "apply", "--confirm", "--skip-phases", "30", "c.yaml" })
    assert.are.equal(cli.EXIT.usage, code)
    assert.are.equal("", out)
    -- a skippable number: the fake pipeline's gather is phase 3 (required); give it one to skip
    local p = fake_pipeline(seen)
    package.loaded["fake.apply.extra"] = { id = "extra", title = "An extra phase",
      assess = function() return { "do extra" } end, run = function() seen[#seen + 1] = "extra ran" end }
    table.insert(p.phases, 4, { 12, "fake.apply.extra" })
    apply.pipeline = p
    seen = {}
    code, out = run({ "apply", "--confirm", "--skip-phases", "12", "c.yaml" })
    package.loaded["fake.apply.extra"] = nil
    assert.are.equal(0, code)
    assert.is_nil(table.concat(seen, ","):find("extra", 1, true))
    assert.matches("\n     skipped %(%-%-skip%-phases%): 12%. An extra phase\n", out)
    apply.pipeline = fake_pipeline(seen)
    local _, jout = run({ "apply", "--dry-run", "--output", "json", "c.yaml" })
    assert.are.same({}, cjson.decode(jout).skipped_phases)
  end)

  it("--skip-phases takes numbers and ranges, and refuses what is not one", function()
    local args = require "cargoship.cli.args"
    assert.are.same({ 18, 19, 20, 22, 25 }, args.checks.number_list("25,18-20,22,19"))
    assert.is_nil(args.checks.number_list("18-"))
    assert.is_nil(args.checks.number_list("20-18"))
    assert.is_nil(args.checks.number_list(""))
    local runner = require "cargoship.pipeline.runner"
    local real = require "cargoship.pipelines.apply"
    local p = assert(runner.without(real, { 18, 19, 20, 21, 22 }))
    assert.are.equal(#real.phases - 5, #p.phases)
    assert.are.same({ 18, 19, 20, 21, 22 }, { p.skipped[1][1], p.skipped[2][1], p.skipped[3][1], p.skipped[4][1],
      p.skipped[5][1] })
    local none, why = runner.without(real, { 32 })
    assert.is_nil(none)
    assert.matches("no phase 32 in this build", why, 1, true)
    none, why = runner.without(real, { 5 })
    assert.is_nil(none)
    assert.matches("phase 5 cannot be skipped", why, 1, true)
  end)

  it("--dry-run exits 0 when nothing is pending", function()
    apply.pipeline = fake_pipeline(seen, { only_reads = true })
    local code, out = run({ "apply", "--dry-run", "c.yaml" })
    assert.are.equal(0, code)
    assert.matches("Nothing to do. Nothing was changed.\n", out, 1, true)
  end)

  it("--dry-run --output json writes one JSON document to stdout and progress to stderr", function()
    apply.pipeline = fake_pipeline(seen)
    local code, out, err = run({ "apply", "--dry-run", "--output", "json", "c.yaml" })
    assert.are.equal(3, code)
    local doc = cjson.decode(out)
    assert.are.equal("pending", doc.outcome)
    assert.is_true(doc.dry_run)
    assert.are.equal(5, #doc.phases)
    assert.are.equal(1, doc.phases[2].hosts[1].probes)
    assert.matches("phase 5/5 Disconnect from hosts: own dry run", err, 1, true)
  end)

  it("without a terminal and without --confirm, shows the plan and stops before any change", function()
    apply.pipeline = fake_pipeline(seen)
    local code, out, err = run({ "apply", "c.yaml" })
    assert.are.equal(1, code)
    assert.are.same({ "dry connect", "dry disconnect" }, seen)
    assert.matches('^Plan of cluster "lab"', out)
    assert.matches("cargoship: not a terminal: re-run with --confirm to apply the plan above\n", err, 1, true)
    assert.not_matches("Proceed?", err, 1, true)
  end)

  it("--output json without consent still writes one document, with the plan", function()
    apply.pipeline = fake_pipeline(seen)
    local code, out = run({ "apply", "--output", "json", "c.yaml" })
    assert.are.equal(1, code)
    local doc = cjson.decode(out)
    assert.are.equal("not_confirmed", doc.outcome)
    assert.are.equal("pending", doc.plan.outcome)
  end)

  it("with --confirm, shows the plan and applies it without asking", function()
    apply.pipeline = fake_pipeline(seen)
    apply.read_line = function() error("must not ask") end
    local code, out, err = run({ "apply", "--confirm", "c.yaml" }, { stdin = true })
    assert.are.equal(0, code)
    assert.are.same({ "dry connect", "dry disconnect", "connect", "lock", "release", "disconnect" }, seen)
    assert.matches('^Plan of cluster "lab".*\nApply of cluster "lab" on 2 hosts', out)
    assert.matches("\n  7. Acquire exclusive host lock: ran\n", out, 1, true)
    assert.matches("Applied: every phase finished.\n", out, 1, true)
    assert.not_matches("Proceed?", err, 1, true)
  end)

  -- a login is several round trips: the run that follows its plan at once reuses the plan's
  -- sessions (transport:keep); one that waited for an answer logs in again
  it("with --confirm, runs over the plan's transport (its sessions kept); after a question, a new one", function()
    local transports = {}
    apply.pipeline = fake_pipeline(seen, { transports = transports })
    apply.read_line = function() error("must not ask") end
    assert.are.equal(0, (run({ "apply", "--confirm", "c.yaml" }, { stdin = true })))
    assert.are.equal(2, #transports)
    assert.are.equal(transports[1], transports[2])
    assert.is_nil(transports[1].spare, "closed at the end, spares included")
    transports = {}
    apply.pipeline = fake_pipeline({}, { transports = transports })
    apply.read_line = function() return "y" end
    assert.are.equal(0, (run({ "apply", "c.yaml" }, { stdin = true })))
    assert.are_not.equal(transports[1], transports[2])
  end)

  it("on a terminal asks, and applies on yes", function()
    apply.pipeline = fake_pipeline(seen)
    apply.read_line = function() return "y" end
    local code, _, err = run({ "apply", "c.yaml" }, { stdin = true })
    assert.are.equal(0, code)
    assert.matches("Proceed? [y/N] ", err, 1, true)
    assert.are.same({ "dry connect", "dry disconnect", "connect", "lock", "release", "disconnect" }, seen)
  end)

  for _, answer in ipairs({ "n", "", "yess", false }) do
    it("on a terminal stops on the answer " .. string.format("%q", tostring(answer)), function()
      apply.pipeline = fake_pipeline(seen)
      apply.read_line = function() return answer or nil end
      local code, _, err = run({ "apply", "c.yaml" }, { stdin = true })
      assert.are.equal(1, code)
      assert.matches("cargoship: not applied: the answer was not yes\n", err, 1, true)
      assert.are.same({ "dry connect", "dry disconnect" }, seen)
    end)
  end

  it("a failing real run exits 1, cleans up the lock and reports the host", function()
    apply.pipeline = fake_pipeline(seen, { lock_fails = "worker-1" })
    local code, out = run({ "apply", "--confirm", "c.yaml" })
    assert.are.equal(1, code)
    assert.are.same({ "dry connect", "dry disconnect", "connect", "lock", "lock cleanup" }, seen)
    assert.matches("\n  7. Acquire exclusive host lock: FAILED on 1 of 2 hosts\n"
      .. "       ctrl-1    take the lock: done\n"
      .. "       worker-1  take the lock: FAILED\n"
      .. "       worker-1  error: lock: held by someone else\n", out, 1, true)
    assert.matches("\n 30. Release exclusive host lock: skipped (not reached)\n", out, 1, true)
    assert.matches("Cleanup after 7. Acquire exclusive host lock: done\n", out, 1, true)
  end)

  it("exits 4 when another cargoship holds a host lock", function()
    apply.pipeline = fake_pipeline(seen, { lock_fails = "ctrl-1", conflict = true })
    local code = run({ "apply", "--confirm", "c.yaml" })
    assert.are.equal(cli.EXIT.locked, code)
  end)

  it("--confirm --output json reports the real run with its plan", function()
    apply.pipeline = fake_pipeline(seen)
    local code, out = run({ "apply", "--confirm", "--output", "json", "c.yaml" })
    assert.are.equal(0, code)
    local doc = cjson.decode(out)
    assert.is_false(doc.dry_run)
    assert.are.equal("ok", doc.outcome)
    assert.are.equal("ran", doc.phases[3].verdict)
    assert.are.equal(1, doc.phases[3].hosts[1].writes)
    assert.is_true(doc.plan.dry_run)
  end)

  it("refuses (internal error) a phase that breaks the contract, touching no host", function()
    apply.pipeline = fake_pipeline(seen)
    package.loaded["fake.apply.lock"].dry_run = "own"
    local code, _, err = run({ "apply", "--dry-run", "c.yaml" })
    assert.are.equal(70, code)
    assert.matches("fake.apply.lock: phase 3 (acquire_lock): `dry_run` = \"own\" declares nothing", err, 1, true)
    assert.are.same({}, seen)
  end)

  it("--help says every phase is in this build, what a dry run does, consent and exit codes", function()
    local code, out = support.run({ "apply", "--help" })
    assert.are.equal(0, code)
    assert.matches("all 31 phases", out, 1, true)
    assert.matches("26-27 (sync the engine config files", out, 1, true)
    assert.is_nil(out:find("not in this build", 1, true))
    -- and the pipeline has exactly those numbers, with no gap for the report to name
    local pipeline = require("cargoship.pipelines.apply")
    local have = {}
    for i, entry in ipairs(pipeline.phases) do have[i] = entry[1] end
    for n = 1, 31 do assert.are.equal(n, have[n]) end
    assert.is_nil(pipeline.not_in_build)
    assert.matches("--drain-timeout DURATION", out, 1, true)
    assert.matches("--skip-phases LIST", out, 1, true)
    assert.matches("At most --concurrent-uploads hosts upload at once (default 8", out, 1, true)
    assert.matches("-F, --firewall", out, 1, true)
    assert.matches("(also --update-firewall)", out, 1, true)
    assert.matches("-H, --hosts", out, 1, true)
    assert.matches("-f, --fapolicyd", out, 1, true)
    assert.matches("takes no host lock", out, 1, true)
    assert.matches("--confirm is needed", out, 1, true)
    assert.matches("3 work is pending", out, 1, true)
  end)
end)

-- Specs of the shared command path: a second pipeline command gets apply's dry run, consent, lock and reports.
--
-- "reset" below is what every later pipeline command will be: a pipeline module (data) and a
-- thin command module over cargoship.cli.pipeline. Its phases are fakes except the real lock
-- phases (7 and 30), whose lock.acquire is stood in for, so the holder record they would
-- write can be read back.
local cjson = require "cjson"
local cli = require "cargoship.cli"
local command_path = require "cargoship.cli.pipeline"
local lock = require "cargoship.lock"
local support = require "unit.commands.support"
local S = require "unit.pipeline.support"

local CLUSTER = S.cluster({ { name = "ctrl-1", role = "controller" }, { name = "worker-1", role = "worker" } })
CLUSTER.profiles, CLUSTER.registries = {}, {}

local STAGED  -- the local file phase 3 staged, as uploads stage a host's inline data

-- The reset pipeline: connect (1), look (3), lock (7), wipe (12), unlock (30), disconnect (31).
-- Unlike apply's, its required phases are 1, 7, 30 and 31: phase 3 may be skipped here.
local function reset_pipeline(seen)
  local function note(s) seen[#seen + 1] = s end
  local phases = {
    connect = { id = "connect", title = "Connect to hosts", dry_run = "read_only",
      run = function(ctx, hosts)
        note((ctx.dry_run and "dry " or "") .. "connect")
        for _, h in ipairs(hosts) do h:attach(S.fake_conn()) end
      end },
    look = { id = "look", title = "Look at the engine", dry_run = "read_only",
      run = function(ctx)
        note((ctx.dry_run and "dry " or "") .. "look")
        -- as the upload phases stage a host's inline `data:` file (phases/lib/uploads.lua)
        STAGED = require("cargoship.package.staging").data_file("token: s3cret\n")
      end },
    wipe = { id = "wipe", title = "Remove the engine", creates = { "wiped" },
      assess = function() return { "remove the engine" } end,
      run = function() note("wipe") end },
    disconnect = { id = "disconnect", title = "Disconnect from hosts", dry_run = "read_only",
      run = function(ctx) note((ctx.dry_run and "dry " or "") .. "disconnect") end },
  }
  local entries = {}
  for _, e in ipairs({ { 1, "connect" }, { 3, "look" }, { 7, "cargoship.phases.acquire_lock" }, { 12, "wipe" },
    { 30, "cargoship.phases.release_lock" }, { 31, "disconnect" } }) do
    local mod = e[2]
    if phases[mod] then
      mod = "fake.reset." .. e[2]
      package.loaded[mod] = phases[mod:match("[^.]+$")]
    end
    entries[#entries + 1] = { e[1], mod }
  end
  return { name = "reset", command = "reset", phases = entries, required = { 1, 7, 30, 31 },
    required_why = "connect, lock, unlock and disconnect" }
end

-- The thin command: options and the pipeline; the shared path does everything else.
local function reset_command(pipeline)
  local M = { name = "reset", summary = "reset a cluster's hosts", usage = "Usage: cargoship reset CLUSTER",
    keeps_log = true, verb = "reset", verb_done = "reset", heading = "Reset", pipeline = pipeline }
  M.options = {
    { long = "dry-run", help = "report, change nothing" },
    { long = "confirm", help = "go ahead without asking" },
    { long = "output", value = "FORMAT", check = { "text", "json" }, default = "text", help = "text or json" },
    { long = "skip-phases", value = "LIST", check = require("cargoship.cli.args").checks.number_list,
      help = "leave out phases" },
  }
  M.arguments = { { name = "CLUSTER" } }
  function M.run(ctx, a)
    local o = a.options
    return command_path.run(ctx, M, { cluster_file = a.positional[1], dry_run = o.dry_run, confirm = o.confirm,
      output = o.output, skip_phases = o.skip_phases, concurrency = 10, known_hosts = "/dev/null" })
  end
  return M
end

describe("the shared command path, walking a second pipeline", function()
  local cache, seen, taken, saved, cmd
  before_each(function()
    cache = support.temp_dir()
    seen, taken = {}, {}
    saved = { acquire = lock.acquire, read = lock.read, commands = cli.COMMANDS }
    cmd = reset_command(reset_pipeline(seen))
    package.loaded["cargoship.commands.reset"] = cmd
    cli.COMMANDS = { table.unpack(saved.commands) }
    cli.COMMANDS[#cli.COMMANDS + 1] = "reset"
    lock.read = function() return nil end
    lock.acquire = function(host, info)
      taken[#taken + 1] = host.name .. " " .. tostring(info.command)
      if info.conflict_on == host.name then return nil, host.name .. ": locked by someone", "locked" end
      return { path = "/run/cargoship/lock", release = function() seen[#seen + 1] = "release " .. host.name
        return true end, firm = function() return true end }
    end
  end)
  after_each(function()
    support.remove_tree(cache)
    lock.acquire, lock.read, cli.COMMANDS = saved.acquire, saved.read, saved.commands
    package.loaded["cargoship.commands.reset"] = nil
    for _, k in ipairs({ "connect", "look", "wipe", "disconnect" }) do package.loaded["fake.reset." .. k] = nil end
  end)

  local function run(argv, tty)
    local out, err = support.capture(), support.capture()
    local code
    support.with_config(support.fake_config(CLUSTER, {}), function()
      code = cli.main(argv, {
        env = function(name) return ({ XDG_CACHE_HOME = cache, HOME = cache, USER = "ops" })[name] end,
        stdout = out, stderr = err,
        isatty = { stdin = tty or false, stdout = false, stderr = false },
        now = function() return 1700000000 end, pid = 4242,
      })
    end)
    return code, out.text(), err.text()
  end

  it("--dry-run reports its own pipeline, takes no lock and exits 3 while work is pending", function()
    local code, out = run({ "reset", "--dry-run", "c.yaml" })
    assert.are.equal(3, code)
    assert.matches('^Dry run of cluster "lab" on 2 hosts %(reset pipeline, 6 phases%)\n', out)
    assert.matches("\n 12. Remove the engine: would act on 2 of 2 hosts\n", out, 1, true)
    assert.are.same({ "dry connect", "dry look", "dry disconnect" }, seen)
    assert.are.same({}, taken)
  end)

  it("stops before any change without --confirm off a terminal, and on a no at the terminal", function()
    local code, out, err = run({ "reset", "c.yaml" })
    assert.are.equal(1, code)
    assert.matches('^Plan of cluster "lab"', out)
    assert.matches("cargoship: not a terminal: re-run with --confirm to reset the plan above\n", err, 1, true)
    cmd.read_line = function() return "n" end
    code, out, err = run({ "reset", "c.yaml" }, true)
    assert.are.equal(1, code)
    assert.matches("Proceed? [y/N] ", err, 1, true)
    assert.matches('^Plan of cluster "lab"', out)
    assert.matches("cargoship: not reset: the answer was not yes\n", err, 1, true)
    assert.is_nil(table.concat(seen, ","):find("wipe", 1, true))
    assert.are.same({}, taken)
  end)

  it("with --confirm, locks every host in the reset command's name, runs, and reports as JSON", function()
    local code, out = run({ "reset", "--confirm", "--output", "json", "c.yaml" })
    assert.are.equal(0, code)
    assert.are.same({ "reset c.yaml", "reset c.yaml" }, { taken[1]:match(" (.*)"), taken[2]:match(" (.*)") })
    local doc = cjson.decode(out)
    assert.are.equal("reset", doc.pipeline)
    assert.is_false(doc.dry_run)
    assert.are.equal("ok", doc.outcome)
    assert.is_true(doc.plan.dry_run)
    assert.are.equal("ran", doc.phases[4].verdict)
    assert.is_truthy(table.concat(seen, ","):find("wipe,release ", 1, true))
    code, out = run({ "reset", "--confirm", "c.yaml" })
    assert.are.equal(0, code)
    assert.matches('\nReset of cluster "lab" on 2 hosts %(reset pipeline, 6 phases%)\n', out)
  end)

  it("leaves no staged inline data behind, whether the run was a dry run, went through or failed", function()
    local function gone(path) local f = io.open(path) if f then f:close() end return f == nil end
    for _, argv in ipairs { { "reset", "--dry-run", "c.yaml" }, { "reset", "--confirm", "c.yaml" },
                           { "reset", "c.yaml" } } do
      STAGED = nil
      run(argv)
      assert.is_string(STAGED, table.concat(argv, " "))
      assert.is_true(gone(STAGED), table.concat(argv, " ") .. ": " .. STAGED .. " left")
      assert.is_true(gone((STAGED:match("^(.*)/"))), table.concat(argv, " ") .. ": its directory left")
    end
  end)

  it("exits 4 when another cargoship holds a host lock", function()
    local real = lock.acquire
    lock.acquire = function(host, info)
      if host.name == "worker-1" then info.conflict_on = "worker-1" end
      return real(host, info)
    end
    local code, _, err = run({ "reset", "--confirm", "c.yaml" })
    assert.are.equal(cli.EXIT.locked, code)
    assert.matches("worker-1: locked by someone", err, 1, true)
  end)

  it("takes its required phases from the pipeline, not apply's numbers", function()
    local code, _, err = run({ "reset", "--dry-run", "--skip-phases", "7", "c.yaml" })
    assert.are.equal(cli.EXIT.usage, code)
    assert.matches("phase 7 cannot be skipped (phases 1, 7 and 30-31 connect, lock, unlock and disconnect)", err, 1,
      true)
    -- phase 3 is required in apply; this pipeline lets it go
    local out
    code, out = run({ "reset", "--dry-run", "--skip-phases", "3", "c.yaml" })
    assert.are.equal(3, code)
    assert.matches("\n     skipped %(%-%-skip%-phases%): 3%. Look at the engine\n", out)
    assert.are.same({ "dry connect", "dry disconnect" }, seen)
  end)
end)

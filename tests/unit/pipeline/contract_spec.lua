-- Specs of the phase contract, and the contract check of every phase module apply's pipeline lists.
local config = require "cargoship.config"
local contract = require "cargoship.pipeline.contract"
local context = require "cargoship.pipeline.context"
local host_mod = require "cargoship.host"
local log = require "cargoship.log"
local loop = require "cargoship.loop"
local os_registry = require "cargoship.os"
local packages = require "unit.phases.packages"
local phase_support = require "unit.phases.support"
local S = require "unit.pipeline.support"

local function problems_of(phase)
  local ok, list = contract.check(phase)
  if ok then return {} end
  return list
end

local function good(extra)
  local p = { id = "gather_facts", title = "Gather host facts", run = function() end, assess = function() end }
  for k, v in pairs(extra or {}) do
    if v == "nil" then p[k] = nil else p[k] = v end
  end
  return p
end

describe("contract.check", function()
  it("accepts the three dry-run policies", function()
    assert.is_true(contract.check(good()))
    assert.is_true(contract.check(good { run = "nil" }), "a phase with assess may leave running it to the runner")
    assert.is_true(contract.check(good { steps = { drain = function() end } }))
    assert.is_true(contract.check(good { dry_run = "read_only", reads = { "connection" }, creates = { "facts" },
      prepare = function() end, assess = function() end, cleanup = function() end }))
    assert.is_true(contract.check(good { dry_run = function() end }))
    assert.are.equal("reported", contract.policy(good()))
    assert.are.equal("read_only", contract.policy(good { dry_run = "read_only" }))
    assert.are.equal("own", contract.policy(good { dry_run = function() end }))
  end)

  for _, case in ipairs({
    { "no id", { id = false }, "`id` must be a snake_case string, not boolean" },
    { "a bad id", { id = "Gather-Facts" }, '`id` must be a snake_case string, not "Gather-Facts"' },
    { "no title", { title = "" }, "`title` must be a non-empty string" },
    { "a bad dry_run", { dry_run = "readonly" }, '`dry_run` must be "read_only", a function (its own dry-run '
      .. 'path) or absent, not "readonly"' },
    { "dry_run true", { dry_run = true }, "or absent, not a boolean" },
    { 'dry_run "own" without its path', { dry_run = "own" }, '`dry_run` = "own" declares nothing to run' },
    { "no run", { run = false }, "`run` must be a function, not a boolean" },
    { "run missing from a read-only phase", { run = "nil", dry_run = "read_only" },
      "`run` is missing (a function): a read-only phase does its reads in run" },
    { "assess missing from a phase that is not read-only", { assess = "nil" }, "`assess` is missing (a function)" },
    { "assess missing from a phase with its own dry run", { assess = "nil", dry_run = function() end },
      "`assess` is missing (a function)" },
    { "steps that are not a table", { steps = "drain" }, "`steps` must be a table of functions, not a string" },
    { "a step that is not a function", { steps = { drain = true } }, "`steps`.drain must be a function" },
    { "a prepare that is not a function", { prepare = {} }, "`prepare` must be a function, not a table" },
    { "an assess that is not a function", { assess = "x" }, "`assess` must be a function, not a string" },
    { "a cleanup that is not a function", { cleanup = 1 }, "`cleanup` must be a function, not a number" },
    { "reads not a list", { reads = "facts" }, "`reads` must be a list of state names, not a string" },
    { "reads with a number", { reads = { "facts", 3 } }, "`reads`[2] must be a state name (a word), not a number" },
    { "creates with a key", { creates = { lock = true } }, "`creates` must be a list, it has the key lock" },
    { "creates with a phrase", { creates = { "the lock" } },
      '`creates`[1] must be a state name (a word), not "the lock"' },
    { "a misspelt cleanup", { cleanUp = function() end }, "`cleanUp` is not a phase field; did you mean `cleanup`?" },
    { "a misspelt dry_run", { dryrun = "read_only" }, "`dryrun` is not a phase field; did you mean `dry_run`?" },
  }) do
    it("refuses " .. case[1], function()
      local p = good()
      for k, v in pairs(case[2]) do
        if v == "nil" then p[k] = nil else p[k] = v end
      end
      local list = problems_of(p)
      local found = false
      for _, msg in ipairs(list) do
        if msg:find(case[3], 1, true) then found = true end
      end
      assert(found, "expected a problem like " .. case[3] .. ", got: " .. table.concat(list, " | "))
    end)
  end

  it("refuses something that is not a table", function()
    assert.are.same({ "a phase must be a table, not a string" }, problems_of("connect"))
  end)

  it("check_all names each problem by position and id, and refuses an id used twice", function()
    local ok, list = contract.check_all({ good(), good { title = "" }, good() })
    assert.is_nil(ok)
    assert.are.same({
      "phase 2 (gather_facts): `title` must be a non-empty string (the title in apply-phases.txt)",
      "phase 3 (gather_facts): id already used by phase 1",
    }, list)
  end)
end)

-- ---- the phase modules of apply ----------------------------------------------------------

-- spec/apply-phases.txt: number -> title and dry-run policy
local SPEC = {
  [1] = { "Connect to hosts", "read_only" },
  [2] = { "Detect host operating systems", "read_only" },
  [3] = { "Gather host facts", "read_only" },
  [4] = { "Validate hosts", "read_only" },
  [5] = { "Gathering facts about the distro installed", "read_only" },
  [6] = { "Checking for nodes no longer in the config", "read_only" },
  [7] = { "Acquire exclusive host lock", "reported" },
  [8] = { "Prepare hosts", "reported" },
  [9] = { "Prepare hosts - Enterprise Linux support", "reported" },
  [10] = { "Prepare hosts - Enterprise Linux support - Fapolicyd", "reported" },
  [11] = { "Prepare hosts - Enterprise Linux support - SELinux policy", "reported" },
  [12] = { "Updating hosts file for clusters nodes", "reported" },
  [13] = { "Updating hosts firewall", "reported" },
  [14] = { "Upload files to hosts", "reported" },
  [15] = { "Upload files to hosts – RPM", "reported" },
  [16] = { "Upload files to hosts – APT", "reported" },
  [17] = { "Upload files to hosts – Binaries", "reported" },
  [18] = { "Import images", "reported" },
  [19] = { "Configure engine", "reported" },
  [20] = { "Initialize Controller", "reported" },
  [21] = { "Apply manifests", "reported" },
  [22] = { "Initialize Worker", "reported" },
  [23] = { "Upgrade Controller", "reported" },
  [24] = { "Upgrade Worker", "reported" },
  [25] = { "Install staged files", "reported" },
  [26] = { "Sync Registry Config Controller", "reported" },
  [27] = { "Sync Registry Config Worker", "reported" },
  [28] = { "Updating kubeconfig file with the current cluster", "reported" },
  [29] = { "Labeling nodes with their profile group", "reported" },
  [30] = { "Release exclusive host lock", "reported" },
  [31] = { "Disconnect from hosts", "own" },
}

local function exists(name)
  return package.loaded[name] ~= nil or package.searchpath(name, package.path) ~= nil
end

-- The apply context a phase sees after the read-only phases, built as apply builds it: the
-- cluster through the real loader (config.load_string), the package built by `package create`
-- and read by the real reader (tests/fixtures/packages/upstream: files, images, manifests),
-- the engine from it (context.new), and each host with the facts phases 1-6 leave. Every
-- write a host is asked for is recorded, then raised; every probe of a batch answers exit 127
-- (a missing tool) and any other read "" with exit 0 (unit.phases.support's connection).
local CLUSTER = [[
apiVersion: zarf.dev/v1alpha1
kind: ZarfCluster
metadata: {name: contract}
spec:
  config: {loadbalancer: 192.0.2.10}
  hosts:
    - {role: controller, ssh: {address: 192.0.2.10, user: root}}
    - {role: controller, ssh: {address: 192.0.2.11, user: root}}
    - {role: worker, ssh: {address: 192.0.2.20, user: root}}
]]

local function guarded_ctx(writes)
  local logger = log.new { level = "quiet", stream = S.capture() }
  local cluster = assert(config.load_string(CLUSTER, "contract.yaml"))
  local hosts = {}
  for i, cfg in ipairs(cluster.hosts) do
    local h = host_mod.new { config = cfg, dry_run = false }
    local conn = phase_support.conn({})
    conn.check = function(_, cmd) writes[#writes + 1] = h.name .. ": conn:check " .. cmd error("write", 0) end
    conn.upload = function(_, _, dst) writes[#writes + 1] = h.name .. ": conn:upload " .. dst error("write", 0) end
    h:attach(conn)
    for _, m in ipairs({ "run", "check", "write_file", "upload", "remove" }) do
      h[m] = function(_, what)
        writes[#writes + 1] = string.format("%s: %s %s", h.name, m, tostring(what))
        error("write", 0)
      end
    end
    h.os = assert(os_registry.by_name("debian")):new { service_manager = "systemd" }
    local f = h.facts
    f.hostname, f.node_name, f.private_address = "node-" .. i, "node-" .. i, cfg.connection.address
    f.arch, f.machine, f.kernel, f.init, f.service_manager = "amd64", "x86_64", "6.1.0", "systemd", "systemd"
    f.os = { id = "debian", version_id = "12", name = "Debian GNU/Linux", pretty_name = "Debian GNU/Linux 12" }
    f.engines = {}
    f.engine = { type = "upstream", running = false, action = "install" }
    hosts[i] = h
  end
  return context.new { cluster = cluster, options = { concurrency = 30 }, log = logger, dry_run = false,
    hosts = hosts, run_id = "contract-spec", distro = packages.of("upstream") }
end

-- A host's error names the host; a Lua error (a nil indexed, a bad call) does not: it fails.
local function host_error(ctx, err)
  if type(err) ~= "string" then return false end
  if err == "write" then return true end
  for _, h in ipairs(ctx.hosts) do
    if err:sub(1, #h.name + 1) == h.name .. ":" then return true end
  end
  return false
end

-- Runs a phase's prepare and assess on the guarded context -> the writes asked for, the
-- errors that are not a host's (each "where: message").
local function only_reads(phase)
  local writes, errors = {}, {}
  local ok, err = loop.run(function()
    local ctx = guarded_ctx(writes)
    local hosts = ctx.hosts
    if phase.prepare then
      local pok, list = pcall(phase.prepare, ctx)
      if not pok and not host_error(ctx, list) then errors[#errors + 1] = "prepare: " .. tostring(list) end
      if pok and type(list) == "table" and #list > 0 then hosts = list end
    end
    if phase.assess then
      for _, h in ipairs(hosts) do
        local aok, aerr = pcall(phase.assess, ctx, h)
        if not aok and not host_error(ctx, aerr) then
          errors[#errors + 1] = "assess " .. h.name .. ": " .. tostring(aerr)
        end
      end
    end
  end)
  if not ok then errors[#errors + 1] = "loop: " .. tostring(err) end
  return writes, errors
end

-- the fixture package's temp files go when the whole file is done (several blocks build it)
teardown(packages.release)

describe("the read-only check of prepare and assess", function()
  local base = { id = "probe_only", title = "Probe only" }

  it("passes a phase that only reads", function()
    local phase = setmetatable({ assess = function(_, h) h:probe("cat /etc/os-release") return {} end },
      { __index = base })
    assert.are.same({ {}, {} }, { only_reads(phase) })
  end)

  it("turns red for an assess that writes", function()
    local phase = setmetatable({ assess = function(_, h) h:run("touch /etc/x") return {} end }, { __index = base })
    local writes = only_reads(phase)
    assert.are.equal(3, #writes, "one write per host")
    assert.matches("run touch /etc/x", writes[1], 1, true)
  end)

  it("turns red for a prepare that writes", function()
    local phase = setmetatable({ prepare = function(ctx) ctx.hosts[1]:write_file("/etc/x") return {} end,
      assess = function() return {} end }, { __index = base })
    assert.are.equal(1, #(only_reads(phase)))
  end)

  it("turns red for a Lua error, but not for a host's error", function()
    local broken = setmetatable({ assess = function(ctx) return ctx.nothing.here end }, { __index = base })
    local _, errors = only_reads(broken)
    assert.are.equal(3, #errors)
    assert.matches("attempt to index", errors[1], 1, true)
    local failing = setmetatable({ assess = function(_, h) error(h.name .. ": cannot read it", 0) end },
      { __index = base })
    assert.are.same({ {}, {} }, { only_reads(failing) })
  end)
end)

-- Every pipeline module under lua/cargoship/pipelines/, found by listing the directory: a
-- pipeline added later is checked without anyone adding it here.
local function pipeline_modules()
  local dir = (os.getenv("CARGOSHIP_SOURCE_DIR") or ".") .. "/lua/cargoship/pipelines"
  local p = assert(io.popen("ls -1 " .. require("cargoship.util").quote(dir)))
  local out = {}
  for f in p:lines() do
    local name = f:match("^([%w_]+)%.lua$")
    if name then out[#out + 1] = "cargoship.pipelines." .. name end
  end
  p:close()
  table.sort(out)
  return out
end

describe("every pipeline", function()
  local modules = pipeline_modules()

  it("is found by listing the directory (apply among them)", function()
    local found = false
    for _, m in ipairs(modules) do if m == "cargoship.pipelines.apply" then found = true end end
    assert.is_true(found, "pipelines found: " .. table.concat(modules, ", "))
  end)

  for _, mod in ipairs(modules) do
    describe(mod, function()
      local pipeline = require(mod)

      it("is one ordered list of {number, module}, numbers rising", function()
        assert.is_nil(pipeline.numbers, "no parallel numbers array: the number is in each entry")
        local last = -math.huge
        for i, entry in ipairs(pipeline.phases) do
          assert.are.equal("table", type(entry), "entry " .. i)
          assert.are.equal("integer", math.type(entry[1]), "entry " .. i .. " number")
          assert.are.equal("string", type(entry[2]), "entry " .. i .. " module")
          assert.is_true(entry[1] > last, "entry " .. i .. " numbered out of order")
          last = entry[1]
        end
      end)

      it("has every phase read only what an earlier phase creates", function()
        local created, problems = {}, {}
        for _, entry in ipairs(pipeline.phases) do
          if exists(entry[2]) then
            local phase = require(entry[2])
            for _, r in ipairs(phase.reads or {}) do
              if not created[r] then
                problems[#problems + 1] = string.format("%s (%d) reads %s, which no earlier phase creates",
                  phase.id, entry[1], r)
              end
            end
            for _, c in ipairs(phase.creates or {}) do created[c] = true end
          end
        end
        assert(#problems == 0, table.concat(problems, "\n"))
      end)

      it("has every phase keep the contract: assess unless read-only", function()
        local problems = {}
        for _, entry in ipairs(pipeline.phases) do
          if exists(entry[2]) then
            local ok, list = contract.check(require(entry[2]))
            if not ok then problems[#problems + 1] = entry[2] .. ": " .. table.concat(list, "; ") end
          end
        end
        assert(#problems == 0, table.concat(problems, "\n"))
      end)
    end)
  end
end)

describe("every phase file (lua/cargoship/phases, contrib/phases)", function()
  local src = os.getenv("CARGOSHIP_SOURCE_DIR") or "."
  local FORBIDDEN = {
    { "%.conn%f[^%w_]", "host.conn: phases call host methods" },
    { "ctx%.transport", "ctx.transport: the command owns the transport" },
    { "ctx%.state", "ctx.state: built-in phases use the context's declared fields" },
    { "lock_lost", "lock_lost: a lost host is reported through ctx:host_lost" },
  }
  for _, dir in ipairs { "lua/cargoship/phases", "contrib/phases" } do
    local p = assert(io.popen("ls -1 " .. require("cargoship.util").quote(src .. "/" .. dir)))
    for f in p:lines() do
      if f:match("%.lua$") then
        it(dir .. "/" .. f .. " reaches hosts through host methods and declared context fields only", function()
          local text = assert(io.open(src .. "/" .. dir .. "/" .. f)):read("a")
          for _, rule in ipairs(FORBIDDEN) do
            assert.is_nil(text:find(rule[1]), dir .. "/" .. f .. " uses " .. rule[2])
          end
          local lines = select(2, text:gsub("\n", ""))
          assert.is_true(lines <= 160, dir .. "/" .. f .. " has " .. lines .. " lines; phases stay under ~150")
        end)
      end
    end
    p:close()
  end
end)

describe("apply's phase modules", function()
  local pipeline = require "cargoship.pipelines.apply"

  it("number each phase as the spec does", function()
    for _, entry in ipairs(pipeline.phases) do
      assert.is_not_nil(SPEC[entry[1]], "no phase " .. entry[1] .. " in the spec")
    end
  end)

  it("all exist in this build", function()
    local missing = {}
    for _, entry in ipairs(pipeline.phases) do
      if not exists(entry[2]) then missing[#missing + 1] = entry[2] end
    end
    assert(#missing == 0, "phase modules missing from this build: " .. table.concat(missing, ", "))
  end)

  for _, entry in ipairs(pipeline.phases) do
    local number, name = entry[1], entry[2]
    it(name .. " keeps the phase contract and the spec's title and policy (phase " .. number .. ")", function()
      if not exists(name) then
        pending(name .. " is not in this build yet (the spec above fails for it)")
        return
      end
      local phase = require(name)
      local ok, problems = contract.check(phase)
      assert(ok, name .. ": " .. table.concat(problems or {}, "; "))
      assert.are.equal(SPEC[number][1], phase.title)
      assert.are.equal(SPEC[number][2], contract.policy(phase))
    end)

    it(name .. ": prepare and assess only read", function()
      if not exists(name) then
        pending(name .. " is not in this build yet (the spec above fails for it)")
        return
      end
      local writes, errors = only_reads(require(name))
      assert(#writes == 0, name .. " wrote in prepare/assess: " .. table.concat(writes, "; "))
      assert(#errors == 0, name .. " failed in prepare/assess, not on a host: " .. table.concat(errors, "; "))
    end)
  end
end)

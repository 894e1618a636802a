-- Fixture-driven phase specs, pyinfra style: a host's facts (probe answers) in, action records out, no SSH.
--
-- tests/fixtures/phases/<phase id>/<case>.json, one directory per phase id:
--   description  what the case shows
--   module       the phase module ("cargoship.phases.acquire_lock"), or
--   file         a custom phase file, loaded as apply loads it (contrib/phases/motd.lua)
--   host         {name, role, facts, config, os}: the host entry, the facts earlier phases
--                found, config = fields of the normalized host entry (environment, host =
--                {ports, firewall}, connection), os = an OS configurer id ("rocky")
--   peers        other hosts of the run, {name, role, facts}: not probed, only seen
--   ctx          context fields: dry_run (default true), cluster, locks, leader, options,
--                engine_type (alone: ctx.engine is that engine's class), join_secret, ...;
--                package = the name of a directory under
--                tests/fixtures/packages holding a distro.yaml (+ its files and images): the
--                spec builds it with `package create` and reads the archive with the real
--                reader, once per run, as ctx.distro (and ctx.engine from it);
--                a phase that reads only spec.config.os names a package too (os-*)
--   probes       answers to host:probes keys: a string (stdout, exit 0), {out, code}, or
--                {fixture = "os-release/debian-12"} (a file under tests/fixtures)
--   commands     answers to any other command: {match = substring, out, code}; a command
--                no entry matches fails the case, so a fixture lists every round trip
--   actions      the records assess returns, as action.public() shows them, plus `content`
--                where the case pins a write's bytes; [] for none
--   facts        for a read-only phase: host.facts after run (a subset, compared deeply)
--   error        for a read-only phase: the failure run reports on the host; for another
--                phase: the error assess raises on the host
--   left_alone   the sentence ctx:leave gave for the host (a phase that leaves it alone)
-- Every host is a dry-run host: a phase that writes in assess (or in a read-only run) fails.
local cjson = require "cjson"
local action = require "cargoship.action"
local custom = require "cargoship.pipeline.custom"
local loop = require "cargoship.loop"
local os_registry = require "cargoship.os"
local packages = require "unit.phases.packages"
local support = require "unit.phases.support"

local SRC = os.getenv("CARGOSHIP_SOURCE_DIR") or "."
local DIR = SRC .. "/tests/fixtures/phases"

local function ls(dir)
  local p = assert(io.popen("ls -1 " .. require("cargoship.util").quote(dir)))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

local function read(path) return (assert(require("unit.files").read(path), path .. ": cannot be read")) end

-- cjson's null and floats back to what Lua code compares with
local function plain(v)
  if v == cjson.null then return nil end
  if math.type(v) == "float" and math.tointeger(v) then return math.tointeger(v) end
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = plain(x) end
  return out
end

local function answers_of(case)
  local a = {}
  for key, v in pairs(case.probes or {}) do
    if type(v) == "table" and v.fixture then a[key] = support.fixture(v.fixture)
    else a[key] = v end
  end
  a[1] = function(cmd)
    for _, c in ipairs(case.commands or {}) do
      if cmd:find(c.match, 1, true) then return c.out or "", "", c.code or 0 end
    end
    return nil, "the fixture has no answer for: " .. cmd:sub(1, 200), "exit"
  end
  return a
end

local function load_phase(case)
  if case.module then return require(case.module) end
  return assert(custom.load(SRC .. "/" .. case.file))
end

-- The records as the case states them: public fields, and content where the case pins it.
local function shown(records, want)
  local out = {}
  for i, r in ipairs(records or {}) do
    action.check(r)
    out[i] = action.public(r)
    if want[i] and want[i].content ~= nil then out[i].content = r.content end
  end
  return out
end

local function subset(want, have, path)
  for k, v in pairs(want) do
    local where = path .. "." .. tostring(k)
    if type(v) == "table" then
      assert(type(have) == "table" and type(have[k]) == "table",
        where .. " is not a table: " .. tostring(have and have[k]))
      subset(v, have[k], where)
    else
      assert.are.same(v, have[k], where)
    end
  end
end

local function run_case(case, id)
  local phase = load_phase(case)
  assert.are.equal(id, phase.id, "the fixture directory is named after the phase id")
  local cfg = case.host or {}
  local entry = { name = cfg.name, role = cfg.role }
  for k, v in pairs(cfg.config or {}) do entry[k] = v end
  local host = support.host(entry, answers_of(case))
  for k, v in pairs(cfg.facts or {}) do host.facts[k] = v end
  if cfg.os then host.os = assert(os_registry.by_name(cfg.os), cfg.os):new { service_manager = "systemd" } end
  local hosts = { host }
  for _, p in ipairs(case.peers or {}) do
    local peer = support.host({ name = p.name, role = p.role })
    for k, v in pairs(p.facts or {}) do peer.facts[k] = v end
    hosts[#hosts + 1] = peer
  end
  local fields = case.ctx or {}
  local ctx = support.ctx(hosts, { cluster = fields.cluster, dry_run = fields.dry_run })
  for k, v in pairs(fields) do
    if k ~= "cluster" and k ~= "dry_run" and k ~= "package" then ctx[k] = v end
  end
  assert(fields.distro == nil and fields.distro_os == nil,
    "a package comes from ctx.package (a directory under tests/fixtures/packages), never a hand-written table")
  if fields.package then
    ctx.distro = packages.of(fields.package)
    ctx.engine = assert(require("distros.engine").for_package(ctx.distro))
  elseif fields.engine_type then
    ctx.engine = assert(require("distros.engine").load(fields.engine_type)) -- as distro_facts does without a package
  end
  local ok, a, b = loop.run(function()
    local want = case.actions or {}
    if case.error and phase.dry_run ~= "read_only" then
      local okr, err = pcall(phase.assess, ctx, host)
      assert.is_false(okr, "assess should fail the host")
      assert.are.equal(case.error, tostring(err))
      return true
    end
    local records = phase.assess and phase.assess(ctx, host) or {}
    assert.are.same(want, shown(records, want))
    assert.are.same(case.left_alone, ctx._left and ctx._left[host])
    if case.facts or case.error then
      local r, failures = phase.run(ctx, { host })
      return r, failures
    end
    return true
  end)
  assert(ok, a)
  if case.error and phase.dry_run ~= "read_only" then
    assert.are.equal(0, host.writes_sent, "a phase wrote while assessing")
    return
  end
  if case.error then
    assert.is_nil(a, "the phase should fail the host")
    assert.are.same({ case.error }, { type(b) == "table" and b[1] and b[1].err or b })
  elseif case.facts then
    assert.is_truthy(a, "the phase failed: " .. table.concat(support.errors(b or "?"), "; "))
    subset(case.facts, host.facts, "facts")
  end
  assert.are.equal(0, host.writes_sent, "a phase wrote while assessing or reading")
  assert.are.same({}, host.refused)
end

describe("phase fixtures (tests/fixtures/phases/<id>/)", function()
  local ids = ls(DIR)
  teardown(packages.release)

  it("cover the phases that plan work, each in a directory named after its id", function()
    local have = {}
    for _, id in ipairs(ids) do have[id] = true end
    for _, id in ipairs { "acquire_lock", "release_lock", "disconnect", "write_motd", "prepare_hosts",
                          "enterprise_linux", "fapolicyd", "selinux_policy", "update_hosts", "update_firewall" } do
      assert.is_true(have[id], "no fixtures for " .. id)
    end
  end)

  for _, id in ipairs(ids) do
    for _, file in ipairs(ls(DIR .. "/" .. id)) do
      if file:match("%.json$") then
        local case = plain(cjson.decode(read(DIR .. "/" .. id .. "/" .. file)))
        it(id .. "/" .. file .. ": " .. tostring(case.description), function() run_case(case, id) end)
      end
    end
  end
end)

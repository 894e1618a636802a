-- Specs for `cargoship prepare`'s own phases: "Prepare hosts" without the modules, and "Enable the requested kernel
-- modules" behind --enable-kernel-modules; together they plan what apply's phase 8 plans, record for record.
--
-- The host answers the probes of tests/fixtures/phases/prepare_hosts/fresh.json (a fresh
-- runit host); the package is tests/fixtures/packages/os-prepare, built and read by the real code.
local cjson = require "cjson"
local action = require "cargoship.action"
local os_registry = require "cargoship.os"
local packages = require "unit.phases.packages"
local support = require "unit.phases.support"

local apply_phase = require "cargoship.phases.prepare_hosts"
local env_phase = require "cargoship.phases.prepare_env"
local modules_phase = require "cargoship.phases.kernel_modules"

local function fresh_host()
  local case = cjson.decode(support.fixture("phases/prepare_hosts/fresh.json"))
  for _, r in pairs(case.probes) do r.code = math.tointeger(r.code) end
  local h = support.host({ name = "w1", role = "worker", environment = case.host.config.environment }, case.probes)
  h.os = os_registry.by_name("debian"):new { service_manager = "runit" }
  return h
end

local function plan(phase, options)
  local h = fresh_host()
  local ctx = support.ctx({ h }, { distro = packages.of("os-prepare"), options = options or {} })
  local out = {}
  for _, a in ipairs(phase.assess(ctx, h)) do
    local p = action.public(a)
    p.content = a.content
    out[#out + 1] = p
  end
  return out
end

after_each(function() packages.release() end)

describe("prepare's phases 4 and 8", function()
  it("together plan exactly apply's phase 8, in its order", function()
    local both = plan(env_phase)
    for _, a in ipairs(plan(modules_phase, { enable_kernel_modules = true })) do both[#both + 1] = a end
    local want = plan(apply_phase)
    assert.is_true(#want > 4)
    assert.are.same(want, both)
  end)

  it("phase 4 writes no module file; phase 8 without --enable-kernel-modules has nothing to do", function()
    for _, a in ipairs(plan(env_phase)) do
      assert.is_nil((a.path or ""):find("modules-load", 1, true))
      assert.is_nil((a.cmd or ""):find("modprobe", 1, true))
    end
    assert.are.same({}, plan(modules_phase))
    local mods = plan(modules_phase, { enable_kernel_modules = true })
    assert.is_true(#mods > 0)
    for _, a in ipairs(mods) do
      assert.is_nil((a.path or ""):find("/etc/environment", 1, true))
      assert.is_nil((a.path or ""):find("sysctl", 1, true))
    end
  end)

  it("phase 8 has the title the Go tool's prepare list gives it", function()
    assert.are.equal("Enable the requested kernel modules", modules_phase.title)
    assert.are.equal("Prepare hosts", env_phase.title)
  end)
end)

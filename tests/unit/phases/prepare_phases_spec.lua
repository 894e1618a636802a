-- Specs of which hosts phases 9-13 concern (prepare): the flags, the package and the OS gate them.
local support = require "unit.phases.support"
local os_registry = require "cargoship.os"
local os_config = require "cargoship.package.os_config"

local function hosts()
  local el = support.host({ name = "el1" })
  el.os = os_registry.by_name("rocky"):new {}
  local deb = support.host({ name = "deb1" })
  deb.os = os_registry.by_name("debian"):new {}
  return { el, deb }
end

local function names(list)
  local out = {}
  for i, h in ipairs(list) do out[i] = h.name end
  return out
end

local function ctx_with(options, os_section)
  local ctx = support.ctx(hosts(), { options = options })
  if os_section then ctx.distro = { type = "rke2", engine = {}, os = assert(os_config.normalize(os_section, "/p")) } end
  return ctx
end

describe("phases 9-13 prepare", function()
  it("9 concerns Enterprise Linux hosts, and only with a distro package", function()
    local phase = require "cargoship.phases.enterprise_linux"
    assert.same({}, names(phase.prepare(ctx_with({}))))
    assert.same({ "el1" }, names(phase.prepare(ctx_with({}, {}))))
  end)
  it("10, 12 and 13 act only with their flags", function()
    local flags = { fapolicyd = "fapolicyd", update_hosts = "update_hosts", update_firewall = "update_firewall" }
    for id, flag in pairs(flags) do
      local phase = require("cargoship.phases." .. id)
      assert.same({}, names(phase.prepare(ctx_with({}, { fapolicyd = "allow perm=any all : all\n" }))), id)
      assert.same({ "el1", "deb1" }, names(phase.prepare(ctx_with({ [flag] = true }, {}))), id)
    end
  end)
  it("11 acts only when the package has an SELinux policy", function()
    local phase = require "cargoship.phases.selinux_policy"
    assert.same({}, names(phase.prepare(ctx_with({}, {}))))
    assert.same({ "el1", "deb1" }, names(phase.prepare(ctx_with({}, { selinux = { booleans = { x = true } } }))))
  end)
end)

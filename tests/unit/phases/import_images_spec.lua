-- Phase 18 (Import images) against real packages: it imports exactly the tarballs phase 14 uploads.
--
-- The packages are tests/fixtures/packages/<name>, built with `package create` and read with
-- the real reader (unit.phases.packages): a hand-written package table once hid that the
-- phase read a field the reader never fills, and named tarballs the upload never writes.
local engine = require "distros.engine"
local import_images = require "cargoship.phases.import_images"
local loop = require "cargoship.loop"
local packages = require "unit.phases.packages"
local support = require "unit.phases.support"
local uploads = require "cargoship.phases.lib.uploads"

local function ctx_for(name)
  local host = support.host({ name = "w1", role = "worker" }, {})
  host.facts.arch = "amd64"
  host.facts.engine = { type = "x", running = false, action = "install" }
  local ctx = support.ctx({ host })
  ctx.distro = packages.of(name)
  ctx.engine = assert(engine.for_package(ctx.distro))
  return ctx, host
end

-- The paths phase 14 uploads image tarballs to on the host
local function uploaded_images(ctx, host)
  local out = {}
  for _, it in ipairs(assert(uploads.items(ctx, host, "common"))) do
    if it.category == "image" then out[#out + 1] = it.path end
  end
  return out
end

describe("import_images with a package built by `package create`", function()
  teardown(packages.release)

  it("upstream: one ctr import per image, of the very file the upload phase puts on the host", function()
    local ctx, host = ctx_for("upstream")
    local uploaded = uploaded_images(ctx, host)
    assert.are.equal(2, #uploaded, "the package carries two images")
    local imported = {}
    assert(loop.run(function()
      assert.are.same({ host }, import_images.prepare(ctx))
      for _, a in ipairs(import_images.assess(ctx, host)) do
        if a.kind == "run" then imported[#imported + 1] = a.cmd:match("^ctr %-n k8s%.io images import '(.*)'$") end
      end
    end))
    assert.are.same(uploaded, imported)
    assert.are.same(uploaded, require("cargoship.package.images").host_paths(ctx.distro))
  end)

  it("k3s: the tarballs are uploaded into its images directory, and it imports them itself", function()
    local ctx, host = ctx_for("k3s-images")
    local uploaded = uploaded_images(ctx, host)
    assert.are.equal(1, #uploaded)
    assert.matches("^/var/lib/rancher/k3s/agent/images/", uploaded[1])
    assert(loop.run(function()
      assert.are.same({}, import_images.prepare(ctx))
      assert.are.same({}, import_images.assess(ctx, host))
    end))
  end)
end)

-- Specs of package.images: hand-made OCI layouts (a two-arch index) carried by create, exported, read by skopeo.
local archive = require "cargoship.archive"
local build = require "cargoship.package.build"
local images = require "cargoship.package.images"
local json = require "cargoship.json"
local package = require "cargoship.package"
local util = require "cargoship.util"

local function tmpdir()
  local p = assert(io.popen("mktemp -d"))
  local d = p:read("l")
  p:close()
  return d
end

local function write(path, data)
  os.execute("mkdir -p " .. util.quote(path:match("^(.*)/")))
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

local function read(path) return (assert(require("unit.files").read(path), path .. ": cannot be read")) end

-- a blob in layout -> descriptor
local function blob(layout, media, bytes)
  local hex = util.sha256(bytes)
  write(layout .. "/blobs/sha256/" .. hex, bytes)
  return { mediaType = media, digest = "sha256:" .. hex, size = #bytes }
end

-- one image for arch: a layer (a real tar), its config, its manifest -> manifest descriptor
local function image(layout, arch, tag)
  local t = layout .. "/layer-" .. arch .. util.sha256(tag):sub(1, 8) .. ".tar"
  os.execute("mkdir -p " .. util.quote(layout))
  assert(archive.write(t, { { name = "etc", dir = true }, { name = "etc/arch", data = arch .. " " .. tag .. "\n" } }))
  local layer = blob(layout, "application/vnd.oci.image.layer.v1.tar", read(t))
  os.remove(t)
  local config = blob(layout, "application/vnd.oci.image.config.v1+json", json.encode({
    architecture = arch, os = "linux", created = "1970-01-01T00:00:00Z",
    config = { Cmd = json.array({ "/bin/true" }) },
    rootfs = { type = "layers", diff_ids = { layer.digest } } }))
  local man = blob(layout, "application/vnd.oci.image.manifest.v1+json", json.encode({
    schemaVersion = 2, mediaType = "application/vnd.oci.image.manifest.v1+json", config = config, layers = { layer } }))
  man.platform = { os = "linux", architecture = arch }
  return man
end

-- a layout holding REF as a two-architecture index, for each REF
local function layout_with(dir, refs)
  local top = {}
  for _, ref in ipairs(refs) do
    local idx = blob(dir, "application/vnd.oci.image.index.v1+json", json.encode({
      schemaVersion = 2, mediaType = "application/vnd.oci.image.index.v1+json",
      manifests = { image(dir, "amd64", ref), image(dir, "arm64", ref) } }))
    idx.annotations = { ["org.opencontainers.image.ref.name"] = ref }
    top[#top + 1] = idx
  end
  write(dir .. "/index.json", json.encode({ schemaVersion = 2, manifests = top }))
  write(dir .. "/oci-layout", '{"imageLayoutVersion":"1.0.0"}')
end

local function skopeo(transport, file)
  local p = assert(io.popen("skopeo inspect " .. transport .. ":" .. util.quote(file) .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  assert(ok, out)
  return assert(require("cjson").decode(out))
end

local REFS = { "registry.local:5000/team/app:1.0", "registry.local:5000/team/app:1.1" }

describe("images in distro packages", function()
  local root
  before_each(function() root = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. util.quote(root)) end)

  it("names tarballs without collisions: two tags of one repository, a registry with a port", function()
    local a, b = images.file_name(REFS[1], "none"), images.file_name(REFS[2], "none")
    assert.matches("^registry%.local_5000_team_app_1%.0%-%x%x%x%x%x%x%x%x%.tar$", a)
    assert.not_equal(a, b)
    assert.not_equal(images.file_name("a/b_c:1"), images.file_name("a_b/c:1"))
    assert.matches("%.tar%.zst$", images.file_name("x:1", "zstd"))
    assert.matches("%.tar%.gz$", images.file_name("x:1", "gz"))
  end)

  it("create carries a two-architecture index from a local OCI layout; each export is what skopeo reads", function()
    layout_with(root .. "/src/oci", REFS)
    write(root .. "/src/distro.yaml", [[
kind: ZarfDistro
metadata: {name: img, version: 1.35.3, architectures: [amd64, arm64]}
spec:
  type: upstream
  version: 1.35.3
  config:
    imageConfig:
      path: /etc/kubernetes/images
      sources: [oci]
      images: ["]] .. REFS[1] .. [[", "]] .. REFS[2] .. [["]
]])
    local out = assert(build.create(root .. "/src", { out = root }))
    assert.matches("cargoship%-img%-multi%-1%.35%.3%.tar%.zst$", out)
    local p = assert(package.read(out))
    assert.same(REFS, p.images)
    assert.is_nil(p.doc.spec.config.imageConfig.sources)
    local names = {}
    for _, ref in ipairs(REFS) do
      for _, arch in ipairs({ "amd64", "arm64" }) do
        local file = root .. "/" .. arch .. "-" .. images.file_name(ref, "none")
        assert(images.export(p.dir .. "/images", ref, arch, file, "none"))
        names[images.file_name(ref, "none")] = true
        local d = skopeo("docker-archive", file)
        assert.equal(arch, d.Architecture)
        assert.equal("linux", d.Os)
        assert.equal(1, #d.Layers)
        local o = skopeo("oci-archive", file)
        assert.equal(arch, o.Architecture)
        -- the layer is the one built for that arch and tag
        local into = root .. "/x-" .. arch
        os.execute("mkdir -p " .. util.quote(into))
        assert(archive.extract(file, into))
        local manifest = require("cjson").decode(read(into .. "/manifest.json"))
        assert.same({ ref }, manifest[1].RepoTags)
        assert(archive.extract(into .. "/" .. manifest[1].Layers[1], into))
        assert.equal(arch .. " " .. ref .. "\n", read(into .. "/etc/arch"))
        os.execute("rm -rf " .. util.quote(into))
      end
    end
    local n = 0
    for _ in pairs(names) do n = n + 1 end
    assert.equal(2, n)
    package.release(p)
  end)

  it("refuses an image in no local source, saying no registry is pulled from", function()
    layout_with(root .. "/src/oci", { REFS[1] })
    write(root .. "/src/distro.yaml", "kind: ZarfDistro\nmetadata: {name: img}\nspec:\n  type: upstream\n"
      .. "  version: 1.35.3\n  config:\n    imageConfig: {sources: [oci], images: [docker.io/library/busybox:1]}\n")
    local _, err = build.create(root .. "/src", { out = root })
    assert.matches("spec%.config%.imageConfig%.images%[0%]: docker%.io/library/busybox:1 is in none of "
      .. "imageConfig%.sources %(no registry is pulled from", err)
  end)

  it("refuses a package whose target architecture an image lacks", function()
    layout_with(root .. "/src/oci", { REFS[1] })
    write(root .. "/src/distro.yaml", "kind: ZarfDistro\nmetadata: {name: img, architectures: [riscv64]}\nspec:\n"
      .. "  type: upstream\n  version: 1.35.3\n  config:\n    imageConfig: {sources: [oci], images: ['" .. REFS[1]
      .. "']}\n")
    local _, err = build.create(root .. "/src", { out = root })
    assert.matches("image registry%.local:5000/team/app:1%.0: no linux/riscv64 manifest in its index", err)
  end)
end)

-- cargoship.package.images: OCI images in a distro package: copied in at build, one tarball per image and arch.
--
-- No registry is ever contacted: create reads images from local OCI layouts (a directory with
-- oci-layout, index.json, blobs/) or OCI archives (the same, as a tar) the package names in
-- spec.config.imageConfig.sources; an image is found by the index annotation
-- org.opencontainers.image.ref.name (what `skopeo copy ... oci:DIR:REF` writes) or
-- io.containerd.image.name equal to its reference.
--   copy(sources, refs, arches, dest_dir) -> true | nil, why     (build: dest_dir/images/)
--   export(layout, ref, arch, out_path, compression) -> {digest, size} | nil, why
--   file_name(ref, compression) -> collision-free tarball name (distro-package.md §14.5)
--   host_path(pkg, ref) -> where ref's tarball lives on a host | nil, why: the one name phase 14
--     uploads to and phase 18 imports from (pkg as cargoship.package.read returns it)
--   host_paths(pkg) -> {path...} in pkg.images order | nil, why
-- An exported tarball is both an OCI archive (oci-layout, index.json) and a docker archive
-- (manifest.json with RepoTags): the engines import either, `ctr images import` too.
local json = require "cargoship.json"
local util = require "cargoship.util"

local M = {}

local INDEX_TYPES = {
  ["application/vnd.oci.image.index.v1+json"] = true,
  ["application/vnd.docker.distribution.manifest.list.v2+json"] = true,
}
local REF_KEYS = { "org.opencontainers.image.ref.name", "io.containerd.image.name" }

local function decode(s)
  local ok, v = pcall(require("cjson").decode, s)
  if not ok then return nil, tostring(v) end
  return v
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function blob_path(layout, digest)
  local algo, hex = tostring(digest):match("^(%w+):(%x+)$")
  if algo ~= "sha256" or #hex ~= 64 then return nil end
  return layout .. "/blobs/sha256/" .. hex, hex
end

-- The JSON of a blob, checked against its digest -> value, bytes | nil, why
local function blob_json(layout, digest)
  local p, hex = blob_path(layout, digest)
  if not p then return nil, "unsupported digest " .. tostring(digest) end
  local s = read(p)
  if not s then return nil, "blob " .. digest .. " is missing from " .. layout end
  if util.sha256(s) ~= hex then return nil, "blob " .. digest .. " does not match its digest" end
  local v, err = decode(s)
  if not v then return nil, "blob " .. digest .. ": " .. tostring(err) end
  return v, s
end

-- The index entry of `ref` in a layout -> descriptor | nil
function M.find(layout, ref)
  local idx = decode(read(layout .. "/index.json") or "")
  if type(idx) ~= "table" then return nil end
  for _, m in ipairs(idx.manifests or {}) do
    local ann = m.annotations or {}
    for _, k in ipairs(REF_KEYS) do
      if ann[k] == ref then return m end
    end
  end
  return nil
end

-- The image manifest for linux/<arch> under a descriptor (an index is searched) -> descriptor | nil, why
function M.platform(layout, desc, arch)
  if INDEX_TYPES[desc.mediaType] then
    local idx, why = blob_json(layout, desc.digest)
    if not idx then return nil, why end
    for _, m in ipairs(idx.manifests or {}) do
      local p = m.platform or {}
      if p.os == "linux" and p.architecture == arch then return m end
    end
    return nil, "no linux/" .. arch .. " manifest in its index"
  end
  -- a single manifest: its config says the architecture
  local man, why = blob_json(layout, desc.digest)
  if not man then return nil, why end
  local cfg, cwhy = blob_json(layout, man.config and man.config.digest)
  if not cfg then return nil, cwhy end
  if (cfg.architecture or "amd64") ~= arch then
    return nil, "it is for " .. tostring(cfg.architecture) .. ", not " .. arch
  end
  return desc
end

-- Every blob a descriptor reaches (index, manifests, configs, layers), digests in order.
local function reach(layout, desc, out, seen)
  if seen[desc.digest] then return true end
  seen[desc.digest] = true
  out[#out + 1] = desc.digest
  if INDEX_TYPES[desc.mediaType] then
    local idx, why = blob_json(layout, desc.digest)
    if not idx then return nil, why end
    for _, m in ipairs(idx.manifests or {}) do
      local ok, w = reach(layout, m, out, seen)
      if not ok then return nil, w end
    end
  elseif desc.mediaType == nil or desc.mediaType:find("manifest", 1, true) then
    local man, why = blob_json(layout, desc.digest)
    if not man then return nil, why end
    if man.config then out[#out + 1] = man.config.digest end
    for _, l in ipairs(man.layers or {}) do out[#out + 1] = l.digest end
  end
  return true
end

local function sh(cmd)
  return os.execute(cmd) == true
end

-- copy(sources, refs, arches, dest) -> {ref = {digest, platforms}} | nil, why
-- dest becomes an OCI layout holding every image, each for every architecture in arches.
function M.copy(sources, refs, arches, dest, base)
  local layouts, temps = {}, {}
  local function cleanup() for _, t in ipairs(temps) do sh("rm -rf " .. util.quote(t)) end end
  for i, s in ipairs(sources) do
    local p = s:sub(1, 1) == "/" and s or (base .. "/" .. s)
    local f = io.open(p .. "/index.json", "rb")
    if f then
      f:close()
      layouts[#layouts + 1] = p
    elseif io.open(p, "rb") then
      local d = require("cargoship.package").unpack(p)
      if not d then
        cleanup()
        return nil, string.format("spec.config.imageConfig.sources[%d]: %s: not an OCI archive", i - 1, s)
      end
      temps[#temps + 1] = d
      layouts[#layouts + 1] = d
    else
      cleanup()
      return nil, string.format("spec.config.imageConfig.sources[%d]: %s: no such OCI layout or archive", i - 1, s)
    end
  end
  sh("mkdir -p " .. util.quote(dest .. "/blobs/sha256"))
  local index = { schemaVersion = 2, mediaType = "application/vnd.oci.image.index.v1+json", manifests = {} }
  local found = {}
  for i, ref in ipairs(refs) do
    local layout, desc
    for _, l in ipairs(layouts) do
      desc = M.find(l, ref)
      if desc then layout = l break end
    end
    if not desc then
      cleanup()
      return nil, string.format("spec.config.imageConfig.images[%d]: %s is in none of imageConfig.sources (no registry "
        .. "is pulled from: copy it into a local OCI layout first, e.g. skopeo copy docker://%s oci:DIR:%s)",
        i - 1, ref, ref, ref)
    end
    for _, a in ipairs(arches) do
      local m, why = M.platform(layout, desc, a)
      if not m then cleanup() return nil, string.format("image %s: %s", ref, why) end
    end
    local digests = {}
    local ok, why = reach(layout, desc, digests, {})
    if not ok then cleanup() return nil, string.format("image %s: %s", ref, why) end
    for _, d in ipairs(digests) do
      local from, hex = blob_path(layout, d)
      if not from or util.sha256_file(from) ~= hex then
        cleanup()
        return nil, string.format("image %s: blob %s is missing or does not match its digest", ref, tostring(d))
      end
      sh("cp -f -- " .. util.quote(from) .. " " .. util.quote(dest .. "/blobs/sha256/" .. hex))
    end
    index.manifests[#index.manifests + 1] = { mediaType = desc.mediaType, digest = desc.digest, size = desc.size,
      annotations = { ["org.opencontainers.image.ref.name"] = ref } }
    found[ref] = { digest = desc.digest, index = INDEX_TYPES[desc.mediaType] or false }
  end
  cleanup()
  local f = assert(io.open(dest .. "/index.json", "wb"))
  f:write(json.encode(index))
  f:close()
  f = assert(io.open(dest .. "/oci-layout", "wb"))
  f:write('{"imageLayoutVersion":"1.0.0"}')
  f:close()
  return found
end

-- "registry:5000/team/app:1.2" -> "registry_5000_team_app_1.2-<8 hex of sha256(ref)>.tar": the
-- readable part keeps the whole reference (tag and port included), the hash makes two
-- references that read alike after the substitution still differ.
function M.file_name(ref, compression)
  local suffix = ({ none = ".tar", gz = ".tar.gz", gzip = ".tar.gz", zstd = ".tar.zst" })[compression or "none"]
    or ".tar"
  return ref:gsub("[^%w%.%-]", "_") .. "-" .. util.sha256(ref):sub(1, 8) .. suffix
end

function M.host_path(pkg, ref)
  local dir = pkg.image_config and pkg.image_config.path
  if type(dir) ~= "string" or dir == "" then
    return nil, "the package carries images but spec.config.imageConfig.path is not set"
  end
  return dir:gsub("/+$", "") .. "/" .. M.file_name(ref, pkg.image_config.compression)
end

function M.host_paths(pkg)
  local out = {}
  for i, ref in ipairs(pkg.images or {}) do
    local p, why = M.host_path(pkg, ref)
    if not p then return nil, why end
    out[i] = p
  end
  return out
end

-- A docker RepoTags entry; a reference by digest has none.
local function repo_tag(ref)
  if ref:find("@", 1, true) then return nil end
  local last = ref:match("([^/]*)$")
  if not last:find(":", 1, true) then return ref .. ":latest" end
  return ref
end

-- export(layout, ref, arch, out, compression) -> {digest = manifest digest} | nil, why
function M.export(layout, ref, arch, out, compression)
  local desc = M.find(layout, ref)
  if not desc then return nil, "image " .. ref .. " is not in the package" end
  local m, why = M.platform(layout, desc, arch)
  if not m then return nil, "image " .. ref .. ": " .. why end
  local man, merr = blob_json(layout, m.digest)
  if not man then return nil, merr end
  local entries = {
    { name = "blobs", dir = true }, { name = "blobs/sha256", dir = true },
    { name = "oci-layout", data = '{"imageLayoutVersion":"1.0.0"}' },
  }
  local layers = {}
  local function add(digest)
    local p, hex = blob_path(layout, digest)
    if not p then return nil, "unsupported digest " .. tostring(digest) end
    entries[#entries + 1] = { name = "blobs/sha256/" .. hex, path = p }
    return "blobs/sha256/" .. hex
  end
  add(m.digest)
  local cfg = add(man.config.digest)
  for _, l in ipairs(man.layers or {}) do layers[#layers + 1] = add(l.digest) end
  local mdesc = { mediaType = m.mediaType or man.mediaType or "application/vnd.oci.image.manifest.v1+json",
    digest = m.digest, size = m.size,
    annotations = { ["org.opencontainers.image.ref.name"] = ref, ["io.containerd.image.name"] = ref },
    platform = { os = "linux", architecture = arch } }
  entries[#entries + 1] = { name = "index.json", data = json.encode({ schemaVersion = 2,
    mediaType = "application/vnd.oci.image.index.v1+json", manifests = { mdesc } }) }
  local tag = repo_tag(ref)
  entries[#entries + 1] = { name = "manifest.json", data = json.encode({ { Config = cfg,
    RepoTags = tag and { tag } or json.array({}), Layers = json.array(layers) } }) }
  local filter = ({ gz = "gzip", gzip = "gzip", zstd = "zstd" })[compression or "none"] or "none"
  local ok, err = require("cargoship.archive").write(out, entries, { filter = filter })
  if not ok then return nil, err end
  return { digest = m.digest }
end

return M

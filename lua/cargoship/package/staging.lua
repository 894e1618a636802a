-- cargoship.package.staging: package files as the upload phases send them: hashed once, data and images as local files.
--
-- Everything here happens on the operator's machine, once per run, so a plan and its run
-- name the same bytes: a package's files do not change during a run (each is hashed once,
-- not once per host and pass: 50 hosts x 256 MiB would be 12 GiB of hashing for the plan
-- alone); inline `data` becomes a content-addressed file; an image becomes one tarball per
-- (package, ref, arch). The upload phases (phases/lib/uploads.lua) ask for these and never
-- touch local files themselves.
--
-- M.sha256_file(path) -> sum, size | nil, why
-- M.data_file(content) -> path of a local file holding content
-- M.image_file(pkg, ref, arch) -> {path, name} | nil, why
-- M.cleanup() removes the run's data files (cli/pipeline.lua calls it at every run end)
local images = require "cargoship.package.images"
local util = require "cargoship.util"

local M = {}

local hashed = {}
function M.sha256_file(path)
  local h = hashed[path]
  if h then return h.sum, h.size end
  local sum, size = util.sha256_file(path)
  if sum then hashed[path] = { sum = sum, size = size } end
  return sum, size
end

local cache_dir
function M.data_file(content)
  if not cache_dir then
    local p = assert(io.popen("mktemp -d \"${TMPDIR:-/tmp}/cargoship-data.XXXXXX\""))
    cache_dir = p:read("l")
    p:close()
  end
  local path = cache_dir .. "/" .. util.sha256(content)
  local f = io.open(path, "rb")
  if f then f:close() return path end
  f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
  return path
end

local exported = {}
function M.image_file(pkg, ref, arch)
  local key = pkg.dir .. "\0" .. ref .. "\0" .. arch
  if exported[key] then return exported[key] end
  local dir = pkg.dir .. "/.export-" .. arch
  os.execute("mkdir -p " .. util.quote(dir))
  local name = images.file_name(ref, pkg.image_config.compression)
  local out = dir .. "/" .. name
  local ok, err = images.export(pkg.dir .. "/images", ref, arch, out, pkg.image_config.compression)
  if not ok then return nil, err end
  exported[key] = { path = out, name = name }
  return exported[key]
end

-- The data files are the cluster file's inline `data:` (an operator may put a credential there):
-- they go with the run, as the unpacked package does; the caches go with them.
function M.cleanup()
  if cache_dir then os.execute("rm -rf " .. util.quote(cache_dir)) end
  cache_dir, hashed, exported = nil, {}, {}
end

return M

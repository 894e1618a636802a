-- Phase "Import images": for an engine that does not import uploaded tarballs itself (upstream), ctr imports each.
--
-- The tarballs are the ones "Upload files to hosts" puts in imageConfig.path, one per image of
-- imageConfig.images, named as distro-package.md §9 says (every "/" becomes "_", cut at the
-- first ":", plus the compression's suffix). rke2 and k3s import from their images directory
-- at start, so they have nothing to do here; nor has a node running the package's version.
local common = require "cargoship.phases.lib.engine_common"

local M = {
  id = "import_images",
  title = "Import images",
  reads = { "connection", "facts", "engine_version" },
  creates = { "images" },
}

M.SUFFIX = { none = ".tar", gz = ".tar.gz", zstd = ".tar.zst" }

-- The package's image config -> the tarball paths on a host, in the package's order. Pure.
function M.tarballs(image_config)
  local ic = image_config or {}
  if type(ic.path) ~= "string" or type(ic.images) ~= "table" then return {} end
  local suffix = M.SUFFIX[ic.compression or "none"] or ".tar"
  local out = {}
  for _, ref in ipairs(ic.images) do
    local name = ref:gsub("/", "_"):gsub(":.*$", "")
    out[#out + 1] = ic.path:gsub("/+$", "") .. "/" .. name .. suffix
  end
  return out
end

local function files(ctx)
  if not ctx.engine or not ctx.distro then return {} end
  local list = M.tarballs(ctx.distro.image_config)
  -- the engines that import on their own answer with no actions
  if #ctx.engine:image_import(list) == 0 then return {} end
  return list
end

function M.prepare(ctx)
  if #files(ctx) == 0 then return {} end
  local work = {}
  for _, h in ipairs(ctx.hosts) do
    if not common.settled(h) then work[#work + 1] = h end
  end
  return work
end

function M.assess(ctx, host)
  if common.settled(host) then return {} end
  return ctx.engine:image_import(files(ctx))
end

return M

-- Phase "Import images": where the engine does not import uploaded image tarballs itself, its import takes each.
--
-- The tarballs are the ones "Upload files to hosts" puts on the host, one per image of the
-- package (pkg.images), at the path cargoship.package.images.host_path names for both phases.
-- An engine that imports from its images directory at start has nothing to do here;
-- nor has a node running the package's version.
local common = require "cargoship.phases.lib.engine_common"
local images = require "cargoship.package.images"

local M = {
  id = "import_images",
  title = "Import images",
  reads = { "connection", "facts", "engine_version" },
  creates = { "images" },
}

local function files(ctx)
  if not ctx.engine or not ctx.distro then return {} end
  local list = assert(images.host_paths(ctx.distro))
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

-- Phase "Upload files to hosts": config.files (by arch), the cluster's hosts[].files and image tarballs.
--
-- Each file goes up over SFTP to a temporary name beside its target, is fsync'd, checked
-- against its sha256 on the host and renamed (cargoship.transport's upload); a file whose
-- hash and mode (and owner, when the entry names one) already match is not sent, and only
-- mode/owner are fixed when just they differ. perm, user, group and symlinks are applied as
-- the entry says (distro-package.md §14.2). Partial uploads a cut run left beside a target
-- are removed first. Image tarballs are exported per architecture the hosts run, named so
-- no two references collide (§14.5), to spec.config.imageConfig.path.
-- At most --concurrent-uploads hosts upload at once (cargoship.phases.lib.uploads.run).
local uploads = require "cargoship.phases.lib.uploads"

local M = {
  id = "upload_files",
  title = "Upload files to hosts",
  reads = { "connection", "os", "facts" },
  creates = { "uploaded_files" },
}

-- Hosts with something to receive: every host when the package ships files or images,
-- else the hosts whose cluster entry lists files.
function M.prepare(ctx)
  local pkg = ctx.distro
  if pkg and not pkg.built and (#pkg.files > 0 or #pkg.images > 0 or #pkg.os_files > 0) then
    error(string.format("%s is not a built package: build it with `cargoship package create` first", pkg.file), 0)
  end
  local out = {}
  for _, h in ipairs(ctx.hosts) do
    if (pkg and (#pkg.files > 0 or #pkg.images > 0)) or #((h.config and h.config.files) or {}) > 0 then
      out[#out + 1] = h
    end
  end
  return out
end

function M.assess(ctx, host)
  return uploads.planned(ctx, host, "common")
end

M.run = uploads.run

return M

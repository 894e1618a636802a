-- Phase "Upload files to hosts – APT": os.files with selector.package apt, to hosts taking their engine so.
--
-- A host takes its engine files from the first of RPM -> APT -> Binaries with files for its
-- role and arch (phases.lib.uploads.method): Debian-like hosts without rpm files, when the package has apt files.
-- The files are staged at their targets (the engine's rpm/ or deb/ staging directory); phase
-- 25 installs them with apt-get from the paths, never running apt-get update.
-- Uploads as phase 14 does them (temp name, fsync, sha256 on the host, rename; skipped when
-- hash and mode match), at most --concurrent-uploads hosts at once.
local uploads = require "cargoship.phases.lib.uploads"

local M = {
  id = "upload_apt",
  title = "Upload files to hosts – APT",
  reads = { "connection", "os", "facts" },
  creates = { "staged_engine" },
}

function M.prepare(ctx)
  return uploads.hosts_by_method(ctx, "apt")
end

function M.assess(ctx, host)
  return uploads.planned(ctx, host, "engine")
end

M.run = uploads.run

return M

-- Phase "Upload files to hosts – RPM": os.files with selector.package rpm, to hosts taking their engine so.
--
-- A host takes its engine files from the first of RPM -> APT -> Binaries with files for its
-- role and arch (cargoship.phases.lib.uploads.method): Enterprise Linux hosts, when the package has rpm files.
-- The files are staged at their targets (the engine's rpm/ or deb/ staging directory); phase
-- 25 installs them with dnf and pins them with versionlock where the plugin is.
-- Uploads as phase 14 does them (temp name, fsync, sha256 on the host, rename; skipped when
-- hash and mode match), at most --concurrent-uploads hosts at once.
local uploads = require "cargoship.phases.lib.uploads"

local M = {
  id = "upload_rpm",
  title = "Upload files to hosts – RPM",
  reads = { "connection", "os", "facts" },
  creates = { "staged_engine" },
}

function M.prepare(ctx)
  return uploads.hosts_by_method(ctx, "rpm")
end

function M.assess(ctx, host)
  return uploads.planned(ctx, host, "engine")
end

M.run = uploads.run

return M

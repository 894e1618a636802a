-- Phase "Upload files to hosts – Binaries": engine binaries staged beside their targets; the upload records.
--
-- The catch-all: a host with no rpm or apt files for its role and arch takes the os.files
-- with selector.package binary. Each is uploaded to <target>.cargoship-staged (with its
-- mode and owner) and moved into place at install (phase 25); a host whose target already
-- holds the file has nothing to do. Links (a unit's *.wants entry) are made at install.
-- Being the last upload phase, it also writes, on every host the package reaches,
-- /var/lib/cargoship/manifest.txt (category and path of each shipped file; files an earlier
-- package shipped and this one does not are removed) and /etc/cargoship/distro-release.json
-- (0600): all four upload phases' files are known by then.
local uploads = require "cargoship.phases.lib.uploads"

local M = {
  id = "upload_binaries",
  title = "Upload files to hosts – Binaries",
  reads = { "connection", "os", "facts" },
  creates = { "staged_engine", "upload_records" },
}

-- A bare distro.yaml (engine facts only, not built) ships nothing, so it leaves no records.
function M.prepare(ctx)
  if not ctx.distro or not ctx.distro.built then return {} end
  return ctx.hosts
end

function M.assess(ctx, host)
  local acts = {}
  if uploads.method(ctx, host) == "binary" then acts = uploads.planned(ctx, host, "engine") end
  local recs, rerr = uploads.records(ctx, host)
  if not recs then error(host.name .. ": " .. tostring(rerr), 0) end
  for _, r in ipairs(recs) do acts[#acts + 1] = r end
  return acts
end

M.run = uploads.run

return M

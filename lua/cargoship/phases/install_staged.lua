-- Phase "Install staged files": installs the engine files 15-17 staged, where no initialize/upgrade phase did.
--
-- RPM hosts: the staged .rpm files not installed at their version go through dnf (local
-- paths, --nogpgcheck) and are pinned with versionlock where the plugin is (cargoship.os.rhel);
-- APT hosts: the staged .deb files not installed at their version go through apt-get as
-- local paths, without apt-get update (an air-gapped host has no index to fetch: §14.8);
-- binary hosts: each <target>.cargoship-staged is moved onto its target, then its links are
-- made. A host whose packages are installed at the staged versions and whose binaries are
-- in place has nothing to do.
-- Hosts the Initialize phases install on (engine_common.installs: their plans carry the
-- same records) and the hosts the Upgrade phases take (engine_common.upgrades) are left to
-- them. The records: phases.lib.install.
local common = require "cargoship.phases.lib.engine_common"
local install = require "cargoship.phases.lib.install"
local uploads = require "cargoship.phases.lib.uploads"

local M = {
  id = "install_staged",
  title = "Install staged files",
  reads = { "connection", "os", "facts", "staged_engine" },
  creates = { "engine_installed" },
}

-- The Initialize phases work only with an engine and a package (initialize.lua); so do the
-- Upgrade phases, which leave a host whose drain failed at its old version on purpose. Each
-- takes its hosts only when this run walks it (--skip-phases 18-24 leaves them to this phase).
local INITIALIZE = { controller = "initialize_controller", worker = "initialize_worker" }
local UPGRADE = { controller = "upgrade_controller", worker = "upgrade_worker" }
local function initialized(ctx, h)
  if ctx.engine == nil or ctx.distro == nil then return false end
  return (common.installs(h) and ctx:runs(INITIALIZE[h.role] or ""))
    or (common.upgrades(h) and ctx:runs(UPGRADE[h.role] or ""))
end

function M.prepare(ctx)
  local out = {}
  for _, h in ipairs(ctx.hosts) do
    if not initialized(ctx, h) and uploads.method(ctx, h) then out[#out + 1] = h end
  end
  return out
end

M.assess = install.actions

return M

-- Phase "Prepare hosts - Enterprise Linux support": container-selinux where SELinux is on, the package's rpm first.
--
-- Enterprise Linux hosts (host.os.enterprise_linux) whose SELinux is enabled (getenforce says
-- Enforcing or Permissive: a permissive host still labels files, and the engine's policy
-- must be there when it is switched to enforcing) get container-selinux unless rpm says it
-- is installed. Source, in this order:
--   1. the distro package's own files: an spec.config.os.files entry whose target's name is
--      container-selinux*.rpm (hosts are often air-gapped): uploaded to /var/lib/cargoship,
--      installed through the host's package manager (dnf/yum install of the file, with the
--      repositories disabled first: an air-gapped host cannot reach them), removed;
--   2. the host's configured repositories (/etc/yum.repos.d/*.repo): `dnf install`;
--   3. neither: the host fails in assess with a sentence saying so, before anything changes.
-- Without a distro package (--distro) the phase has nothing to do: there is no engine to
-- prepare for and no package rpm, and this build installs no engine without one.
local action = require "cargoship.action"
local os_config = require "cargoship.package.os_config"
local selinux = require "cargoship.os.selinux"
local shell = require "cargoship.shell"

local M = {
  id = "enterprise_linux",
  title = "Prepare hosts - Enterprise Linux support",
  reads = { "connection", "os" },
  creates = { "container_selinux" },
}

M.PACKAGE = "container-selinux"
M.STAGE = "/var/lib/cargoship/container-selinux.rpm"

function M.prepare(ctx)
  -- without a distro package apply prepares for no engine, and has no rpm of its own
  if not ctx.distro then
    if ctx.log then ctx.log:verbose("no distro package (--distro): container-selinux is not checked") end
    return {}
  end
  local out = {}
  for _, h in ipairs(ctx.hosts) do
    if h.os and h.os.enterprise_linux then out[#out + 1] = h end
  end
  return out
end

-- The package's container-selinux rpm, if it carries one: {source, sha256, basename}.
function M.package_file(ctx)
  for _, f in ipairs(os_config.of(ctx.distro).files) do
    if (f.package == nil or f.package == "rpm") and f.basename:match("^container%-selinux.*%.rpm$") then return f end
  end
end

function M.assess(ctx, host)
  local cfg = host.os
  local query = cfg:query_packages({ M.PACKAGE })
  local res, err = host:probes({
    selinux = selinux.PROBE,
    -- rpm is asked only where SELinux is on: a reader still touches the rpm database's files
    installed = "if command -v getenforce >/dev/null 2>&1 && [ \"$(getenforce 2>/dev/null)\" != Disabled ]; then "
      .. query .. "; fi; true",
    repos = "ls /etc/yum.repos.d/*.repo",
    var_dir = "test -d /var/lib/cargoship",
  })
  if not res then error(err, 0) end
  local se = selinux.parse(res.selinux.out)
  if se.mode ~= "enforcing" and se.mode ~= "permissive" then
    host.log:verbose("SELinux is %s: container-selinux is not needed", se.mode)
    return {}
  end
  if cfg:parse_package_query(res.installed.out)[M.PACKAGE] then return {} end
  local f = M.package_file(ctx)
  if f then
    local sum, size = os_config.file_sha256(f)
    if not sum then error(host.name .. ": the distro package's " .. f.basename .. " is missing at " .. f.source, 0) end
    local out = {}
    out[#out + 1] = action.upload { path = M.STAGE, source = f.source, sha256 = sum, size = size, mode = "0600",
                                    dir_mode = "0700",
                                    say = "upload the distro package's " .. f.basename }
    local install, why = cfg:install_files({ M.STAGE })
    if not install then error(host.name .. ": " .. why, 0) end
    -- repositories off first: an air-gapped host's unreachable ones must not fail the
    -- install of a file whose dependencies it has; with them, should it lack one
    local offline = cfg.pm and (cfg:pm() .. " install -y --nogpgcheck --disablerepo='*' " .. shell.quote(M.STAGE))
    out[#out + 1] = action.run { timeout = 1800, cmd = offline and (offline .. " || " .. install) or install,
      say = "install " .. M.PACKAGE .. " from the distro package's " .. f.basename }
    out[#out + 1] = action.remove { path = M.STAGE }
    return out
  end
  if res.repos.code ~= 0 or not res.repos.out:find("%S") then
    error(host.name .. ": SELinux is " .. se.mode .. " and " .. M.PACKAGE .. " is not installed, but there is no "
      .. "source for it: the distro package carries no container-selinux rpm (spec.config.os.files) and no "
      .. "package repository is configured (/etc/yum.repos.d)", 0)
  end
  local cmd = cfg:install_packages({ M.PACKAGE })
  return { action.run { timeout = 1800, say = "install " .. M.PACKAGE .. " from the configured repositories",
    cmd = cmd .. " || { echo " .. shell.quote(M.PACKAGE .. ": not installable from the configured repositories "
      .. "(none reachable?) and the distro package carries no container-selinux rpm") .. " >&2; exit 1; }" } }
end

return M

-- cargoship.os.rhel: Enterprise Linux (RHEL and its rebuilds): rpm/dnf, firewalld, SELinux and fapolicyd.
local action = require "cargoship.action"
local linux = require "cargoship.os.linux"
local shell = require "cargoship.shell"

local M = linux:extend {
  id = "rhel",
  title = "Red Hat Enterprise Linux",
  ids = { "rhel" },
  package_type = "rpm",
  package_manager = "dnf",
  firewall = "firewalld",
  enterprise_linux = true,
  paths = { ca_anchors = "/etc/pki/ca-trust/source/anchors" },
  update_ca = "update-ca-trust extract",
}

-- EL 7 and older (and Amazon Linux 2, which matches through ID_LIKE) have yum only.
function M:pm()
  local major = tonumber((self.version_id or ""):match("^(%d+)"))
  if major and major < 8 then return "yum" end
  return "dnf"
end

function M.query_packages(_, names)
  return linux.words_command(shell.fmt("rpm -q --qf %s", "%{NAME}\t%{VERSION}-%{RELEASE}\n"), names)
end

function M:install_packages(names) return linux.words_command(self:pm() .. " install -y", names) end

-- Staged files come from the distro package, whose checksums were verified at build and
-- load; air-gapped hosts often lack the vendor's signing keys.
function M:install_files(paths)
  return linux.words_command(self:pm() .. " install -y --nogpgcheck", paths)
end

function M:remove_packages(names) return linux.words_command(self:pm() .. " remove -y", names) end
function M:hold_packages(names) return linux.words_command(self:pm() .. " versionlock add", names) end
function M:unhold_packages(names) return linux.words_command(self:pm() .. " versionlock delete", names) end

-- Pinning needs the versionlock plugin, which minimal installs lack: without it the
-- packages are installed unpinned and the host says so (distro-package.md §12).
function M:install_local(paths, names)
  local out, why = linux.install_local(self, paths, nil)
  if not out then return nil, why end
  if names and #names > 0 then
    local pm = self:pm()
    out[#out + 1] = action.run {
      cmd = string.format("if %s versionlock list >/dev/null 2>&1; then %s; else echo %s >&2; fi", pm,
        self:hold_packages(names), shell.quote("warning: the " .. pm .. " versionlock plugin is absent: "
          .. table.concat(names, " ") .. " not pinned")),
      say = "pin " .. table.concat(names, ", ") .. " (where versionlock is available)" }
  end
  return out
end

return M

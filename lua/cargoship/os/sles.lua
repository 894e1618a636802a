-- cargoship.os.sles: SUSE Linux Enterprise: rpm packages through zypper, firewalld as the front end.
local linux = require "cargoship.os.linux"
local shell = require "cargoship.shell"

local M = linux:extend {
  id = "sles",
  title = "SUSE Linux Enterprise",
  ids = { "sles", "sled", "sles_sap", "suse" },
  package_type = "rpm",
  package_manager = "zypper",
  firewall = "firewalld",
  paths = { ca_anchors = "/etc/pki/trust/anchors" },
  update_ca = "update-ca-certificates",
}

local ZYPPER = "zypper --non-interactive"

function M.query_packages(_, names)
  return linux.words_command(shell.fmt("rpm -q --qf %s", "%{NAME}\t%{VERSION}-%{RELEASE}\n"), names)
end

function M.install_packages(_, names) return linux.words_command(ZYPPER .. " install", names) end

-- Staged files were checksummed at build and load; air-gapped hosts often lack the keys.
function M.install_files(_, paths)
  return linux.words_command(ZYPPER .. " install --allow-unsigned-rpm", paths)
end

function M.remove_packages(_, names) return linux.words_command(ZYPPER .. " remove", names) end
function M.hold_packages(_, names) return linux.words_command(ZYPPER .. " addlock", names) end
function M.unhold_packages(_, names) return linux.words_command(ZYPPER .. " removelock", names) end

return M

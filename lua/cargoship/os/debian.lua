-- cargoship.os.debian: Debian and its derivatives: apt/dpkg packages, ufw as the firewall front end.
local linux = require "cargoship.os.linux"
local shell = require "cargoship.shell"

local M = linux:extend {
  id = "debian",
  title = "Debian",
  ids = { "debian", "raspbian" },
  package_type = "apt",
  package_manager = "apt",
  firewall = "ufw",
  paths = { ca_anchors = "/usr/local/share/ca-certificates" },
  update_ca = "update-ca-certificates",
}

-- apt must never stop to ask: a prompt on a remote host is a hang, not a question.
local APT = "env DEBIAN_FRONTEND=noninteractive apt-get -q -y"

function M.query_packages(_, names)
  return linux.words_command(shell.fmt("dpkg-query -W -f=%s", "${Package}\t${Version}\t${db:Status-Status}\n"),
    names)
end

function M.install_packages(_, names) return linux.words_command(APT .. " install", names) end

-- apt-get installs a local .deb only when it is written as a path (absolute or ./); it
-- never runs `apt-get update` here: an air-gapped host has no index to fetch.
function M.install_files(_, paths)
  local local_paths = {}
  for i, p in ipairs(paths) do local_paths[i] = p:find("^%.?%.?/") and p or ("./" .. p) end
  return linux.words_command(APT .. " install", local_paths)
end

-- The package manager's own simulation (nothing is installed, no root needed): of staged
-- .deb files where they are on the host, else of the dependencies the package's files
-- declare (Depends read from their control locally), against what the host has installed
-- and its configured repositories. `apt-get satisfy` is apt 1.9+ (Debian 11, Ubuntu 20.04).
-- apt rebuilds /var/cache/apt/*.bin when they are older than its lists: a simulation, which
-- a dry run sends, builds them in memory instead and writes nothing
local NO_CACHE = "-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache="
function M.simulate_files(_, paths)
  local local_paths = {}
  for i, p in ipairs(paths) do local_paths[i] = p:find("^%.?%.?/") and p or ("./" .. p) end
  return linux.words_command("apt-get -s -q " .. NO_CACHE .. " install", local_paths)
end
function M.simulate_depends(_, relations)
  if relations == nil or relations == "" then return nil, "no dependencies" end
  return "apt-get -s -q " .. NO_CACHE .. " satisfy " .. shell.quote(relations)
end
-- purge: the conffiles (/etc/default/...) go too, so a reset host holds none of the package
function M.remove_packages(_, names) return linux.words_command(APT .. " purge", names) end
-- A transaction cut short (dpkg killed, the host rebooted) is finished before anything
-- else: apt refuses to run until it is ("dpkg was interrupted").
function M.repair_packages() return "env DEBIAN_FRONTEND=noninteractive dpkg --configure -a" end
function M.hold_packages(_, names) return linux.words_command("apt-mark hold", names) end
function M.unhold_packages(_, names) return linux.words_command("apt-mark unhold", names) end

return M

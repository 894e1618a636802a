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

function M.remove_packages(_, names) return linux.words_command(APT .. " remove", names) end
function M.hold_packages(_, names) return linux.words_command("apt-mark hold", names) end
function M.unhold_packages(_, names) return linux.words_command("apt-mark unhold", names) end

return M

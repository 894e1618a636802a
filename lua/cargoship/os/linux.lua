-- cargoship.os.linux: the base OS configurer every other one inherits; knows what all Linux hosts share.
--
-- A configurer is a class: `child = linux:extend{...}` inherits every field and method it
-- does not set (paths merge key by key); `cfg = child:new{service_manager, service_dir}`
-- is the per-host instance stored as host.os. Methods return command strings (or nil, why
-- when the OS has no answer); the host object runs them, the configurer never does.
local firewall = require "cargoship.os.firewall"
local service = require "cargoship.os.service"
local shell = require "cargoship.shell"

local M = {
  id = "linux",
  title = "Linux",
  ids = {},                 -- os-release IDs this configurer claims
  package_type = nil,       -- "apt" | "rpm": which distro-package files suit it
  package_manager = nil,    -- "apt" | "dnf" | "yum" | "zypper"
  firewall = nil,           -- preferred front end: "firewalld" | "ufw" | nil
  enterprise_linux = false, -- RHEL family: SELinux, fapolicyd and RPM upload phases apply
  paths = {
    os_release = "/etc/os-release",
    environment = "/etc/environment",
    hosts = "/etc/hosts",
    sysctl_dir = "/etc/sysctl.d",
    modules_load_dir = "/etc/modules-load.d",
    systemd_units = "/etc/systemd/system",
    ca_anchors = nil,
  },
  update_ca = nil,          -- command that rebuilds the trust store after adding an anchor
}
M.__index = M

function M:extend(child)
  child.__index = child
  child.parent = self
  child.paths = setmetatable(child.paths or {}, { __index = self.paths })
  return setmetatable(child, self)
end

-- o: {service_manager = "systemd"|"runit"|"openrc"|nil, service_dir, version_id}
function M:new(o)
  o = o or {}
  return setmetatable({
    service_manager = o.service_manager,
    services = service.manager(o.service_manager, o),
    version_id = o.version_id,
  }, self)
end

-- Classes carry their own __index; instances made by new() do not.
local function class_of(self)
  if rawget(self, "__index") then return self end
  return getmetatable(self)
end

-- True when this configurer is `id` or inherits from it (host.os:is_a("rhel")).
function M:is_a(id)
  local c = class_of(self)
  while c do
    if rawget(c, "id") == id then return true end
    c = rawget(c, "parent")
  end
  return false
end

-- The chain of ids from the most specific up, for logs: "rocky < rhel < linux".
function M:lineage()
  local ids, c = {}, class_of(self)
  while c do
    if rawget(c, "id") then ids[#ids + 1] = rawget(c, "id") end
    c = rawget(c, "parent")
  end
  return table.concat(ids, " < ")
end

-- host.os:service(verb, name) -> command | nil, why  (verbs: cargoship.os.service.VERBS)
function M:service(verb, name)
  if not service.VERBS[verb] then error("os: unknown service verb " .. tostring(verb), 2) end
  if not self.services then
    return nil, "no service manager detected (systemd, runit or openrc)"
  end
  return self.services.command(verb, name)
end

local function no_pm(self)
  return nil, "no package manager known for " .. self.title
end

-- Package commands; names and paths are quoted one word each.
M.query_packages = no_pm      -- (names) -> command printing "name<TAB>version" per installed one
M.install_packages = no_pm    -- (names) from the configured repositories
M.install_files = no_pm       -- (paths) staged package files (.rpm / .deb)
M.remove_packages = no_pm
M.hold_packages = no_pm       -- pin, so an unattended upgrade cannot move the engine
M.unhold_packages = no_pm

-- Parses query_packages output -> {name = version}; lines that are not "name<TAB>version"
-- (rpm's "package x is not installed") are skipped.
function M.parse_package_query(_, out)
  local found = {}
  for line in (out or ""):gmatch("[^\n]+") do
    local name, version, status = line:match("^([^\t]+)\t([^\t]+)\t?([^\t]*)$")
    if name and (status == "" or status == "installed") then found[name] = version end
  end
  return found
end

-- host.os:firewall_backend(facts.firewall) -> backend | nil, why
function M:firewall_backend(fw)
  return firewall.choose(self.firewall, fw)
end

-- A helper for children: "<tool> <args...> <quoted words>".
function M.words_command(prefix, list)
  if #list == 0 then return nil, "no packages given" end
  return prefix .. " " .. shell.words(table.unpack(list))
end

return M

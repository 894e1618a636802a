-- cargoship.os.linux: the base OS configurer every other one inherits; knows what all Linux hosts share.
--
-- A configurer is a class: `child = linux:extend{...}` inherits every field and method it
-- does not set (paths merge key by key); `cfg = child:new{service_manager, service_dir}`
-- is the per-host instance stored as host.os. Methods return command strings (or nil, why
-- when the OS has no answer); the host object runs them, the configurer never does.
-- Builders for the prepare phases (content from cargoship.os.edit, records from
-- cargoship.action; `current` is the file as the host has it, nil when absent):
--   sysctl(values) -> {path, content, mode = "0644", load = "sysctl -p <path>"}
--   sysctl_actions(values) -> {write, run load}
--   environment_actions(current, vars) -> {write} | {} when unchanged | nil, why
--   modules_actions(names, have?, loaded?) -> writes for modules whose file differs (have: {name =
--       content}), then one command loading those the kernel lacks (loaded: {name = true}) now,
--       not only at the next boot, naming every module that failed
--   hosts_actions(current, nodes) -> {write} | {} | nil, why
--   install_local(paths, names?) -> actions: staged package files through the package
--       manager, then pinned (children: debian, rhel, sles); linux has none
--   firewall_actions(backend, plan) -> actions (cargoship.os.firewall.actions)
--   selinux_probe() / parse_selinux(out); boolean_probe(names) / parse_booleans(out)
local action = require "cargoship.action"
local edit = require "cargoship.os.edit"
local firewall = require "cargoship.os.firewall"
local selinux = require "cargoship.os.selinux"
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

-- host.os:service(verb, name, o) -> command | nil, why  (verbs and o: cargoship.os.service)
function M:service(verb, name, o)
  if not service.VERBS[verb] then error("os: unknown service verb " .. tostring(verb), 2) end
  if not self.services then
    return nil, "no service manager detected (systemd, runit or openrc)"
  end
  return self.services.command(verb, name, o)
end

local function no_pm(self)
  return nil, "no package manager known for " .. self.title
end

-- Package commands; names and paths are quoted one word each.
M.query_packages = no_pm      -- (names) -> command printing "name<TAB>version" per installed one
M.install_packages = no_pm    -- (names) from the configured repositories
M.install_files = no_pm       -- (paths) staged package files (.rpm / .deb)
M.remove_packages = no_pm
M.repair_packages = no_pm     -- () finishes a transaction cut short (facts.packages sees one)
M.hold_packages = no_pm       -- pin, so an unattended upgrade cannot move the engine
M.simulate_files = no_pm      -- (paths) the package manager's dry run of installing staged files
M.simulate_depends = no_pm    -- (relations text, deb-control syntax) its dry run of those dependencies
M.package_identity = no_pm    -- (path) a command printing what identifies a staged package file
M.simulate_requires = no_pm  -- ({ {name, text}, ... }) rpm: the host's answer to requirements read from .rpm headers
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

-- Seconds a package-manager transaction may go on after the run is cancelled (Ctrl-C)
-- before it is ended: long enough for an engine's packages to unpack and configure.
M.PM_FINISH = 600

-- Staged files and pins through this OS's own package tool; children that have one override.
function M:install_local(paths, names)
  if #paths == 0 then return nil, "no package files given" end
  local cmd, why = self:install_files(paths)
  if not cmd then return nil, why end
  -- a package manager killed half-way leaves its database broken: a cancelled run lets it finish
  local out = { action.run { cmd = cmd, timeout = 1800, finish = M.PM_FINISH,
                             say = "install " .. #paths .. " staged package file(s)" } }
  if names and #names > 0 then
    local hold = self:hold_packages(names)
    if hold then out[#out + 1] = action.run { cmd = hold, finish = 60, say = "pin " .. table.concat(names, ", ") } end
  end
  return out
end

-- ---- prepare-phase builders ----------------------------------------------------------

function M:sysctl(values)
  -- loads our file alone: one broken drop-in of someone else's must not fail the phase
  local path = self.paths.sysctl_dir .. "/99-cargoship.conf"
  return { path = path, content = edit.sysctl(values), mode = "0644", load = shell.fmt("sysctl -p %s", path) }
end

function M:sysctl_actions(values)
  local f = self:sysctl(values)
  return { action.write { path = f.path, content = f.content, mode = f.mode },
           action.run { cmd = f.load, say = "reload sysctl settings" } }
end

local function write_if_changed(path, current, content, mode)
  if content == current then return {} end
  return { action.write { path = path, content = content, mode = mode } }
end

function M:environment_actions(current, vars)
  local content, why = edit.environment(current, vars)
  if not content then return nil, why end
  return write_if_changed(self.paths.environment, current, content, "0644")
end

function M:hosts_actions(current, nodes)
  local content, why = edit.hosts(current, nodes)
  if not content then return nil, why end
  return write_if_changed(self.paths.hosts, current, content, "0644")
end

-- A modules-load.d file makes the module load at boot; modprobe loads it now, so nothing
-- waits for a reboot (distro-package.md §14.7). 0644: systemd-modules-load reads it as root,
-- and a module name is no secret. have = {name = the file's content on the host}, loaded =
-- {name = true} for modules the kernel has (loaded or built in): only what differs is
-- written, only what is missing is loaded, in one command that tries every module and
-- names each one that failed, so one missing module does not hide the others.
function M:modules_actions(names, have, loaded)
  local out, load = {}, {}
  for _, name in ipairs(names or {}) do
    local content, why = edit.module_file(name)
    if not content then return nil, why end
    if not (have and have[name] == content) then
      out[#out + 1] = action.write { path = self.paths.modules_load_dir .. "/" .. name .. ".conf",
                                     content = content, mode = "0644" }
    end
    if not (loaded and loaded[name]) then load[#load + 1] = name end
  end
  if #load > 0 then
    out[#out + 1] = action.run {
      -- the error names the modules on its first line (what a failed command's message shows),
      -- then the last failure's first line of modprobe's own words
      cmd = "failed=; why=; for m in " .. shell.words(table.unpack(load)) .. '; do if ! err=$(modprobe -- "$m" 2>&1);'
        .. ' then failed="$failed $m"; why=$(printf %s "$err" | head -n 1); fi; done;'
        .. ' if [ -n "$failed" ]; then echo "kernel module(s) failed to load:$failed ($why)" >&2; exit 1; fi',
      say = "load kernel module" .. (#load > 1 and "s " or " ") .. table.concat(load, ", ") }
  end
  return out
end

M.selinux_probe = function() return selinux.PROBE end
M.parse_selinux = function(_, out) return selinux.parse(out) end
M.boolean_probe = function(_, names) return selinux.boolean_probe(names) end
M.parse_booleans = function(_, out) return selinux.parse_booleans(out) end

function M.firewall_actions(_, backend, plan)
  return firewall.actions(backend, plan)
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

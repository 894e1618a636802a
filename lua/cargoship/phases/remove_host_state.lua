-- Phase "Remove cargoship's host state": what cargoship itself left on each targeted host, beyond the engine.
--
-- The Go tool leaves these behind (engines.md §6 gap 8); each removal is the inverse of its
-- writer, and only what is there is planned (a second reset has nothing to do):
--   /etc/hosts      the managed block of phase 12 taken out (cargoship.os.edit.hosts, no nodes)
--   sysctl          phase 8's /etc/sysctl.d/99-cargoship.conf (the live values stay until boot)
--   environment     phase 8's /etc/environment lines put back as they were, and the
--   modules         modules-load.d files it created removed, from its record
--                   (cargoship.os.prepare_record; a second round trip reads those files)
--   fapolicyd       phase 10's rules files, then the rules reloaded where fapolicyd runs
--   firewall        phase 13's: table inet cargoship and its boot include (nftables), the
--                   recorded rules and app profile (ufw), its ipsets, service, rich rules and
--                   policies (firewalld, where it runs: a second round trip reads them)
--   directories     /etc/cargoship (distro-release.json, registry CAs) and /var/lib/cargoship
--                   (records, staged os files, images, firewall files) removed whole
-- The host lock is released by phase "Release exclusive host lock" as in every run.
local action = require "cargoship.action"
local fapolicyd = require "cargoship.phases.fapolicyd"
local firewall = require "cargoship.os.firewall"
local fw_state = require "cargoship.os.firewall.state"
local linux = require "cargoship.os.linux"
local nftables = require "cargoship.os.firewall.nftables"
local prepare_record = require "cargoship.os.prepare_record"
local reset_node = require "cargoship.phases.lib.reset_node"
local shell = require "cargoship.shell"
local ufw = require "cargoship.os.firewall.ufw"

local M = {
  id = "remove_host_state",
  title = "Remove cargoship's host state",
  reads = { "connection", "os" },
  creates = { "host_state_removed" },
}

M.SYSCTL = "99-cargoship.conf"
M.DIRS = { "/etc/cargoship", "/var/lib/cargoship" }

function M.prepare(ctx) return reset_node.targets(ctx) end

local function exists(path) return shell.fmt("test -e %s", path) end

function M.probes(paths)
  local p = {
    hosts = shell.fmt("if [ -e %s ]; then cat -- %s; else exit 44; fi", paths.hosts, paths.hosts),
    sysctl = exists(paths.sysctl_dir .. "/" .. M.SYSCTL),
    fapolicyd_rules = exists(fapolicyd.RULES),
    fapolicyd_executable = exists(fapolicyd.EXECUTABLE),
    firewalld = firewall.FIREWALLD_OURS,
  }
  for k, v in pairs(nftables.removal_probes()) do p[k] = v end
  for k, v in pairs(ufw.REMOVAL_PROBES) do p[k] = v end
  for i, d in ipairs(M.DIRS) do p["dir_" .. i] = exists(d) end
  for k, v in pairs(prepare_record.removal_probes(paths)) do p[k] = v end
  return p
end

local function there(res, key) return res[key] ~= nil and res[key].code == 0 end

-- Probe answers (fw: the firewalld state probes' answers, when it holds ours; mods: the
-- recorded module files' answers and names) -> records | nil, why. Pure: the specs feed it answers.
function M.decide(cfg, res, fw, mods)
  local out = {}
  if there(res, "hosts") then
    local acts, why = cfg:hosts_actions(res.hosts.out, {})
    if not acts then return nil, why end
    for _, a in ipairs(acts) do
      a.say = "take the cargoship block out of " .. cfg.paths.hosts
      out[#out + 1] = a
    end
  end
  if there(res, "sysctl") then out[#out + 1] = action.remove { path = cfg.paths.sysctl_dir .. "/" .. M.SYSCTL } end
  local prep, perr = prepare_record.removal(cfg.paths, res, mods and mods.res, mods and mods.names)
  if not prep then return nil, perr end
  for _, a in ipairs(prep) do out[#out + 1] = a end
  local rules = false
  for _, k in ipairs({ "fapolicyd_rules", "fapolicyd_executable" }) do
    if there(res, k) then
      out[#out + 1] = action.remove { path = k == "fapolicyd_rules" and fapolicyd.RULES or fapolicyd.EXECUTABLE }
      rules = true
    end
  end
  if rules then
    out[#out + 1] = action.run { cmd = "if grep -qx fapolicyd /proc/[0-9]*/comm; then if command -v fagenrules "
      .. ">/dev/null; then fagenrules --load; else systemctl restart fapolicyd; fi; fi",
      say = "reload the fapolicyd rules where fapolicyd runs" }
  end
  for _, a in ipairs(nftables.removal(res)) do out[#out + 1] = a end
  for _, a in ipairs(ufw.removal(res)) do out[#out + 1] = a end
  if fw then
    local acts, why = firewall.firewalld_removal(fw)
    if not acts then return nil, why end
    for _, a in ipairs(acts) do out[#out + 1] = a end
  end
  for i, d in ipairs(M.DIRS) do
    if there(res, "dir_" .. i) then out[#out + 1] = action.remove { path = d, recursive = true } end
  end
  return out
end

function M.assess(ctx, host)
  local cfg = host.os or linux
  local res, err = host:probes(M.probes(cfg.paths))
  if not res then error(err, 0) end
  local fw
  if there(res, "firewalld") then
    fw, err = host:probes(fw_state.probes("firewalld", {}))
    if not fw then error(err, 0) end
  end
  local mods = {}
  local mp
  mp, mods.names = prepare_record.module_probes(cfg.paths, res)
  if #mods.names > 0 then
    mods.res, err = host:probes(mp)
    if not mods.res then error(err, 0) end
  end
  local acts, why = M.decide(cfg, res, fw, mods)
  if not acts then error(host.name .. ": " .. why, 0) end
  return reset_node.noted(ctx, host, acts)
end

return M

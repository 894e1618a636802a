-- Phase "Uninstalling Engine": on each targeted host, the engine's reset verb, then every file of the upload manifest.
--
-- Per host (engines.md §4.4), decided at assess from one round trip, so a host with nothing
-- of an engine left has nothing to do (a second reset is not pending):
--   engine    for each engine whose binary answered phase 5 or whose data, config or
--             staging directory exists: the engine's reset verb (distros/: stop, with the
--             service disabled after it, both best effort as the unit may be gone, the packages
--             installed from staged rpm/deb files removed by the names the manifest records,
--             the data and config directories removed; an engine's own reset command first)
--   manifest  every path /var/lib/cargoship/manifest.txt lists (what phases 14-17 shipped,
--             binaries at their install target) removed, then the manifest itself
-- Hosts concurrently (per-profile batches are the Go tool's; nothing here needs a leader).
local action = require "cargoship.action"
local engine = require "distros.engine"
local reset_node = require "cargoship.phases.lib.reset_node"
local shell = require "cargoship.shell"
local uploads = require "cargoship.phases.lib.uploads"

local M = {
  id = "uninstall_engine",
  title = "Uninstalling Engine",
  reads = { "connection", "os", "facts", "engine_version" },
  creates = { "engine_removed" },
}

function M.prepare(ctx) return reset_node.targets(ctx) end

function M.probes()
  local m = uploads.MANIFEST
  local p = { manifest = shell.fmt("if [ -e %s ]; then cat -- %s; else exit 44; fi", m, m) }
  for _, t in ipairs(engine.TYPES) do
    local e = engine.load(t)
    local dirs = {}
    for _, d in ipairs({ e.data_dir, e.config_dir, e.staging_dir }) do dirs[#dirs + 1] = shell.fmt("[ -e %s ]", d) end
    p["dirs_" .. t] = table.concat(dirs, " || ")
  end
  return p
end

-- Manifest text -> paths (sorted as listed) and the package names of its rpm/deb files.
function M.manifest(text)
  local paths, names = {}, {}
  for line in (text or ""):gmatch("[^\n]+") do
    local p = line:match("^%a+\t(/.+)$")
    if p then
      paths[#paths + 1] = p
      local name = uploads.package_name(p)
      if name then names[#names + 1] = name end
    end
  end
  return paths, names
end

-- Probe answers -> records. Pure: the specs feed it answers.
function M.decide(host, res, found)
  local out = {}
  local text = res.manifest and res.manifest.code == 0 and res.manifest.out or nil
  local paths, names = M.manifest(text)
  for _, t in ipairs(engine.TYPES) do
    if (found or {})[t] or (res["dirs_" .. t] and res["dirs_" .. t].code == 0) then
      local e = engine.load(t)
      local node = engine.node_of(host)
      local stopped = {}
      for _, a in ipairs(e:reset(node, host.os, names)) do
        -- the node reset stopped it already, or a run cut short disabled it: here the stop and
        -- the disable after it are best effort, so a reset can be re-run
        local svc = a.kind == "service" and a.verb == "stop" and a.service
        local stop = svc and host.os and host.os:service("stop", svc)
        if stop then
          out[#out + 1] = action.run { cmd = "{ " .. stop .. "; } >/dev/null 2>&1 || true",
                                       say = "stop service " .. svc .. " (best effort)" }
          out[#out + 1] = action.run { cmd = "{ " .. host.os:service("disable", svc) .. "; } >/dev/null 2>&1 || true",
                                       say = "disable service " .. svc .. " (best effort)" }
          stopped[#stopped + 1] = svc
        else
          out[#out + 1] = a
        end
      end
      -- the engine's service, where the engine's own reset command stops it, is disabled too
      local own, has_own = e:service(host.role), false
      for _, svc in ipairs(stopped) do has_own = has_own or svc == own end
      if not has_own then
        local disable = host.os and host.os:service("disable", own)
        if disable then
          out[#out + 1] = action.run { cmd = "{ " .. disable .. "; } >/dev/null 2>&1 || true",
                                       say = "disable service " .. own .. " (best effort)" }
          table.insert(stopped, 1, own)
        end
      end
      -- the services' files are gone now; what the service manager kept of them goes too
      for _, svc in ipairs(stopped) do
        local forget = host.os:service("forget", svc)
        if forget and forget ~= "true" then
          out[#out + 1] = action.run { cmd = forget,
            say = "forget service " .. svc .. " (what " .. host.os.services.name .. " kept of it)" }
        end
      end
      names = {}   -- removed once, by the first engine found
    end
  end
  if #paths > 0 then
    out[#out + 1] = action.run { cmd = "rm -f -- " .. shell.words(table.unpack(paths)),
      say = string.format("remove the %d file%s the upload manifest lists", #paths, #paths == 1 and "" or "s") }
  end
  if text then out[#out + 1] = action.remove { path = uploads.MANIFEST } end
  return out
end

function M.assess(ctx, host)
  local res, err = host:probes(M.probes())
  if not res then error(err, 0) end
  return reset_node.noted(ctx, host, M.decide(host, res, host.facts and host.facts.engines))
end

return M

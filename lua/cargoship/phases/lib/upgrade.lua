-- phases.lib.upgrade: phases 23 and 24 built from one description: nodes up at another version than the package's.
--
-- M.make{id, title, role, order = "serial"|"batches"} -> phase. A node of that role has work
-- when its engine runs, has joined and phase 5 judged it "upgrade" (or an allowed
-- "downgrade"): engine_common.upgrades. Its records, decided at assess: the engine's
-- upgrade verb (distros.engine: cordon and drain through the leader unless --no-drain, then
-- the engine's upgrade_node: stop, install the staged files, the engine's own upgrade step,
-- start, wait Ready), the Ready wait also waiting for the node's kubelet to report the
-- package's version with a heartbeat newer than the one before the restart, then uncordon
-- and, after a drain, a wait until the ReplicaSets and StatefulSets the drain emptied are at
-- their ready counts again (bounded by --drain-timeout), so the next node or batch does not
-- drain the last copies. Steps: phases.lib.upgrade_steps.
-- Order and failure rules: phases.lib.rollout's (shared with the sync phases 26-27): a drain
-- that fails or times out uncordons that node and leaves it at its old version.
local common = require "cargoship.phases.lib.engine_common"
local uploads = require "cargoship.phases.lib.uploads"
local rollout = require "cargoship.phases.lib.rollout"

local M = {}

M.DRAIN_GRACE = rollout.DRAIN_GRACE
M.DRAIN_TIMEOUT = rollout.DRAIN_TIMEOUT

local function has_work(host, role)
  return host.role == role and common.upgrades(host)
end

M.drain_opts = rollout.drain_opts
local old_heartbeat = rollout.old_heartbeat

-- The package's engine files for this host, every one (its version is not the host's), where
-- the upload phases stage them: known from the package alone, so a dry run, before those
-- phases ran, plans what the run does. A package's name from its file name (rpm
-- NAME-VERSION-RELEASE.ARCH.rpm, deb NAME_VERSION_ARCH.deb), for unpinning.
function M.staged(ctx, host)
  local method = uploads.method(ctx, host)
  local items, err = uploads.items(ctx, host, "engine")
  if not items then error(host.name .. ": " .. tostring(err), 0) end
  if not method or #items == 0 then return nil end
  if method == "binary" then
    local moves = {}
    for _, it in ipairs(items) do moves[#moves + 1] = { from = it.path, to = it.final } end
    return { method = "binary", moves = moves }
  end
  local paths, names = {}, {}
  for _, it in ipairs(items) do
    paths[#paths + 1] = it.path
    local base = it.path:match("[^/]+$")
    names[#names + 1] = method == "apt" and base:match("^([^_]+)_")
      or base:gsub("%.rpm$", ""):gsub("%.[^.]+$", ""):match("^(.+)%-[^-]+%-[^-]+$") or nil
  end
  return { method = method, paths = paths, names = #names > 0 and names or nil }
end

function M.records(ctx, host)
  local eng, node = ctx.engine, common.node(host)
  local staged, links = M.staged(ctx, host), {}
  if not staged then
    error(host.name .. ": " .. eng.name .. " " .. tostring(host.facts.engine.version) .. " runs, the package has "
      .. tostring(eng.version) .. ", and no engine files for this host's role, arch and package manager", 0)
  end
  local drain = M.drain_opts(ctx.options)
  local out = {}
  for _, a in ipairs(eng:upgrade(node, common.cluster(ctx), staged, host.os, { drain = drain })) do
    if #links > 0 and a.kind == "service" and (a.verb == "start" or a.verb == "restart") then
      for _, l in ipairs(links) do out[#out + 1] = l end
      links = {}
    end
    if a.kind == "step" and a.name == "wait_ready" then
      a.after, a.version = old_heartbeat(ctx, host), eng.version
      a.say = string.format("wait for node %s Ready at %s", node.name, eng.version)
    end
    out[#out + 1] = a
  end
  if drain then out[#out + 1] = rollout.wait_workloads(node, drain) end
  return out
end

function M.make(o)
  return rollout.make {
    id = o.id, title = o.title, role = o.role, order = o.order,
    reads = { "connection", "facts", "engine_version" },
    creates = { o.role == "controller" and "controllers_upgraded" or "workers_upgraded" },
    selects = function(_, h) return has_work(h, o.role) end,
    records = M.records,
    -- a controller waiting for its own upgrade does not lead while the leader is down
    busy = function(h) return has_work(h, "controller") end,
    left = function(h) return "at " .. tostring(h.facts.engine.version) end,
  }
end

return M

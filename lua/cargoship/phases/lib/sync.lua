-- phases.lib.sync: phases 26 and 27 from one description: a running node's engine config files brought back in line.
--
-- M.make{id, title, role, order = "serial"|"batches"} -> phase (engines.md §5.4). A node of
-- that role whose engine runs the package's version and has joined (engine_common.settled)
-- is checked in one round trip
-- (facts.host): each file of engine:sync_files(node, cluster) (registries and their CAs,
-- audit and PSS policies, chart values; containerd's files for an engine that runs it) is
-- missing, unreadable, different content, wrong mode or wrong owner (facts.host.drift), and
-- each file directly inside a directory of engine:sync_dirs(node) (down to its depth, when
-- given) that is not desired is stale, bar the files other phases keep there (uploads'
-- distro-release record). Records:
--   nothing drifted                       none: the node has no work
--   only in-place files (chart values)    their writes, no restart: the engine reconciles them
--   anything else                         phases.lib.rollout's around: cordon and drain, the
--                                         engine's sync_node (stop, every drifted file written
--                                         with its mode, 0600 by default, stale files removed,
--                                         start, Ready with a heartbeat newer than before),
--                                         uncordon, the evicted workloads back
-- Each write and remove says which file and why, so a dry run lists per host what drifted.
-- Order and failure rules are the upgrade's (phases.lib.rollout): controllers one at a time,
-- the leader first; workers in per-profile batches; a refused drain fails that host alone.
local action = require "cargoship.action"
local common = require "cargoship.phases.lib.engine_common"
local facts = require "cargoship.facts.host"
local rollout = require "cargoship.phases.lib.rollout"
local uploads = require "cargoship.phases.lib.uploads"

local M = {}

-- Files other phases keep in a managed directory: never stale here.
M.KEPT = { [uploads.RELEASE] = true }

-- -> writes, removes, restart (true when a restart is needed)
function M.drift(ctx, host)
  local eng, node = ctx.engine, common.node(host)
  local files, dirs = eng:sync_files(node, common.cluster(ctx)), eng:sync_dirs(node)
  local paths, dir_paths, depth, desired = {}, {}, {}, {}
  for _, f in ipairs(files) do
    paths[#paths + 1] = f.path
    desired[f.path] = true
  end
  for _, d in ipairs(dirs) do
    dir_paths[#dir_paths + 1] = d.dir
    depth[d.dir] = d.depth
  end
  local have, err = facts.gather(host, { files = paths, dirs = dir_paths, depth = depth })
  if not have then error(err, 0) end
  local writes, removes, restart = {}, {}, false
  for _, f in ipairs(files) do
    local why = facts.drift(have.files[f.path], { content = f.content, mode = f.mode or "0600" })
    if why then
      writes[#writes + 1] = action.write { path = f.path, content = f.content, mode = f.mode or "0600",
        dir_mode = "0755", secret = true, say = string.format("write %s (%s)", f.path, why) }
      restart = restart or not f.in_place
    end
  end
  for _, d in ipairs(dirs) do
    for _, name in ipairs(have.dirs and have.dirs[d.dir] or {}) do
      local p = d.dir .. "/" .. name
      if not desired[p] and not M.KEPT[p] and (not d.match or name:match(d.match)) then
        removes[#removes + 1] = action.remove { path = p,
          say = string.format("remove %s (stale: the cluster file no longer renders it)", p) }
        restart = true
      end
    end
  end
  return writes, removes, restart
end

function M.records(ctx, host)
  local writes, removes, restart = M.drift(ctx, host)
  if not restart then return writes end
  return rollout.around(ctx, host, ctx.engine:sync_node(common.node(host), writes, removes))
end

function M.make(o)
  return rollout.make {
    id = o.id, title = o.title, role = o.role, order = o.order,
    reads = { "connection", "facts", "engine_version" },
    creates = { o.role == "controller" and "controllers_synced" or "workers_synced" },
    -- settled: running the package's version, joined. A node the Configure, Initialize or
    -- Upgrade phases take is theirs (an upgrade writes its engine's config again), so no
    -- node is restarted twice in one run and no plan here reads what those phases write.
    selects = function(_, h) return common.settled(h) end,
    records = M.records,
  }
end

return M

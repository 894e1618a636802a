-- Phase "Configure engine": the engine's config files, registries, policies and join tokens on every node with work.
--
-- A node running the package's version has nothing to do (engine_common.settled): config
-- drift on running nodes is the sync phases' business (engines.md §5.4). Elsewhere each file
-- of engine:static_files(node, cluster) the host does not already hold (content, mode and
-- owner, read in one round trip by facts.host) is one write record, and only missing
-- directories are made: the plan lists what will change, not what might; files an engine
-- writes at join time (join_files) are the Initialize phases'. The runtime (containerd) is
-- restarted when one of its own files is written, else only enabled and started. An engine
-- with secret_at_configure gets the join secret here: the
-- leader's when it has one, else a new one (engine:new_secret over ctx:random bytes),
-- written on each node as engine:secret_files says. Sets ctx.join_secret (nil otherwise).
local action = require "cargoship.action"
local common = require "cargoship.phases.lib.engine_common"
local facts = require "cargoship.facts.host"
local shell = require "cargoship.shell"

local M = {
  id = "configure_engine",
  title = "Configure engine",
  reads = { "connection", "facts", "engine_version" },
  creates = { "engine_config" },
}

M.SECRET_BYTES = 128

-- Reads the leader's join secret once (a read; a new secret is made here, not written).
function M.prepare(ctx)
  -- without a package there is nothing to configure from
  if not (ctx.engine and ctx.distro) then return {} end
  local work = {}
  for _, h in ipairs(ctx.hosts) do
    if not common.settled(h) then work[#work + 1] = h end
  end
  if #work > 0 and ctx.engine.secret_at_configure and ctx.leader then
    local out = ctx.leader:probe(ctx.engine:join_secret_read())
    ctx.join_secret = ctx.engine:parse_join_secret(out) or ctx.engine:new_secret(ctx:random(M.SECRET_BYTES))
  end
  return work
end

-- The paths to read: every file, then every directory holding one (in order of first use).
local function paths_of(files)
  local paths, dirs, seen = {}, {}, {}
  for _, f in ipairs(files) do
    paths[#paths + 1] = f.path
    local d = f.path:match("^(.*)/[^/]*$")
    if d and d ~= "" and not seen[d] then seen[d] = true; dirs[#dirs + 1] = d end
  end
  for _, d in ipairs(dirs) do paths[#paths + 1] = d end
  return paths, dirs
end

function M.assess(ctx, host)
  if not (ctx.engine and ctx.distro) or common.settled(host) then return {} end
  local eng, node = ctx.engine, common.node(host)
  local files = eng:static_files(node, common.cluster(ctx))
  local secret = eng.secret_at_configure and eng:secret_files(node, ctx.join_secret) or {}
  local all = {}
  for _, f in ipairs(files) do all[#all + 1] = f end
  for _, a in ipairs(secret) do all[#all + 1] = a end
  local paths, dirs = paths_of(all)
  local have, err = facts.gather(host, { files = paths })
  if not have then error(err, 0) end
  local missing = {}
  for _, d in ipairs(dirs) do
    local f = have.files[d]
    if not (f and f.exists and f.type == "dir") then missing[#missing + 1] = d end
  end
  local out = {}
  if #missing > 0 then
    out[1] = action.run { cmd = "mkdir -p -- " .. shell.words(table.unpack(missing)),
                         say = "create " .. table.concat(missing, ", ") }
  end
  local runtime_paths, runtime_written = {}, false
  for _, f in ipairs(eng.runtime_files and eng:runtime_files() or {}) do runtime_paths[f.path] = true end
  for _, f in ipairs(files) do
    if facts.drift(have.files[f.path], f) then
      out[#out + 1] = action.write { path = f.path, content = f.content, mode = f.mode, secret = true }
      runtime_written = runtime_written or runtime_paths[f.path] == true
    end
  end
  -- the runtime reads its config.toml only when it starts; the engine says how to wait for it
  for _, svc in ipairs(eng.runtime_services or {}) do
    out[#out + 1] = action.service { verb = "enable", service = svc }
    out[#out + 1] = action.service { verb = runtime_written and "restart" or "start", service = svc }
  end
  if eng.runtime_services and #eng.runtime_services > 0 then out[#out + 1] = eng:runtime_wait() end
  for _, a in ipairs(secret) do
    if a.kind ~= "write" or facts.drift(have.files[a.path], a) then out[#out + 1] = a end
  end
  return out
end

return M

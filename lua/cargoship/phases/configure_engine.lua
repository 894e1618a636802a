-- Phase "Configure engine": the engine's config files, registries, policies and join tokens on every node with work.
--
-- A node running the package's version has nothing to do (engine_common.settled): config
-- drift on running nodes is the sync phases' business (engines.md §5.4). Elsewhere every file
-- of engine:static_files(node, cluster) is one write record (skipped by host:apply when
-- the host already has it); files an engine writes at join time (join_files) are the
-- Initialize phases'. An engine with secret_at_configure gets the join secret here: the
-- leader's when it has one, else a new one (engine:new_secret over ctx:random bytes),
-- written on each node as engine:secret_files says. Sets ctx.join_secret (nil otherwise).
local action = require "cargoship.action"
local common = require "cargoship.phases.lib.engine_common"
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

function M.assess(ctx, host)
  if not (ctx.engine and ctx.distro) or common.settled(host) then return {} end
  local eng, node = ctx.engine, common.node(host)
  local files = eng:static_files(node, common.cluster(ctx))
  local secret = eng.secret_at_configure and eng:secret_files(node, ctx.join_secret) or {}
  -- host:apply writes beside the target: the directories must exist first
  local dirs, seen = {}, {}
  local function dir_of(path)
    local d = path:match("^(.*)/[^/]*$")
    if d and d ~= "" and not seen[d] then seen[d] = true; dirs[#dirs + 1] = d end
  end
  for _, f in ipairs(files) do dir_of(f.path) end
  for _, a in ipairs(secret) do dir_of(a.path) end
  local out = { action.run { cmd = "mkdir -p -- " .. shell.words(table.unpack(dirs)),
                             say = "create " .. table.concat(dirs, ", ") } }
  for _, f in ipairs(files) do
    out[#out + 1] = action.write { path = f.path, content = f.content, mode = f.mode, secret = true }
  end
  -- the runtime reads its new config.toml only when it starts
  for _, svc in ipairs(eng.runtime_services or {}) do
    out[#out + 1] = action.service { verb = "enable", service = svc }
    out[#out + 1] = action.service { verb = "restart", service = svc }
  end
  for _, a in ipairs(secret) do out[#out + 1] = a end
  return out
end

return M

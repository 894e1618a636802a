-- Phase "Configure engine": the engine's config files, registries, policies and join tokens on every node with work.
--
-- A node running the package's version has nothing to do (engine_common.settled): config
-- drift on running nodes is the sync phases' business (engines.md §5.4). Elsewhere every file
-- of engine:config_files(node, cluster) is one write record (skipped by host:apply when
-- the host already has it). Rancher family: the join secret is the leader's token files when
-- it has them, else a new one (64 random characters each); controllers get both token files,
-- workers the agent token only. Upstream: a node other than the leader gets its
-- JoinConfiguration at join time (Initialize phases), with a token created then, since
-- bootstrap tokens expire; here it gets the containerd, registry and policy files.
-- Sets ctx.join_secret (rancher: {token, agent_token}; upstream: nil).
local action = require "cargoship.action"
local common = require "cargoship.phases.lib.engine_common"
local shell = require "cargoship.shell"

local M = {
  id = "configure_engine",
  title = "Configure engine",
  reads = { "connection", "facts", "engine_version" },
  creates = { "engine_config" },
}

local function rancher(eng) return eng.agent_token_path ~= nil end

-- Reads the leader's join secret once (a read; a new secret is made here, not written).
function M.prepare(ctx)
  -- without a package there is nothing to configure from
  if not (ctx.engine and ctx.distro) then return {} end
  local work = {}
  for _, h in ipairs(ctx.hosts) do
    if not common.settled(h) then work[#work + 1] = h end
  end
  if #work > 0 and rancher(ctx.engine) and ctx.leader then
    local out = ctx.leader:probe(ctx.engine:join_secret_read())
    local secret = ctx.engine:parse_join_secret(out)
    if not secret then
      local crypto = require "cargoship.crypto"
      secret = ctx.engine:new_secret(crypto.random(128))
    end
    ctx.join_secret = secret
  end
  return work
end

function M.assess(ctx, host)
  if not (ctx.engine and ctx.distro) or common.settled(host) then return {} end
  local eng, node = ctx.engine, common.node(host)
  local cluster = common.cluster(ctx)
  local files
  if rancher(eng) then
    files = eng:config_files(node, cluster)
  else
    files = {}
    local leader = cluster.leader and cluster.leader.name == node.name
    for i, f in ipairs(eng:config_files(node, leader and cluster or setmetatable(
        { secret = { token = "-", ca_cert_hash = "-" } }, { __index = cluster }))) do
      -- the kubeadm document of a joining node is written at join time, with a fresh token
      if leader or i > 1 then files[#files + 1] = f end
    end
  end
  -- host:apply writes beside the target: the directories must exist first
  local dirs, seen = {}, {}
  local function dir_of(path)
    local d = path:match("^(.*)/[^/]*$")
    if d and d ~= "" and not seen[d] then seen[d] = true; dirs[#dirs + 1] = d end
  end
  for _, f in ipairs(files) do dir_of(f.path) end
  if rancher(eng) then dir_of(eng.token_path) end
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
  if rancher(eng) then
    local s = ctx.join_secret
    if not s then error("no join secret: the cluster has no controller", 0) end
    if node.role == "controller" then
      for _, a in ipairs(eng:join_secret_write(s)) do out[#out + 1] = a end
    else
      out[#out + 1] = action.write { path = eng.agent_token_path, content = s.agent_token .. "\n", mode = "0600",
                                     secret = true, say = "write the agent join token " .. eng.agent_token_path }
    end
  end
  return out
end

return M

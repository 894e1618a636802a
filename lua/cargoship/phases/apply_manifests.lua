-- Phase "Apply manifests": the package's raw manifests (a CNI, typically), kubectl-applied from the leader in order.
--
-- Only for an engine that does not apply its manifests directory itself (engine.applies_manifests): each path of
-- spec.config.manifests, delivered by "Upload files to hosts", is `kubectl apply -f` on the
-- leader: a kube action, which the host retries while the API settles. A leader that was running the package's version
-- before this run has them already: nothing to do.
local action = require "cargoship.action"
local common = require "cargoship.phases.lib.engine_common"

local M = {
  id = "apply_manifests",
  title = "Apply manifests",
  reads = { "connection", "facts", "engine_version", "controllers" },
  creates = { "manifests" },
}

local function manifests(ctx)
  if not (ctx.engine and not ctx.engine.applies_manifests and ctx.distro) then return {} end
  return ctx.distro.manifests or {}
end

function M.prepare(ctx)
  if #manifests(ctx) == 0 or not ctx.leader then return {} end
  return { ctx.leader }
end

function M.assess(ctx, host)
  if host ~= ctx.leader or common.settled(host) then return {} end
  local out = {}
  for _, path in ipairs(manifests(ctx)) do
    out[#out + 1] = action.kube { verb = "apply", path = path, node = host.name, cmd = ctx.engine:apply(path) }
  end
  return out
end

-- In order, on the leader only.
function M.run(ctx, hosts)
  for _, h in ipairs(hosts) do
    local ok, err = common.apply_one(ctx, h)
    if not ok then return nil, err end
  end
  return true
end

return M

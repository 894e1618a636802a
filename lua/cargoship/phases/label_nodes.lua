-- Phase "Labeling nodes with their profile group": node-role.kubernetes.io/<profile>=true on each node, via the leader.
--
-- With --label-nodes. assess, on the leader: one `get nodes -o json` there (facts.kube);
-- for every host with a profile, its node (the one phase 6 matched, else the node name
-- the host registers under) gets one kube label record when the label is missing or set
-- to anything but "true". A node not registered yet (a host the install phases of this
-- run add) is planned unless the host's own engine labels set the label at registration.
-- The plan names each node and label; a second run has nothing to do. The Go tool labels
-- from the operator's machine through the API; this goes through the leader (engines.md §6.4).
local action = require "cargoship.action"
local common = require "cargoship.phases.lib.engine_common"
local kube = require "cargoship.facts.kube"

local M = {
  id = "label_nodes",
  title = "Labeling nodes with their profile group",
  reads = { "connection", "facts", "engine_version", "controllers", "workers" },
  creates = { "node_labels" },
}

M.PREFIX = "node-role.kubernetes.io/"

function M.prepare(ctx)
  local o = ctx.options or {}
  if not (o.label_nodes and ctx.leader) then return {} end
  return { ctx.leader }
end

-- The node name host is known by in the cluster.
local function node_name(host)
  return (host.facts and host.facts.node) or common.node(host).name
end

-- The label records for the cluster's nodes as listed (by_name): pure.
-- -> records
function M.records(eng, hosts, by_name)
  local out = {}
  for _, h in ipairs(hosts) do
    local profile = h.config and h.config.profile
    if profile then
      local key, name = M.PREFIX .. profile, node_name(h)
      local node = by_name[name]
      local have
      if node then have = node.labels[key]
      else have = (common.node(h).labels or {})[key] end
      if have ~= "true" then
        out[#out + 1] = action.kube { verb = "label", node = name, cmd = eng:label(name, { [key] = "true" }),
          say = string.format("label node %s %s=true%s", name, key,
            have and string.format(" (was %q)", have) or "") }
      end
    end
  end
  return out
end

function M.assess(ctx, host)
  if host ~= ctx.leader then return {} end
  if not ctx.engine then error("no engine known: give --distro PACKAGE, or install the cluster first", 0) end
  local nodes, by_name = kube.gather(host, ctx.engine)
  if not nodes then error(host.name .. ": cannot list the cluster's nodes: " .. tostring(by_name), 0) end
  return M.records(ctx.engine, ctx.hosts, by_name)
end

return M

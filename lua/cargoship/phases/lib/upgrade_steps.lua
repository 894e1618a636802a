-- phases.lib.upgrade_steps: phases 23-24's steps: drain, uncordon, Ready at the new version, workloads back.
--
-- M.new() -> steps, state (one pair per phase); state is what the phase's run reads:
--   cordoned[host name]     the drain began and no uncordon has run since
--   drain_failed[host name] the drain's failure ("drain node w1 failed: pod ns/p could not be evicted ...")
-- drain: the ReplicaSets and StatefulSets not at their ready counts before it are noted (not
-- the drain's doing), then the action.kube drain record runs on the leader (host:apply: the
-- write gate; kubectl drain cordons, evicts through the eviction API, retries a refused
-- eviction until --timeout). uncordon: likewise. wait_ready: engine_common's, then until the
-- leader lists the node's kubelet at the package's version. wait_workloads: until every
-- ReplicaSet and StatefulSet ready before the drain is ready again, within the step's timeout.
local action = require "cargoship.action"
local cjson = require "cjson"
local common = require "cargoship.phases.lib.engine_common"
local engine = require "distros.engine"
local kube = require "cargoship.facts.kube"

local M = {}

M.WORKLOADS_INTERVAL = 2   -- seconds between two listings of the workloads

-- kubectl's workload list -> {"ns/kind/name" = true} of those below their ready count | nil, why
function M.unready(text)
  local ok, doc = pcall(cjson.decode, text or "")
  if not ok or type(doc) ~= "table" or type(doc.items) ~= "table" then return nil, "kubectl printed no list" end
  local out = {}
  for _, it in ipairs(doc.items) do
    local md, sp, st = it.metadata or {}, it.spec or {}, it.status or {}
    local want = math.tointeger(sp.replicas) or 1
    if want > 0 and (math.tointeger(st.readyReplicas) or 0) < want then
      out[string.format("%s/%s/%s", tostring(md.namespace), tostring(it.kind), tostring(md.name))] = true
    end
  end
  return out
end

local function on_leader(ctx, rec)
  local _, err = ctx.leader:apply({ rec })
  if err then return nil, err end
  return true
end

local function workloads(ctx)
  local out, err, code = ctx.leader:probe(ctx.engine:workloads(), { timeout = 60 })
  if not out or code ~= 0 then return nil, tostring(out and (err ~= "" and err or out) or err) end
  return M.unready(out)
end

function M.new()
  local steps = setmetatable({}, { __index = common.steps })
  local state = { cordoned = {}, drain_failed = {}, before = {} }

  function steps.drain(ctx, host, a)
    state.drain_failed[host.name] = nil
    state.before[host.name] = workloads(ctx) or {}
    state.cordoned[host.name] = true
    local ok, err = on_leader(ctx, action.kube { verb = "drain", node = a.node, cmd = a.cmd, timeout = a.timeout })
    if ok then return true end
    err = tostring(err):gsub("^" .. ctx.leader.name:gsub("%p", "%%%0") .. ": ", "")
    state.drain_failed[host.name] = err
    return nil, err
  end

  function steps.uncordon(ctx, host, a)
    local ok, err = on_leader(ctx, action.kube { verb = "uncordon", node = a.node, cmd = a.cmd })
    if ok then state.cordoned[host.name] = nil end
    return ok, err
  end

  function steps.wait_ready(ctx, host, a)
    local ok, err = common.steps.wait_ready(ctx, host, a)
    if not ok or not a.version then return ok, err end
    local limit = (ctx.options and ctx.options.ready_timeout) or common.READY_TIMEOUT
    local seen = ctx:now()
    local vok, why = ctx:wait_until(function()
      local at, out, lerr, code = ctx:leader_listing(ctx.engine:get_nodes(), seen)
      seen = at
      if not out or code ~= 0 then return nil, tostring(out and lerr or lerr) end
      local _, by = kube.parse(out)
      local n = by and by[a.node]
      if not n then return nil, "not listed" end
      if n.kubelet_version and engine.compare_versions(n.kubelet_version, a.version) == 0 then return true end
      return nil, "its kubelet reports " .. tostring(n.kubelet_version)
    end, { timeout = limit, interval = common.READY_INTERVAL })
    if vok then return true end
    return nil, string.format("node %s is Ready but not at %s after %g s: %s", a.node, a.version, limit, why)
  end

  function steps.wait_workloads(ctx, host, a)
    local before = state.before[host.name] or {}
    local ok, why = ctx:wait_until(function()
      local now, err = workloads(ctx)
      if not now then return nil, err end
      local missing = {}
      for k in pairs(now) do
        if not before[k] then missing[#missing + 1] = k end
      end
      if #missing == 0 then return true end
      table.sort(missing)
      return nil, "not at their ready counts: " .. table.concat(missing, ", ")
    end, { timeout = a.timeout or 300, interval = M.WORKLOADS_INTERVAL })
    if ok then return true end
    return nil, string.format("the workloads drained from node %s are not back after %g s (%s)", a.node,
      a.timeout or 300, why)
  end

  return steps, state
end

return M

-- phases.lib.initialize: phases 20 and 22 built from one description: install and start nodes not running yet.
--
-- M.make{id, title, role, order = "serial"|"batches"} -> phase. A node of that role has work
-- when its engine service is not running; a running node (at the package's version or not:
-- upgrading is phases 23-24) has none. Work per node, as records: install_engine (a step:
-- the engine files the upload phases staged, through the package manager or moved into
-- place; skipped when the package's version is already installed), then the engine's start
-- (rancher: start, enable, wait until Ready through the leader's kubectl; upstream: kubeadm
-- init on the leader, kubeadm join elsewhere with a token created on the leader at that
-- moment, and a certificate key for extra control planes).
-- serial: the leader first, then one node at a time, each Ready before the next starts;
-- batches: per-profile batches (engine_common.batches), a batch at a time.
-- A failure names the host and the cause, with the service's recent log for a failed start.
local action = require "cargoship.action"
local common = require "cargoship.phases.lib.engine_common"

local M = {}


-- A node of the role whose service is not running, or runs without having joined.
local function has_work(host, role)
  return host.role == role and not common.up(host)
end

local function is_leader(ctx, host) return ctx.leader == host end

-- The heartbeat of this host's node as phase 6 listed it, when the cluster knows it already.
local function old_heartbeat(ctx, host)
  for _, n in ipairs(ctx.nodes or {}) do
    if n.host == host then return n.heartbeat end
  end
end

local function records(ctx, host)
  local out = setmetatable({}, { __index = { after = old_heartbeat(ctx, host) } })
  local eng, node = ctx.engine, common.node(host)
  local e = host.facts.engine or {}
  if e.action ~= "same" then
    out[#out + 1] = action.step { name = "install_engine", say = "install " .. eng.name .. " " .. eng.version
      .. " from the staged files" }
  end
  if eng.name == "upstream" and not node.bootstrapped then
    out[#out + 1] = action.service { verb = "enable", service = "kubelet" }
    if is_leader(ctx, host) then
      out[#out + 1] = action.step { name = "kubeadm_init", say = "kubeadm init on " .. node.name }
    else
      out[#out + 1] = action.step { name = "kubeadm_join", say = "kubeadm join " .. node.name
        .. (node.role == "controller" and " as a control plane" or "") }
    end
    out[#out + 1] = eng:wait_ready(node)
  else
    -- enable before start: on runit enabling is what makes the service supervised, and
    -- `sv up` of a service runsvdir has not picked up yet fails
    local acts = eng:start(node, common.cluster(ctx))
    local enable, rest = nil, {}
    for _, a in ipairs(acts) do
      if a.kind == "service" and a.verb == "start" then
        -- running but not joined (a refused token, say): its new config needs a restart
        -- a notify unit's start returns once the engine is up; the engines' own units never
        -- time out (TimeoutStartSec=0), so it gets --ready-timeout, as the Ready wait does
        a = action.service { verb = e.running and "restart" or "start", service = a.service,
          timeout = (ctx.options and ctx.options.ready_timeout) or common.READY_TIMEOUT }
      end
      if a.kind == "service" and a.verb == "enable" then enable = a else rest[#rest + 1] = a end
    end
    if enable then out[#out + 1] = enable end
    for _, a in ipairs(rest) do out[#out + 1] = a end
  end
  for _, a in ipairs(out) do
    if a.kind == "step" and a.name == "wait_ready" then a.after = out.after end
  end
  return setmetatable(out, nil)
end

local steps = require "cargoship.phases.lib.initialize_steps"

function M.make(o)
  local phase = {
    id = o.id,
    title = o.title,
    reads = { "connection", "facts", "engine_version", "engine_config", "staged_engine" },
    creates = { o.role == "controller" and "controllers" or "workers" },
    steps = steps,
  }

  function phase.prepare(ctx)
    if not (ctx.engine and ctx.distro) then return {} end
    local work = {}
    for _, h in ipairs(ctx.hosts) do
      if has_work(h, o.role) then work[#work + 1] = h end
    end
    return work
  end

  function phase.assess(ctx, host)
    if not (ctx.engine and ctx.distro) or not has_work(host, o.role) then return {} end
    return records(ctx, host)
  end

  function phase.run(ctx, hosts)
    if o.order == "serial" then
      local list = {}
      for _, h in ipairs(hosts) do
        if is_leader(ctx, h) then table.insert(list, 1, h) else list[#list + 1] = h end
      end
      for _, h in ipairs(list) do
        local ok, err = common.apply_one(ctx, h)
        if not ok then return nil, err end
      end
      return true
    end
    for _, batch in ipairs(common.batches(ctx, hosts)) do
      local ok, failures = ctx:each(batch, function(h) return common.apply_one(ctx, h) end)
      if not ok then return nil, failures end
    end
    return true
  end

  return phase
end

return M

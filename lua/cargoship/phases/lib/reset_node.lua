-- phases.lib.reset_node: Reset Worker / Controller: drain, stop the engine, delete the node through a controller.
--
-- M.make{id, title, role} -> phase (engines.md §4.4). A host of that role has work when it is
-- a target of the run (M.targeted: every host, or those --target-hosts names) and its
-- engine service runs. Its records, decided at assess from the facts of phases 1-6 alone,
-- so the plan is what runs: a step `drain` through the controller that stays (unless
-- --no-drain, or no controller stays), the engine's stop verb on the host, then a step
-- `delete_node` through that controller (none when nothing stays: the last controller of a
-- whole-cluster reset); a controller whose removal leaves a single running one is deleted
-- before its engine stops (engines.md §4.4: the delete needs its datastore vote). A drain or
-- delete that fails only warns (the host is being removed either way); a failed stop fails it.
-- Order: workers in per-profile batches (phases.lib.order); controllers one at a time in
-- reverse config order, the leader last, so the leader never goes while another stays.
-- The controller that stays (M.stays): the leader when it is not a target, else the first
-- running controller that is not a target, else (whole-cluster reset) the leader until its
-- own turn. Engine knowledge (the stop, kubectl words) comes from distros/ verbs.
local action = require "cargoship.action"
local engine = require "distros.engine"
local order = require "cargoship.phases.lib.order"

local M = {}

M.DRAIN_TIMEOUT = 120   -- seconds a reset's drain may take before it is given up (only a warning)

-- Is host a target of this reset? options.target_hosts: {[host name] = true} | nil (every host).
function M.targeted(ctx, host)
  local t = ctx.options and ctx.options.target_hosts
  return t == nil or t[host.name] == true
end

-- The engine class of the host: what phase 5 found on it, else the run's.
function M.engine_of(ctx, host)
  local e = host.facts and host.facts.engine
  return (e and e.type and engine.load(e.type)) or ctx.engine
end

-- M.noted(ctx, host, records) -> records: remembers that a reset phase planned work on host,
-- for "Reload service manager" (assessed after them in the plan and in the run alike).
function M.noted(ctx, host, records)
  if records and #records > 0 then
    ctx.reset_work = ctx.reset_work or {}
    ctx.reset_work[host.name] = true
  end
  return records
end

function M.has_noted(ctx, host) return ctx.reset_work ~= nil and ctx.reset_work[host.name] == true end

-- The targeted hosts, in config order (every reset phase's prepare).
function M.targets(ctx)
  local out = {}
  for _, h in ipairs(ctx.hosts) do if M.targeted(ctx, h) then out[#out + 1] = h end end
  return out
end

local function running(host)
  local e = host.facts and host.facts.engine
  return e ~= nil and e.running == true
end

local function has_work(ctx, host, role)
  return host.role == role and M.targeted(ctx, host) and running(host) and M.engine_of(ctx, host) ~= nil
end

-- The running controller the cluster operations of host's reset go through, or nil: the
-- leader unless it is a target, else a running controller no target, else the leader while
-- it is not host itself.
function M.stays(ctx, host)
  local lead = ctx.leader
  if lead and running(lead) and not M.targeted(ctx, lead) then return lead end
  for _, h in ipairs(ctx.hosts) do
    if h.role == "controller" and running(h) and not M.targeted(ctx, h) then return h end
  end
  if lead and lead ~= host and running(lead) then return lead end
  return nil
end

-- Controllers reset after host in this run: reverse config order, the leader last.
local function reset_after(ctx, h, host)
  if not (M.targeted(ctx, h) and h.role == "controller" and host.role == "controller") then return false end
  if host == ctx.leader then return false end
  if h == ctx.leader then return true end
  local at = {}
  for i, x in ipairs(ctx.hosts) do at[x] = i end
  return at[h] < at[host]
end

-- How many running controllers are still up once host's engine stops.
function M.left_after(ctx, host)
  local n = 0
  for _, h in ipairs(ctx.hosts) do
    if h ~= host and h.role == "controller" and running(h) and (not M.targeted(ctx, h) or reset_after(ctx, h, host))
    then n = n + 1 end
  end
  return n
end

function M.records(ctx, host)
  local eng = M.engine_of(ctx, host)
  local node = engine.node_of(host)
  local via = M.stays(ctx, host)
  local out = {}
  local drain = not (ctx.options and ctx.options.no_drain) and via ~= nil
  if drain then
    local opts = { grace_period = ctx.options and ctx.options.drain_grace_period or 30,
                   timeout = ctx.options and ctx.options.drain_timeout or M.DRAIN_TIMEOUT }
    local s = eng:kubectl_step("drain", node, eng:drain(node, opts),
      string.format("cordon and drain node %s through %s (a failure only warns)", node.name, via.name))
    s.via, s.timeout = via.name, opts.timeout + 60
    out[#out + 1] = s
  end
  local delete
  if via then
    delete = eng:kubectl_step("delete_node", node, eng:delete_node(node),
      string.format("delete node %s through %s (a failure only warns)", node.name, via.name))
    delete.via = via.name
  end
  -- a controller whose removal leaves a single one stays up until its node delete commits
  -- (with its engine down, the last two members of the datastore have no quorum to commit it)
  local first = delete and host.role == "controller" and M.left_after(ctx, host) == 1
  if first then out[#out + 1] = delete end
  for _, a in ipairs(eng:stop(node)) do out[#out + 1] = a end
  if delete and not first then out[#out + 1] = delete end
  return out
end

-- A kubectl step on the controller that stays; its failure is a warning on the host.
local function through(kind)
  return function(ctx, host, a)
    local via
    for _, h in ipairs(ctx.hosts) do if h.name == a.via then via = h end end
    local _, err = via:apply({ action.kube { verb = kind, node = a.node, cmd = a.cmd, timeout = a.timeout } })
    if err then host.log:warn("%s of node %s through %s failed (going on): %s", kind, a.node, a.via, tostring(err)) end
    return true
  end
end

function M.make(o)
  local phase = {
    id = o.id, title = o.title,
    reads = { "connection", "facts", "engine_version" },
    creates = { o.role == "controller" and "controllers_reset" or "workers_reset" },
    steps = { drain = through("drain"), delete_node = through("delete_node") },
  }

  function phase.prepare(ctx)
    local work = {}
    for _, h in ipairs(ctx.hosts) do
      if has_work(ctx, h, o.role) then work[#work + 1] = h end
    end
    return work
  end

  function phase.assess(ctx, host)
    if not has_work(ctx, host, o.role) then return {} end
    return M.noted(ctx, host, M.records(ctx, host))
  end

  function phase.run(ctx, hosts)
    if o.role == "controller" then
      local list = {}
      for i = #hosts, 1, -1 do if hosts[i] ~= ctx.leader then list[#list + 1] = hosts[i] end end
      for _, h in ipairs(hosts) do if h == ctx.leader then list[#list + 1] = h end end
      for _, h in ipairs(list) do
        local ok, err = ctx:apply(h)
        if not ok then return nil, { { host = h, err = err } } end
      end
      return true
    end
    local failures = {}
    for _, batch in ipairs(order.batches(ctx, hosts)) do
      local ok, list = ctx:each(batch, function(h) return ctx:apply(h) end)
      if not ok then for _, f in ipairs(list) do failures[#failures + 1] = f end end
    end
    if #failures > 0 then return nil, failures end
    return true
  end

  return phase
end

return M

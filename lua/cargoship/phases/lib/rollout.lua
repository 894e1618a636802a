-- phases.lib.rollout: running nodes taken down and up again in order: the drain/stop/start/Ready/uncordon rules.
--
-- What the Upgrade (23-24) and Sync Registry Config (26-27) phases share. M.make{id, title,
-- role, order = "serial"|"batches", reads, creates, selects(ctx, host) -> bool,
-- records(ctx, host) -> actions, busy(host) -> bool} -> phase. prepare picks the hosts of the
-- role that `selects` keeps; assess returns `records` (nothing: the host has no work); run
-- executes them in order: serial = one at a time in config order, the leader first, a node
-- that leads handing cluster operations to another running controller (not `busy`) while it
-- is down; batches = per-profile batches (phases.lib.order). A drain that fails or times out
-- uncordons that node and leaves it as it was: that host fails (naming the pod the drain
-- named), the others go on. Any other failure uncordons too, and stops the phase after its
-- node (serial) or batch. A node is never left cordoned by us. The steps (drain, uncordon,
-- wait_ready, wait_workloads) are phases.lib.upgrade_steps'.
-- M.around(ctx, host, inner) -> records: cordon and drain through the leader (unless
-- --no-drain), inner (the node's stop ... start, its wait_ready waiting for a heartbeat newer
-- than the one before), uncordon, and after a drain the wait until the workloads it evicted
-- are ready again (bounded by --drain-timeout).
local action = require "cargoship.action"
local common = require "cargoship.phases.lib.engine_common"
local order = require "cargoship.phases.lib.order"

local M = {}

M.DRAIN_GRACE = 120   -- seconds each evicted pod gets (--drain-grace-period)
M.DRAIN_TIMEOUT = 300 -- seconds a drain may take, and the evicted workloads to be back (--drain-timeout)

-- {grace_period, timeout} | false (--no-drain)
function M.drain_opts(options)
  options = options or {}
  if options.no_drain then return false end
  return { grace_period = options.drain_grace_period or M.DRAIN_GRACE,
           timeout = options.drain_timeout or M.DRAIN_TIMEOUT }
end

-- The node's last heartbeat before the run touched it (phase 6's listing), or nil.
function M.old_heartbeat(ctx, host)
  for _, n in ipairs(ctx.nodes or {}) do
    if n.host == host then return n.heartbeat end
  end
end

function M.around(ctx, host, inner)
  local eng, node = ctx.engine, common.node(host)
  local d = M.drain_opts(ctx.options)
  local out = {}
  if d then
    local s = eng:kubectl_step("drain", node, eng:drain(node, d), "cordon and drain node " .. node.name)
    s.timeout = d.timeout + 60
    out[1] = s
  end
  for _, a in ipairs(inner) do
    if a.kind == "step" and a.name == "wait_ready" then a.after = M.old_heartbeat(ctx, host) end
    out[#out + 1] = a
  end
  if d then
    out[#out + 1] = eng:kubectl_step("uncordon", node, eng:uncordon(node), "uncordon node " .. node.name)
    out[#out + 1] = M.wait_workloads(node, d)
  end
  return out
end

function M.wait_workloads(node, d)
  return action.step { name = "wait_workloads", node = node.name, on = "leader", timeout = d.timeout,
    say = string.format("wait until the ReplicaSets and StatefulSets node %s's drain emptied are ready again",
      node.name) }
end

function M.make(o)
  local steps, state = require("cargoship.phases.lib.upgrade_steps").new()
  local busy = o.busy or function() return false end
  local phase = { id = o.id, title = o.title, steps = steps, reads = o.reads, creates = o.creates }

  local function selected(ctx, h)
    return h.role == o.role and o.selects(ctx, h)
  end

  function phase.prepare(ctx)
    if not (ctx.engine and ctx.distro) then return {} end
    local work = {}
    for _, h in ipairs(ctx.hosts) do
      if selected(ctx, h) then work[#work + 1] = h end
    end
    return work
  end

  function phase.assess(ctx, host)
    if not (ctx.engine and ctx.distro) or not selected(ctx, host) then return {} end
    return o.records(ctx, host)
  end

  -- Another controller that is up, to lead while `host` (the leader) is down.
  local function stand_in_leader(ctx, host)
    for _, h in ipairs(ctx.hosts) do
      if h ~= host and h.role == "controller" and common.up(h) and not busy(h) then return h end
    end
    return host
  end

  -- One node: its records; on failure its planned uncordon (never left cordoned by us).
  -- -> true | nil, err, fatal (fatal: not a refused drain: stop after this node or batch)
  local function one(ctx, h)
    local lead = ctx.leader
    if h == lead then ctx.leader = stand_in_leader(ctx, h) end
    local ok, err = common.apply_one(ctx, h)
    local drain_err = state.drain_failed[h.name]
    if not ok then
      for _, a in ipairs(ctx:planned(h)) do
        if a.kind == "step" and a.name == "uncordon" and state.cordoned[h.name] then
          local uok, uerr = ctx:apply(h, { a })
          if not uok then err = err .. "; and uncordoning it failed too: " .. tostring(uerr) end
        end
      end
      if drain_err then
        err = string.format("%s: %s; node uncordoned and left %s", h.name, drain_err,
          o.left and o.left(h) or "as it was")
      end
    end
    ctx.leader = lead
    if ok then return true end
    return nil, err, not drain_err
  end

  -- At the run's end, however it ends: a node whose drain began and whose uncordon never ran
  -- (its host's task cut short: the lock lost with the link, Ctrl-C) is uncordoned through
  -- the leader, so none is left cordoned by us. -> "skipped" when there is none.
  function phase.cleanup(ctx)
    local left = {}
    for _, h in ipairs(ctx.hosts) do
      if state.cordoned[h.name] then left[#left + 1] = h end
    end
    if #left == 0 or not (ctx.engine and ctx.leader) then return "skipped" end
    local errs = {}
    for _, h in ipairs(left) do
      local node = common.node(h)
      local ok, err = steps.uncordon(ctx, h, ctx.engine:kubectl_step("uncordon", node, ctx.engine:uncordon(node),
        "uncordon node " .. node.name))
      if not ok then errs[#errs + 1] = string.format("node %s left cordoned: %s", node.name, tostring(err)) end
    end
    if #errs > 0 then error(table.concat(errs, "; "), 0) end
  end

  function phase.run(ctx, hosts)
    local failures, stop = {}, false
    if o.order == "serial" then
      for _, h in ipairs(order.leader_first(ctx, hosts)) do
        if stop then break end
        local ok, err, fatal = one(ctx, h)
        if not ok then failures[#failures + 1] = { host = h, err = err }; stop = fatal end
      end
    else
      for _, batch in ipairs(order.batches(ctx, hosts)) do
        if stop then break end
        local fatal_in = {}
        local ok, list = ctx:each(batch, function(h)
          local r, err, fatal = one(ctx, h)
          if not r then fatal_in[h] = fatal end
          return r, err
        end)
        if not ok then
          for _, f in ipairs(list) do
            failures[#failures + 1] = f
            stop = stop or fatal_in[f.host] ~= false
          end
        end
      end
    end
    if #failures > 0 then return nil, failures end
    return true
  end

  return phase
end

return M

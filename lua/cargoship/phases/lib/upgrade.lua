-- phases.lib.upgrade: phases 23 and 24 built from one description: nodes up at another version than the package's.
--
-- M.make{id, title, role, order = "serial"|"batches"} -> phase. A node of that role has work
-- when its engine runs, has joined and phase 5 judged it "upgrade" (or an allowed
-- "downgrade"): engine_common.upgrades. Its records, decided at assess: the engine's
-- upgrade verb (distros.engine: cordon and drain through the leader unless --no-drain, then
-- the engine's upgrade_node: stop, install the staged files, the engine's own upgrade step,
-- start, wait Ready), the Ready wait also waiting for the node's kubelet to report the
-- package's version with a heartbeat newer than the one before the restart, then uncordon
-- and, after a drain, a wait until the ReplicaSets and StatefulSets the drain emptied are at
-- their ready counts again (bounded by --drain-timeout), so the next node or batch does not
-- drain the last copies. Steps: phases.lib.upgrade_steps.
-- Order: serial = controllers one at a time in config order (the leader first), a node that
-- leads handing cluster operations to another running controller while it is down;
-- batches = per-profile batches (phases.lib.order). A drain that fails or times out
-- uncordons that node and leaves it at its old version: that host fails (naming the pod the
-- drain named), the others go on. Any other failure uncordons too, and stops the phase after
-- its node (serial) or batch.
local common = require "cargoship.phases.lib.engine_common"
local uploads = require "cargoship.phases.lib.uploads"
local order = require "cargoship.phases.lib.order"
local action = require "cargoship.action"

local M = {}

M.DRAIN_GRACE = 120   -- seconds each evicted pod gets (--drain-grace-period)
M.DRAIN_TIMEOUT = 300 -- seconds a drain may take, and the evicted workloads to be back (--drain-timeout)

local function has_work(host, role)
  return host.role == role and common.upgrades(host)
end

-- {grace_period, timeout} | false (--no-drain)
function M.drain_opts(options)
  options = options or {}
  if options.no_drain then return false end
  return { grace_period = options.drain_grace_period or M.DRAIN_GRACE,
           timeout = options.drain_timeout or M.DRAIN_TIMEOUT }
end

local function old_heartbeat(ctx, host)
  for _, n in ipairs(ctx.nodes or {}) do
    if n.host == host then return n.heartbeat end
  end
end

-- The package's engine files for this host, every one (its version is not the host's), where
-- the upload phases stage them: known from the package alone, so a dry run, before those
-- phases ran, plans what the run does. A package's name from its file name (rpm
-- NAME-VERSION-RELEASE.ARCH.rpm, deb NAME_VERSION_ARCH.deb), for unpinning.
function M.staged(ctx, host)
  local method = uploads.method(ctx, host)
  local items, err = uploads.items(ctx, host, "engine")
  if not items then error(host.name .. ": " .. tostring(err), 0) end
  if not method or #items == 0 then return nil end
  if method == "binary" then
    local moves = {}
    for _, it in ipairs(items) do moves[#moves + 1] = { from = it.path, to = it.final } end
    return { method = "binary", moves = moves }
  end
  local paths, names = {}, {}
  for _, it in ipairs(items) do
    paths[#paths + 1] = it.path
    local base = it.path:match("[^/]+$")
    names[#names + 1] = method == "apt" and base:match("^([^_]+)_")
      or base:gsub("%.rpm$", ""):gsub("%.[^.]+$", ""):match("^(.+)%-[^-]+%-[^-]+$") or nil
  end
  return { method = method, paths = paths, names = #names > 0 and names or nil }
end

function M.records(ctx, host)
  local eng, node = ctx.engine, common.node(host)
  local staged, links = M.staged(ctx, host), {}
  if not staged then
    error(host.name .. ": " .. eng.name .. " " .. tostring(host.facts.engine.version) .. " runs, the package has "
      .. tostring(eng.version) .. ", and no engine files for this host's role, arch and package manager", 0)
  end
  local drain = M.drain_opts(ctx.options)
  local out = {}
  for _, a in ipairs(eng:upgrade(node, common.cluster(ctx), staged, host.os, { drain = drain })) do
    if #links > 0 and a.kind == "service" and (a.verb == "start" or a.verb == "restart") then
      for _, l in ipairs(links) do out[#out + 1] = l end
      links = {}
    end
    if a.kind == "step" and a.name == "wait_ready" then
      a.after, a.version = old_heartbeat(ctx, host), eng.version
      a.say = string.format("wait for node %s Ready at %s", node.name, eng.version)
    end
    out[#out + 1] = a
  end
  if drain then
    out[#out + 1] = action.step { name = "wait_workloads", node = node.name, on = "leader", timeout = drain.timeout,
      say = string.format("wait until the ReplicaSets and StatefulSets node %s's drain emptied are ready again",
        node.name) }
  end
  return out
end

-- Another controller that is up, to lead while `host` (the leader) is down.
local function stand_in_leader(ctx, host)
  for _, h in ipairs(ctx.hosts) do
    if h ~= host and h.role == "controller" and common.up(h) and not has_work(h, "controller") then return h end
  end
  return host
end

function M.make(o)
  local steps, state = require("cargoship.phases.lib.upgrade_steps").new()
  local phase = {
    id = o.id, title = o.title, steps = steps,
    reads = { "connection", "facts", "engine_version" },
    creates = { o.role == "controller" and "controllers_upgraded" or "workers_upgraded" },
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
    return M.records(ctx, host)
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
        err = string.format("%s: %s; node uncordoned and left at %s", h.name, drain_err,
          tostring(h.facts.engine.version))
      end
    end
    ctx.leader = lead
    if ok then return true end
    return nil, err, not drain_err
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

-- phases.lib.initialize: phases 20 and 22 built from one description: install and start nodes not running yet.
--
-- M.make{id, title, role, order = "serial"|"batches"} -> phase. A node of that role has work
-- when its engine service is not running or runs without having joined; a running node (at
-- the package's version or not: upgrading is phases 23-24) has none. Work per node, as
-- records: the install records of the engine files the upload phases staged (phases.lib.install,
-- decided at assess; none when the package's version is installed), then the engine's
-- first_start (enable, then start, or the engine's bootstrap/join step, then wait Ready).
-- Order (phases.lib.order): serial = the leader first, then one node at a time, each Ready
-- before the next starts; batches = per-profile batches, a batch at a time.
-- A failure names the host and the cause, with the service's recent log for a failed start.
local common = require "cargoship.phases.lib.engine_common"
local install = require "cargoship.phases.lib.install"
local order = require "cargoship.phases.lib.order"
local uploads = require "cargoship.phases.lib.uploads"

local M = {}

-- A node of the role whose service is not running, or runs without having joined.
local function has_work(host, role)
  return host.role == role and not common.up(host)
end

-- The heartbeat of this host's node as phase 6 listed it, when the cluster knows it already.
local function old_heartbeat(ctx, host)
  for _, n in ipairs(ctx.nodes or {}) do
    if n.host == host then return n.heartbeat end
  end
end

local function install_records(ctx, host)
  if not common.installs(host) then return {} end
  if not (ctx.distro.os_files and uploads.method(ctx, host)) then
    error(host.name .. ": " .. ctx.engine.name .. " is not installed and no engine files were staged"
      .. " on it (the distro package has no os.files for this host's role, arch and package manager)", 0)
  end
  return install.actions(ctx, host)
end

local function records(ctx, host)
  local eng, node = ctx.engine, common.node(host)
  local out = install_records(ctx, host)
  local e = host.facts.engine or {}
  local after = old_heartbeat(ctx, host)
  for _, a in ipairs(eng:first_start(node, common.cluster(ctx), { leader = ctx.leader == host,
      running = e.running, timeout = (ctx.options and ctx.options.ready_timeout) or common.READY_TIMEOUT })) do
    if a.kind == "step" and a.name == "wait_ready" then a.after = after end
    out[#out + 1] = a
  end
  return out
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
    return order.run(ctx, hosts, o.order, function(h) return common.apply_one(ctx, h) end)
  end

  return phase
end

return M

-- phases.lib.engine_common: what phases 18-25 share: who has work, the node views, waiting for Ready.
--
-- settled(host): the node runs the package's version (distro_facts found its service
-- running and judged "same") and has joined (phase 6 found its node, or listed none): it
-- has nothing to do in any install phase. up(host): running and joined, whatever version.
-- installs(host): the Initialize phases install the staged engine files on it (it is not
-- up and its installed version is not the package's); "Install staged files" leaves it.
-- steps: wait_ready (polls the leader's kubectl until the node is Ready), for the phases'
-- action.step records (a kubectl operation itself is an action.kube record).
local engine = require "distros.engine"

local M = {}

M.READY_TIMEOUT = 300     -- seconds a node may take to report Ready
M.READY_INTERVAL = 1      -- one shared kubectl a round on the leader, however many wait
M.REFUSAL_INTERVAL = 5    -- seconds between reads of a waiting node's service log
M.STATE_INTERVAL = 1      -- seconds between reads of its service manager's state

function M.settled(host)
  local e = host.facts and host.facts.engine
  return e ~= nil and e.running == true and e.joined ~= false and e.action == "same"
end

-- The engine service runs and its node is in the cluster (or no cluster could be listed).
function M.up(host)
  local e = host.facts and host.facts.engine
  return e ~= nil and e.running == true and e.joined ~= false
end

-- Up at another version than the package's: the Upgrade phases (23-24) take it, and only they.
function M.upgrades(host)
  local e = host.facts and host.facts.engine
  return M.up(host) and (e.action == "upgrade" or e.action == "downgrade")
end

function M.installs(host)
  local e = host.facts and host.facts.engine
  return not M.up(host) and not (e and e.action == "same")
end

function M.node(host) return engine.node_of(host) end

function M.cluster(ctx, secret)
  return engine.cluster_view(ctx.hosts, ctx.leader, ctx.cluster, secret or ctx.join_secret)
end

-- The engine's recent service log on host, to show under a failed start.
function M.service_log(host, service)
  if not host.os then return "" end
  local cmd = host.os:service("logs", service)
  if not cmd then return "" end
  local out = host:probe(cmd)
  return out and out ~= "" and ("\n--- recent log of " .. service .. " ---\n" .. out) or ""
end

-- Runs one host's planned records; a failure names the host, the cause and, for a failed
-- start, the service's recent log.
function M.apply_one(ctx, host)
  local ok, err = ctx:apply(host)
  if ok then return true end
  local msg = tostring(type(err) == "table" and (err.err or err[1] and err[1].err) or err)
  if msg:sub(1, #host.name + 2) ~= host.name .. ": " then msg = host.name .. ": " .. msg end
  local svc = ctx.engine and host.role and ctx.engine.services and ctx.engine.services[host.role]
  if svc then msg = msg .. M.service_log(host, svc) end
  return nil, msg
end

-- Why the node's start failed, read off its host while it is waited for (nil: nothing yet):
-- - its service manager has the service down after this start failed (the start_failed
--   verb: systemd's failed or auto-restart states; a start that did not wait for the
--   service to report ready learns it only so);
-- - a refusal the engine logged since this start (engine:start_refused on the service's
--   log): a log unchanged since the wait began says nothing new (a refusal there may be an
--   earlier run's); the refusal must be among its last lines, as the engine keeps retrying.
-- -> function() -> "kind", why | nil
local function start_watch(ctx, host, node)
  local eng, svc = ctx.engine, ctx.engine.services and host.role and ctx.engine.services[host.role]
  local state = svc and host.os and host.os:service("start_failed", svc)
  local cmd = svc and host.os and host.os:service("logs", svc)
  if eng.start_refused == engine.Engine.start_refused then cmd = nil end
  -- the service's state is first asked a STATE_INTERVAL into the wait: a node Ready at the
  -- first listing (the usual case) costs its host one round trip here (the log's base), not two
  local base, last, last_state = nil, nil, ctx:now()
  return function()
    local now = ctx:now()
    if state and not (last_state and now - last_state < M.STATE_INTERVAL) then
      last_state = now
      local out, _, code = host:probe(state)
      if code == 0 and out and out:match("%S") then return "failed", (out:gsub("%s+$", "")) end
    end
    if not cmd or (last and now - last < M.REFUSAL_INTERVAL) then return nil end
    last = now
    local log = host:probe(cmd) or ""
    if base == nil then base = log end
    if log == base then return nil end
    local tail = {}
    for line in log:gmatch("[^\n]+") do
      tail[#tail + 1] = line
      if #tail > 3 then table.remove(tail, 1) end
    end
    local why = eng:start_refused(table.concat(tail, "\n"), node)
    if why then return "refused", why end
  end
end

M.steps = {}

-- Polls the leader until the node is Ready; the leader itself may still be starting its API.
-- Nodes waited for at the same time share the leader's listing (ctx:leader_listing): the
-- Ready check lists every node, so one run of it answers every waiter.
function M.steps.wait_ready(ctx, host, a)
  local leader = ctx.leader
  local limit = a.timeout or (ctx.options and ctx.options.ready_timeout) or M.READY_TIMEOUT
  local seen = ctx:now()   -- only a listing taken after the wait began counts
  local watch = start_watch(ctx, host, a.node)
  local failed, refusal
  local ok, why = ctx:wait_until(function()
    failed, refusal = watch()
    if failed then return true end
    local at, out, err, code = ctx:leader_listing(a.cmd, seen)
    seen = at
    local line = out and code == 0 and ctx.engine:ready_line(out, a.node)
    if line and ctx.engine:parse_ready(line, a.after) then return true end
    if not out or code ~= 0 then return nil, out and (err ~= "" and err or out) or tostring(err) end
    if not line then return nil, "not registered" end
    if a.after and ctx.engine:parse_ready(line) then
      return nil, "no heartbeat from its kubelet since the start (the last was "
        .. (line:match("%S+%s+(%S+)") or "?") .. "; before the start: " .. a.after .. ")"
    end
    return nil, "Ready is " .. (line:match("%S+") or "unknown")
  end, { timeout = limit, interval = M.READY_INTERVAL })
  if failed == "refused" then
    return nil, string.format("node %s: its engine refused the start: %s", a.node, refusal)
  elseif failed then
    return nil, string.format("node %s: its engine's service did not start: %s", a.node, refusal)
  end
  if ok then return true end
  return nil, string.format("node %s is not Ready after %g s (through %s's kubectl: %s)", a.node,
    limit, leader.name, (why:gsub("%s+$", "")))
end

return M

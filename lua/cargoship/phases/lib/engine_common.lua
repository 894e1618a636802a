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

M.steps = {}

-- Polls the leader until the node is Ready; the leader itself may still be starting its API.
-- Nodes waited for at the same time share the leader's listing (ctx:leader_listing): the
-- Ready check lists every node, so one run of it answers every waiter.
function M.steps.wait_ready(ctx, _, a)
  local leader = ctx.leader
  local limit = a.timeout or (ctx.options and ctx.options.ready_timeout) or M.READY_TIMEOUT
  local seen = ctx:now()   -- only a listing taken after the wait began counts
  local ok, why = ctx:wait_until(function()
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
  if ok then return true end
  return nil, string.format("node %s is not Ready after %g s (through %s's kubectl: %s)", a.node,
    limit, leader.name, (why:gsub("%s+$", "")))
end

return M

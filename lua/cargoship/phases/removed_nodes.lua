-- Phase "Checking for nodes no longer in the config": a node no host matches stops the apply (engines.md 5.1).
--
-- Apply cannot remove a node (its host block, with the SSH details, is gone), and a typo
-- must not destroy one; so a joined node that matches no host is an error, or a warning
-- with ctx.options.allow_unmanaged_nodes. Only checked when some controller service runs;
-- nodes are listed on the leader with the engine's kubectl (`get nodes -o json`). Failing
-- to list them only warns. Matching is generous and case-insensitive: node name or any
-- node address against each host's hostname, FQDN, node name, private and connection
-- addresses, and every global address the host has.
-- Stores ctx.nodes (name, addresses, role, host), host.facts.node (the matched node's
-- name: the one name drain/uncordon must use) and host.facts.engine.joined (false for a
-- host whose engine service runs but has no node in the cluster). run returns {summary = "..."}.
local cjson = require "cjson"
local engine = require "distros.engine"
local network = require "cargoship.os.network"

local M = {
  id = "removed_nodes",
  title = "Checking for nodes no longer in the config",
  dry_run = "read_only",
  reads = { "connection", "facts", "engine_version" },
  creates = { "nodes" },
}

M.CONTROLLER_ROLES = { "control-plane", "master", "etcd" }

-- The leader, when some controller service runs; nothing to check otherwise.
function M.prepare(ctx)
  if ctx.engine_running and ctx.leader then return { ctx.leader } end
  return {}
end

-- `kubectl get nodes -o json` -> list of {name, addresses, role, ready = "True"|"False"|
-- "Unknown"|nil, heartbeat = the Ready condition's lastHeartbeatTime} | nil, why. Pure.
function M.parse_nodes(text)
  local ok, doc = pcall(cjson.decode, text or "")
  if not ok or type(doc) ~= "table" or type(doc.items) ~= "table" then
    return nil, "kubectl printed no node list"
  end
  local nodes = {}
  -- JSON null (cjson.null) and other non-objects read as empty: no field of kubectl's output is trusted
  local function obj(v) return type(v) == "table" and v or {} end
  for _, item in ipairs(doc.items) do
    local md, st = obj(obj(item).metadata), obj(obj(item).status)
    local n = { name = md.name, addresses = {}, role = "worker" }
    for _, c in ipairs(type(st.conditions) == "table" and st.conditions or {}) do
      if type(c) == "table" and c.type == "Ready" then
        n.ready = c.status
        n.heartbeat = type(c.lastHeartbeatTime) == "string" and c.lastHeartbeatTime or nil
      end
    end
    for _, a in ipairs(type(st.addresses) == "table" and st.addresses or {}) do
      if type(a) == "table" and type(a.address) == "string" then n.addresses[#n.addresses + 1] = a.address end
    end
    local labels = type(md.labels) == "table" and md.labels or {}
    for _, r in ipairs(M.CONTROLLER_ROLES) do
      if labels["node-role.kubernetes.io/" .. r] ~= nil then n.role = "controller" end
    end
    if type(n.name) == "string" then nodes[#nodes + 1] = n end
  end
  return nodes
end

local function add_key(keys, v)
  if type(v) ~= "string" or v == "" then return end
  v = network.canonical(v):lower()
  keys[v] = true
  -- "node1.example.com" also answers to "node1": names are compared short as well
  if not network.ipv4(v) and not network.ipv6(v) then keys[v:match("^[^.]+")] = true end
end

local function host_keys(h)
  local keys, f, c = {}, h.facts, h.config
  local values = table.pack(f.hostname, f.fqdn, f.node_name, c.hostname, f.private_address, f.private_ipv4,
    f.private_ipv6, (c.connection or {}).address)
  for i = 1, values.n do add_key(keys, values[i]) end
  for _, a in ipairs(f.addresses or {}) do add_key(keys, a) end
  return keys
end

-- Pairs nodes with hosts -> unmanaged nodes; sets node.host and host.facts.node. Pure.
function M.match(nodes, hosts)
  local keyed = {}
  for i, h in ipairs(hosts) do keyed[i] = host_keys(h) end
  local unmanaged = {}
  for _, n in ipairs(nodes) do
    local nk = {}
    add_key(nk, n.name)
    for _, a in ipairs(n.addresses) do add_key(nk, a) end
    for i, h in ipairs(hosts) do
      for k in pairs(nk) do
        if keyed[i][k] then n.host = h break end
      end
      if n.host then break end
    end
    if n.host then n.host.facts.node = n.name else unmanaged[#unmanaged + 1] = n end
  end
  return unmanaged
end

function M.describe(unmanaged)
  local parts = {}
  for _, n in ipairs(unmanaged) do
    parts[#parts + 1] = string.format("  %s (%s%s)", n.name, n.role,
      #n.addresses > 0 and (", " .. table.concat(n.addresses, ", ")) or "")
  end
  return string.format("the cluster has %d node%s that no host in the config manages:\n%s\n"
    .. "apply never removes a node: put the host back in the config, remove it with reset, or pass"
    .. " --allow-unmanaged-nodes to go on", #unmanaged, #unmanaged == 1 and "" or "s", table.concat(parts, "\n"))
end

function M.run(ctx, hosts)
  if #hosts == 0 then
    local summary = "no controller service is running: no cluster to compare, nothing to check"
    ctx.log:info("%s", summary)
    return { summary = summary }
  end
  local leader = hosts[1]
  local e, why = ctx.engine, "no engine type known"
  if not e then e, why = engine.load((leader.facts.engine or {}).type) end
  local listed
  if e then
    ctx:each({ leader }, function(h)
      local out, err, code = h:probe(e:kubectl({ "get", "nodes", "-o", "json" }))
      if not out then why = err
      elseif code ~= 0 then why = string.format("kubectl exited %d: %s", code, (err or ""):match("[^\n]*"))
      else listed, why = M.parse_nodes(out) end
      return true
    end)
  end
  if not listed then
    local summary = "could not list the cluster's nodes on " .. leader.name .. ": " .. tostring(why)
    ctx.log:warn("%s; removed nodes not checked", summary)
    return { summary = summary }
  end
  local unmanaged = M.match(listed, ctx.hosts)
  ctx.nodes = listed
  -- a host whose service runs without a node in the cluster (a join refused, say) has not
  -- joined: the install phases configure and restart it (engine_common.settled)
  for _, h in ipairs(ctx.hosts) do
    local fact = h.facts and h.facts.engine
    if fact and fact.running then fact.joined = h.facts.node ~= nil end
  end
  if #unmanaged == 0 then
    local summary = string.format("all %d nodes are in the config", #listed)
    ctx.log:info("%s", summary)
    return { summary = summary }
  end
  local msg = M.describe(unmanaged)
  if not (ctx.options and ctx.options.allow_unmanaged_nodes) then return nil, msg end
  ctx.log:warn("%s (allowed by --allow-unmanaged-nodes)", msg)
  return { summary = string.format("%d unmanaged node(s), allowed", #unmanaged) }
end

return M

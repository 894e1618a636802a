-- cargoship.facts.kube: the nodes as the cluster sees them, from one `kubectl get nodes -o json` on the leader.
--
-- M.command(engine) -> the leader's listing command (engine:get_nodes(), distros.engine).
-- M.parse(text) -> nodes, by_name | nil, why. Pure. Each node:
--   {name, addresses = {"10.0.0.1", "cp1", ...} (the API's order), by_type = {InternalIP = {...},
--    Hostname = {...}}, kubelet_version = "v1.35.4+rke2r1" | nil, labels = {k = v},
--    taints = {{key, value?, effect}}, unschedulable = bool, role = "controller" | "worker"
--    (a control-plane, master or etcd role label), ready = bool (the Ready condition is True),
--    ready_status = "True" | "False" | "Unknown" | nil (no Ready condition yet),
--    heartbeat = the Ready condition's lastHeartbeatTime | nil}
-- M.gather(host, engine) -> nodes, by_name | nil, why: the listing on host (a read, host:probe).
local cjson = require "cjson"

local M = {}

M.CONTROLLER_ROLES = { "control-plane", "master", "etcd" }

function M.command(engine)
  return engine:get_nodes()
end

local function list(v) return type(v) == "table" and v or {} end
local function str(v) return type(v) == "string" and v or nil end

local function node(item)
  local md, sp, st = list(item.metadata), list(item.spec), list(item.status)
  local n = { name = str(md.name), addresses = {}, by_type = {}, labels = {}, taints = {},
    unschedulable = sp.unschedulable == true, ready = false, role = "worker",
    kubelet_version = str(list(st.nodeInfo).kubeletVersion) }
  for k, v in pairs(list(md.labels)) do
    if type(k) == "string" and type(v) == "string" then n.labels[k] = v end
  end
  for _, r in ipairs(M.CONTROLLER_ROLES) do
    if n.labels["node-role.kubernetes.io/" .. r] ~= nil then n.role = "controller" end
  end
  for _, t in ipairs(list(sp.taints)) do
    if type(t) == "table" and str(t.key) then
      n.taints[#n.taints + 1] = { key = t.key, value = str(t.value), effect = str(t.effect) }
    end
  end
  for _, a in ipairs(list(st.addresses)) do
    if type(a) == "table" and str(a.address) then
      n.addresses[#n.addresses + 1] = a.address
      local ty = str(a.type) or "unknown"
      n.by_type[ty] = n.by_type[ty] or {}
      table.insert(n.by_type[ty], a.address)
    end
  end
  for _, c in ipairs(list(st.conditions)) do
    if type(c) == "table" and c.type == "Ready" then
      n.ready_status = str(c.status)
      n.ready = c.status == "True"
      n.heartbeat = str(c.lastHeartbeatTime)
    end
  end
  return n
end

function M.parse(text)
  local ok, doc = pcall(cjson.decode, text or "")
  if not ok or type(doc) ~= "table" or type(doc.items) ~= "table" then
    return nil, "kubectl printed no node list"
  end
  local nodes, by_name = {}, {}
  for _, item in ipairs(doc.items) do
    if type(item) == "table" then
      local n = node(item)
      if n.name then
        nodes[#nodes + 1] = n
        by_name[n.name] = n
      end
    end
  end
  return nodes, by_name
end

function M.gather(host, engine)
  local out, err, code = host:probe(M.command(engine), { timeout = 30 })
  if not out then return nil, err end
  if code ~= 0 then
    return nil, string.format("%s: kubectl get nodes failed (exit %d): %s", host.name, code,
      ((err ~= "" and err or out):match("[^\n]+") or "no output"))
  end
  return M.parse(out)
end

return M

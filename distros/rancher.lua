-- distros.rancher: what rke2 and k3s share (engines.md §1-§2): config.yaml, registries.yaml, tokens, upgrade, reset.
--
-- Children set: name, binary, binary_paths, version_prefix, services, kubeconfig,
-- kubectl_words, data_dir, config_dir, join_port (rke2 9345: its supervisor; k3s 6443:
-- supervisor and API share the port), killall (the engine's stop-everything script).
-- Verbs added here (node, cluster, staged: see distros.engine):
--   config_path, token_path, agent_token_path          fields derived from config_dir
--   server_url(host) -> "https://host:<join_port>"
--   render_config(node, cluster) -> {path, content, mode = "0600"}        config.yaml
--   render_registries(cluster) -> {files = {{path, content, mode}..}}     registries.yaml + CA files
--   helm_chart_configs(node, cluster) -> <data>/server/manifests/<chart>-config.yaml (controllers)
--   config_files(node, cluster) -> list of files (written by the base's configure)
--   new_secret(bytes128) -> {token, agent_token}       (bytes: 128 random bytes the caller read)
--   secret_files(node, secret) -> controllers both token files, workers the agent token
--   join_secret_read() -> cmd (on the leader);  parse_join_secret(out) -> secret | nil
--   join_secret_write(secret) -> write actions (0600; the phase writes them where absent)
--   sync_files(node, cluster) -> registries.yaml + CAs, policies, HelmChartConfigs (in place);
--   sync_dirs(node) -> the TLS dir, /etc/cargoship, and *-config.yaml in the manifests dir
--       (controllers)
--   stop(node) -> actions;  upgrade_node(node, cluster, staged, os) -> actions;  reset(node, os, names?) -> actions
--   image_dir() -> "<data_dir>/agent/images" (the agent imports tarballs there itself)
local action = require "cargoship.action"
local engine = require "distros.engine"
local shell = require "cargoship.shell"
local yaml = require "cargoship.yaml"

-- The engine applies <data>/server/manifests itself and joins by starting its service on a
-- config.yaml naming the token files, which "Configure engine" writes.
local M = engine.Engine:extend { name = "rancher", applies_manifests = true, secret_at_configure = true }

-- Keys a worker must not carry (distro-package.md §5): the agent refuses or ignores them.
M.SERVER_ONLY = { "kube-apiserver-arg", "kube-controller-manager-arg", "kube-scheduler-arg", "etcd-arg",
                  "disable", "tls-san", "agent-token-file", "cluster-cidr", "service-cidr",
                  "audit-policy-file", "pod-security-admission-config-file" }

function M:extend(child)
  child = engine.Engine.extend(self, child)
  if child.config_dir then
    child.config_path = child.config_path or (child.config_dir .. "/config.yaml")
    child.registries_path = child.config_dir .. "/registries.yaml"
    child.token_path = child.config_dir .. "/token"
    child.agent_token_path = child.config_dir .. "/agent-token"
  end
  return child
end

function M:server_url(host)
  return string.format("https://%s:%d", engine.url_host(host), self.join_port)
end

local function copy(t)
  local out = {}
  for k, v in pairs(t or {}) do out[k] = v end
  return out
end

local join_host = engine.join_host

local function sorted_pairs_list(map)
  local keys, out = {}, {}
  for k in pairs(map or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do out[#out + 1] = k .. "=" .. tostring(map[k]) end
  return out
end

local function tls_sans(cluster)
  local seen, out = {}, {}
  local function add(v)
    if v and v ~= "" and not seen[v] then seen[v] = true; out[#out + 1] = v end
  end
  add(cluster.loadbalancer)
  for _, c in ipairs(cluster.controllers or {}) do
    add(c.hostname and c.hostname:match("^[^.]+") or c.name)
    add(c.fqdn or c.hostname or c.name)
  end
  return out
end

-- config.yaml (engines.md §2.1, plus node-ip from the private address, §6.6).
function M:render_config(n, cluster)
  cluster = cluster or {}
  local section = self:section(cluster)
  local cfg = copy(section.config)
  cfg["node-name"] = n.name
  cfg["data-dir"] = self.data_dir
  if n.private_address then cfg["node-ip"] = n.private_address end
  local labels, taints = sorted_pairs_list(n.labels), n.taints or {}
  if #labels > 0 then cfg["node-label"] = labels end
  if #taints > 0 then cfg["node-taint"] = taints end
  if n.role == "controller" then
    local sans = tls_sans(cluster)
    if #sans > 0 then cfg["tls-san"] = sans end
    cfg["token-file"] = self.token_path
    cfg["agent-token-file"] = self.agent_token_path
    if section.audit then cfg["audit-policy-file"] = self:audit_path() end
    if section.podSecurity then cfg["pod-security-admission-config-file"] = self:pss_path() end
    local leader = cluster.leader
    if leader and leader.name ~= n.name then cfg.server = self:server_url(join_host(leader)) end
  else
    for _, k in ipairs(M.SERVER_ONLY) do cfg[k] = nil end
    cfg["token-file"] = self.agent_token_path
    local target = cluster.loadbalancer or (cluster.leader and join_host(cluster.leader))
    if not target then error("render_config: a worker needs a loadbalancer or a leader to join", 2) end
    cfg.server = self:server_url(target)
  end
  return { path = self.config_path, content = yaml.dump(cfg), mode = "0600" }
end

-- ---- registries.yaml (engines.md §2.2) ------------------------------------------------

-- Servers join the leader's supervisor even behind a load balancer; agents join either.
function M:join_target(n, cluster)
  local t = engine.Engine.join_target(self, n, cluster)
  if t and n.role == "controller" and cluster.loadbalancer and cluster.leader then
    t = { host = join_host(cluster.leader), port = self.join_port, what = "the leader " .. cluster.leader.name,
          leader = cluster.leader }
  end
  return t
end

function M:render_registries(cluster)
  local mirrors, configs, files = {}, {}, {}
  for _, r in ipairs(cluster.registries or {}) do
    if r.proxy then
      local m = { endpoint = { r.proxy.endpoint or r.proxy.url } }
      if r.proxy.rewrite and #r.proxy.rewrite > 0 then
        m.rewrite = {}
        for _, rw in ipairs(r.proxy.rewrite) do m.rewrite[rw.pattern] = rw.replacement end
      end
      mirrors[r.name] = m
    end
    local c = {}
    local a = r.auth
    if a then
      if a.token then c.auth = { identity_token = a.token }
      elseif a.user and a.pass then c.auth = { auth = engine.base64(a.user .. ":" .. a.pass) }
      else c.auth = { username = a.user, password = a.pass } end
    end
    local t = r.tls
    if t then
      local tls = { cert_file = t.cert_file, key_file = t.key_file }
      if t.ca then
        local host = r.config_host or r.name
        tls.ca_file = engine.ca_path(host)
        files[#files + 1] = { path = tls.ca_file, content = t.ca, mode = "0600" }
      else
        tls.ca_file = t.ca_file
      end
      if t.insecure_skip_verify then tls.insecure_skip_verify = true end
      if next(tls) then c.tls = tls end
    end
    if next(c) then configs[r.config_host or r.name] = c end
  end
  local doc = {}
  if next(mirrors) then doc.mirrors = mirrors end
  if next(configs) then doc.configs = configs end
  local content = next(doc) and yaml.dump(doc) or "{}\n"
  table.insert(files, 1, { path = self.registries_path, content = content, mode = "0600" })
  return { files = files }
end

-- ---- HelmChartConfig files (distro-package.md §5; engines.md §2.3) ----------------------

function M:manifests_dir() return self.data_dir .. "/server/manifests" end

-- One HelmChartConfig per chart of engine.manifest, controllers only; a chart the config
-- disables gets none (its helm controller is off, and a stale file is pruned by sync).
function M:helm_chart_configs(n, cluster)
  local section, out = self:section(cluster), {}
  if n.role ~= "controller" or type(section.manifest) ~= "table" then return out end
  local disabled = {}
  for _, d in ipairs((section.config or {}).disable or {}) do disabled[d] = true end
  local charts = {}
  for chart in pairs(section.manifest) do
    if not disabled[chart] then charts[#charts + 1] = chart end
  end
  table.sort(charts)
  for _, chart in ipairs(charts) do
    local v = section.manifest[chart]
    local values = type(v) == "string" and v or yaml.dump(v)
    local doc = { apiVersion = "helm.cattle.io/v1", kind = "HelmChartConfig",
                  metadata = { name = chart, namespace = "kube-system" }, spec = { valuesContent = values } }
    out[#out + 1] = { path = self:manifests_dir() .. "/" .. chart .. "-config.yaml", content = yaml.dump(doc),
                      mode = "0600" }
  end
  return out
end

-- Every file "Configure engine" writes on the node, config.yaml first.
function M:config_files(n, cluster)
  cluster = cluster or {}
  local files = { self:render_config(n, cluster) }
  for _, f in ipairs(self:render_registries(cluster).files) do files[#files + 1] = f end
  for _, f in ipairs(self:policy_files(n, cluster)) do files[#files + 1] = f end
  for _, f in ipairs(self:helm_chart_configs(n, cluster)) do files[#files + 1] = f end
  return files
end

-- config.yaml is not kept by sync (engines.md §5.4, §2.1): only an upgrade rewrites it.
-- The engine's helm controller reconciles a changed HelmChartConfig with no restart.
function M:sync_files(n, cluster)
  local out = engine.Engine.sync_files(self, n, cluster)
  for _, f in ipairs(self:helm_chart_configs(n, cluster or {})) do
    f.in_place = true
    out[#out + 1] = f
  end
  return out
end

function M:sync_dirs(n)
  local out = { { dir = "/etc/cargoship/tls" }, { dir = "/etc/cargoship" } }
  if n.role == "controller" then out[#out + 1] = { dir = self:manifests_dir(), match = "%-config%.yaml$" } end
  return out
end

-- ---- join secret ---------------------------------------------------------------------

function M.new_secret(_, bytes)
  if type(bytes) ~= "string" or #bytes < 128 then error("new_secret: 128 random bytes are needed", 2) end
  return { token = engine.token_from_bytes(bytes:sub(1, 64)),
           agent_token = engine.token_from_bytes(bytes:sub(65, 128)) }
end

-- Prints "token=<t>" and "agent_token=<t>" for the files that exist (Engine.secret_files_read).
function M:join_secret_read()
  return self:secret_files_read { { "token", self.token_path }, { "agent_token", self.agent_token_path } }
end

function M:parse_join_secret(out)
  return self:secret_files_parse(out, { { "token", self.token_path }, { "agent_token", self.agent_token_path } })
end

function M:join_secret_write(secret)
  if not (secret and secret.token and secret.agent_token) then error("join_secret_write: token and agent_token", 2) end
  return { action.write { path = self.token_path, content = secret.token .. "\n", mode = "0600", secret = true,
                          say = "write the join token " .. self.token_path },
           action.write { path = self.agent_token_path, content = secret.agent_token .. "\n", mode = "0600",
                          secret = true, say = "write the agent join token " .. self.agent_token_path } }
end

-- A controller holds both tokens (it serves both); a worker only the agent's.
function M:secret_files(n, secret)
  if not secret then error("no join secret: the cluster has no controller", 0) end
  local writes = self:join_secret_write(secret)
  if n.role == "controller" then return writes end
  return { writes[2] }
end

-- ---- stop, upgrade, reset -------------------------------------------------------------

function M:image_dir() return self.data_dir .. "/agent/images" end

-- The killall script ends the containers the service leaves running (KillMode=process);
-- removing the image cache index makes the next start re-check the tarballs (engines.md §1).
function M:stop(n)
  return {
    action.service { verb = "stop", service = self:service(n.role) },
    action.run { cmd = shell.fmt("if command -v %s >/dev/null 2>&1; then %s; fi", self.killall, self.killall),
                 say = "run " .. self.killall .. " if present" },
    action.remove { path = self:image_dir() .. "/.cache.json" },
  }
end

-- Between the base's drain and uncordon, on the node in this order.
function M:upgrade_node(n, cluster, staged, os)
  local out = {}
  for _, a in ipairs(self:stop(n)) do out[#out + 1] = a end
  -- the packages were pinned at their install: unpinned for the new version (install pins it again);
  -- best effort, as a host without the pinning tool (dnf's versionlock plugin) never pinned them
  local unhold = staged and staged.method ~= "binary" and staged.names and os and os:unhold_packages(staged.names)
  if unhold then
    out[#out + 1] = action.run { cmd = "{ " .. unhold .. "; } >/dev/null 2>&1 || true",
                                 say = "unpin " .. table.concat(staged.names, ", ") }
  end
  for _, a in ipairs(self:install(n, staged, os)) do out[#out + 1] = a end
  for _, a in ipairs(self:configure(n, cluster)) do out[#out + 1] = a end
  for _, a in ipairs(self:start(n)) do out[#out + 1] = a end
  return out
end

-- The agent asks the supervisor for its kubelet certificate with the node's password
-- (/etc/rancher/node/password); a server that stored another password for that node name
-- (a host reinstalled under an existing node's name) answers 403, and the agent logs the
-- refusal and retries for ever ("Waiting to retrieve agent configuration; server is not
-- ready: Node password rejected, ..."). No wait can end it: it is the start's failure.
function M.start_refused(_, log, node)
  local msg = (log or ""):match("(Node password rejected[^\n\"]*)")
  if not msg then return nil end
  return (msg:gsub("%s+$", "")) .. " (the cluster knows this node name with another node password: delete"
    .. " the node (kubectl delete node " .. tostring(node or "NAME") .. ", which removes its password secret) or"
    .. " give the host another name)"
end

-- names: packages installed from the staged rpm/deb files (read from the staging dirs).
function M:reset(n, os, names)
  local out = self:stop(n)
  for _, a in ipairs(self:reset_packages(os, names)) do out[#out + 1] = a end
  out[#out + 1] = action.remove { path = self.data_dir, recursive = true }
  out[#out + 1] = action.remove { path = self.config_dir, recursive = true }
  -- the node password both engines keep beside their config, then their parent dirs when empty
  out[#out + 1] = action.remove { path = "/etc/rancher/node", recursive = true }
  out[#out + 1] = action.run { cmd = "rmdir /etc/rancher /var/lib/rancher 2>/dev/null; true",
                               say = "remove /etc/rancher and /var/lib/rancher if empty" }
  return out
end

-- Pod and service CIDRs: config cluster-cidr and service-cidr, else 10.42.0.0/16 and 10.43.0.0/16.
function M:cluster_cidrs(section)
  local conf = (section or (self.package and self.package.engine) or {}).config or {}
  local pods, svcs = engine.cidr_list(conf["cluster-cidr"]), engine.cidr_list(conf["service-cidr"])
  if #pods == 0 then pods = { "10.42.0.0/16" } end
  if #svcs == 0 then svcs = { "10.43.0.0/16" } end
  for _, c in ipairs(svcs) do pods[#pods + 1] = c end
  return pods
end

return M

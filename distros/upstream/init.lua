-- distros.upstream: the kubeadm + containerd engine configurer (engines.md §1, §2.4, §2.5); overrides most of the base.
--
-- Verbs beyond distros.engine's (node, cluster, staged: see there; node.bootstrapped = the
-- node's /etc/kubernetes/kubelet.conf exists, from bootstrapped_probe()):
--   render_config(node, cluster) -> {path, content, mode = "0600"}   kubeadm-config.yaml
--       leader: ClusterConfiguration + InitConfiguration + KubeletConfiguration;
--       others: JoinConfiguration (needs cluster.secret = {token, ca_cert_hash}) + KubeletConfiguration
--   runtime_files() -> containerd config.toml and crictl.yaml
--   config_files(node, cluster) -> every file; static_files: without a joining node's
--       kubeadm document, which join_files renders at join time with a fresh token
--   bootstrapped_probe() -> cmd (exit 0 when bootstrapped)
--   bootstrap_cmd() / join_cmd() -> `kubeadm init` / `kubeadm join` on the config
--   start(node, cluster) -> actions        kubeadm init (leader) | kubeadm join | start kubelet
--   first_start(node, cluster, o) -> enable kubelet, the "bootstrap" or "join" step, wait Ready
--   bootstrap_secret(out) -> the leader's records saving the join secret init printed | nil, why
--   join_secret_cmds(role) -> {{cmd, timeout, what}..} on the leader; join_secret_of(outs, role)
--   parse_init_output(out) -> {token, ca_cert_hash, certificate_key?} | nil   (also `token create` output)
--   token_create() -> cmd (a fresh join command: bootstrap tokens expire after 24 h)
--   certificate_key_create() -> cmd; parse_certificate_key(out) -> hex key | nil (extra control planes)
--   render_registries(cluster) -> {files}  containerd certs.d/<registry>/hosts.toml + CA files
--   join_secret_save(secret) -> write actions on the leader;  join_secret_read() -> cmd;
--   parse_join_secret(out) -> secret | nil;  join_secret_write(secret) -> {} (the secret goes
--       into the JoinConfiguration instead of a file)
--   image_import(files) -> containerd started and answering, then one `ctr -n k8s.io images import` per file
--   runtime_wait() -> the action that waits for a (re)started containerd to answer
--   sync_files(node, cluster) -> containerd's files, hosts.toml per registry + CAs, policies;
--   sync_dirs(node) -> the TLS dir and certs.d's <registry>/hosts.toml files (a registry the
--       cluster file dropped would keep its mirror: containerd reads every hosts.toml there)
--   sync_node(node, writes, removes) -> stop kubelet, write, restart containerd when one of
--       its own files is written, start kubelet
--   upgrade_node(node, cluster, staged, os) -> actions (the base's upgrade drains first);  reset(node, os, names?)
local action = require "cargoship.action"
local engine = require "distros.engine"
local shell = require "cargoship.shell"
local yaml = require "cargoship.yaml"

local M = engine.Engine:extend {
  name = "upstream",
  joins_by_command = true,
  binary = "kubelet",
  binary_paths = { "/usr/bin/kubelet", "/usr/local/bin/kubelet" },
  version_prefix = "Kubernetes",     -- "Kubernetes v1.35.3"
  -- the kubelet is the node's service on both roles; the control plane runs as its pods
  services = { controller = "kubelet", worker = "kubelet" },
  kubeconfig = "/etc/kubernetes/admin.conf",
  kubectl_words = { "kubectl" },
  data_dir = "/var/lib/kubelet",
  config_dir = "/etc/kubernetes",
  config_path = "/etc/kubernetes/kubeadm-config.yaml",
  staging_dir = "/var/lib/kubernetes",
  join_port = 6443,
  cri_socket = "unix:///run/containerd/containerd.sock",
  token_path = "/etc/kubernetes/pki/cargoship-join-token",
  ca_hash_path = "/etc/kubernetes/pki/cargoship-ca-cert-hash",
  bootstrapped_marker = "/etc/kubernetes/kubelet.conf",
}

local API = "kubeadm.k8s.io/v1beta4"
local CERTS_D = "/etc/containerd/certs.d"

local function endpoint(self, cluster)
  local h = cluster.loadbalancer or (cluster.leader and engine.join_host(cluster.leader))
  if not h then error("render_config: a loadbalancer or a leader is needed", 3) end
  return engine.url_host(h) .. ":" .. self.join_port
end

local function is_leader(n, cluster)
  return n.role == "controller" and cluster.leader ~= nil and cluster.leader.name == n.name
end

-- kubeadm v1beta4 takes extra args as a list of {name, value}.
local function node_registration(self, n)
  local reg = { name = n.name, criSocket = self.cri_socket }
  local args = {}
  if n.private_address then args[#args + 1] = { name = "node-ip", value = n.private_address } end
  local labels = {}
  for k, v in pairs(n.labels or {}) do labels[#labels + 1] = k .. "=" .. tostring(v) end
  table.sort(labels)
  if #labels > 0 then args[#args + 1] = { name = "node-labels", value = table.concat(labels, ",") } end
  if #args > 0 then reg.kubeletExtraArgs = args end
  if n.taints and #n.taints > 0 then
    reg.taints = {}
    for _, t in ipairs(n.taints) do
      local key, value, effect = t:match("^([^=:]+)=?([^:]*):(%a+)$")
      if not key then error("render_config: taint " .. t .. " is not key[=value]:Effect", 4) end
      reg.taints[#reg.taints + 1] = { key = key, value = value ~= "" and value or nil, effect = effect }
    end
  end
  return reg
end

local function cluster_configuration(self, cluster)
  local section = self:section(cluster)
  local cfg = section.config or {}
  local networking = { serviceSubnet = (cfg.networking or {}).serviceSubnet or "10.96.0.0/12",
                       podSubnet = (cfg.networking or {}).podSubnet }
  local sans = {}
  if cluster.loadbalancer then sans[#sans + 1] = cluster.loadbalancer end
  for _, c in ipairs(cluster.controllers or {}) do sans[#sans + 1] = c.fqdn or c.hostname or c.name end
  local doc = { apiVersion = API, kind = "ClusterConfiguration",
                kubernetesVersion = "v" .. assert(self.version, "render_config: the package's version"):gsub("^v", ""),
                controlPlaneEndpoint = endpoint(self, cluster), networking = networking,
                imageRepository = cfg.imageRepository }
  local args = {}
  for _, a in ipairs((cfg.apiServer or {}).extraArgs or {}) do args[#args + 1] = a end
  local volumes = {}
  -- the apiserver is a static pod: the policy files reach it as hostPath volumes
  local function mount(name, path)
    volumes[#volumes + 1] = { name = name, hostPath = path, mountPath = path, readOnly = true, pathType = "File" }
  end
  if section.audit then
    args[#args + 1] = { name = "audit-policy-file", value = self:audit_path() }
    args[#args + 1] = { name = "audit-log-path", value = "-" }
    mount("audit-policy", self:audit_path())
  end
  if section.podSecurity then
    args[#args + 1] = { name = "admission-control-config-file", value = self:pss_path() }
    mount("pod-security", self:pss_path())
  end
  doc.apiServer = { certSANs = #sans > 0 and sans or nil, extraArgs = #args > 0 and args or nil,
                    extraVolumes = #volumes > 0 and volumes or nil }
  if not next(doc.apiServer) then doc.apiServer = nil end
  for _, part in ipairs({ "controllerManager", "scheduler" }) do
    if cfg[part] and cfg[part].extraArgs then doc[part] = { extraArgs = cfg[part].extraArgs } end
  end
  return doc
end

local KUBELET = { apiVersion = "kubelet.config.k8s.io/v1beta1", kind = "KubeletConfiguration",
                 cgroupDriver = "systemd" }

function M:render_config(n, cluster)
  cluster = cluster or {}
  local docs = {}
  if is_leader(n, cluster) then
    docs[1] = cluster_configuration(self, cluster)
    docs[2] = { apiVersion = API, kind = "InitConfiguration", nodeRegistration = node_registration(self, n),
                localAPIEndpoint = n.private_address and { advertiseAddress = n.private_address } or nil }
  else
    local s = cluster.secret
    if not (s and s.token and s.ca_cert_hash) then
      error("render_config: joining needs cluster.secret = {token, ca_cert_hash} from the leader", 2)
    end
    local join = { apiVersion = API, kind = "JoinConfiguration", nodeRegistration = node_registration(self, n),
                   discovery = { bootstrapToken = { token = s.token, apiServerEndpoint = endpoint(self, cluster),
                                                    caCertHashes = { s.ca_cert_hash } } } }
    if n.role == "controller" then
      join.controlPlane = { certificateKey = s.certificate_key,
                            localAPIEndpoint = n.private_address and { advertiseAddress = n.private_address } or nil }
    end
    docs[1] = join
  end
  docs[#docs + 1] = KUBELET
  local parts = {}
  for i, d in ipairs(docs) do parts[i] = yaml.dump(d) end
  return { path = self.config_path, content = "---\n" .. table.concat(parts, "---\n"), mode = "0600" }
end

-- containerd's CRI plugin reads hosts.toml only with config_path set (engines.md §2.4).
function M:runtime_files()
  local pause = self.package and self.package.pause_image
  local lines = { "version = 2", "", '[plugins."io.containerd.grpc.v1.cri"]' }
  if pause then lines[#lines + 1] = string.format("  sandbox_image = %q", pause) end
  for _, l in ipairs({
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
    '  runtime_type = "io.containerd.runc.v2"',
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]',
    "  SystemdCgroup = true",
    '[plugins."io.containerd.grpc.v1.cri".registry]',
    '  config_path = "/etc/containerd/certs.d"',
  }) do lines[#lines + 1] = l end
  local toml = table.concat(lines, "\n") .. "\n"
  local crictl = string.format("runtime-endpoint: %s\nimage-endpoint: %s\n", self.cri_socket, self.cri_socket)
  return { { path = "/etc/containerd/config.toml", content = toml, mode = "0644" },
           { path = "/etc/crictl.yaml", content = crictl, mode = "0644" } }
end

-- containerd hosts.toml per registry (engines.md §2.4); proxy.rewrite has no containerd
-- equivalent and is ignored. Inline CAs go where every engine puts them (engine.ca_path).
function M.render_registries(_, cluster)
  local files = {}
  for _, r in ipairs((cluster or {}).registries or {}) do
    local host = r.proxy and (r.proxy.endpoint or r.proxy.url) or ("https://" .. r.name)
    if not host:find("://", 1, true) then host = "https://" .. host end
    local lines = { string.format("server = %q", "https://" .. r.name), "",
                    string.format("[host.%q]", host), '  capabilities = ["pull", "resolve"]' }
    local a, t, ca_file = r.auth, r.tls, nil
    if a and a.token then
      lines[#lines + 1] = string.format("  header = { Authorization = %q }", "Bearer " .. a.token)
    elseif a and a.user and a.pass then
      lines[#lines + 1] = string.format("  header = { Authorization = %q }",
        "Basic " .. engine.base64(a.user .. ":" .. a.pass))
    end
    if t then
      local ca = t.ca_file
      if t.ca then
        ca = engine.ca_path(r.config_host or r.name)
        ca_file = { path = ca, content = t.ca, mode = "0600" }
      end
      if ca then lines[#lines + 1] = string.format("  ca = %q", ca) end
      if t.cert_file and t.key_file then
        lines[#lines + 1] = string.format("  client = [[%q, %q]]", t.cert_file, t.key_file)
      end
      if t.insecure_skip_verify then lines[#lines + 1] = "  skip_verify = true" end
    end
    files[#files + 1] = { path = CERTS_D .. "/" .. r.name .. "/hosts.toml",
                          content = table.concat(lines, "\n") .. "\n", mode = "0600" }
    files[#files + 1] = ca_file
  end
  return { files = files }
end

-- The files of every node bar the kubeadm document: containerd's, the registries', the policies.
local function node_files(self, n, cluster)
  local files = {}
  for _, f in ipairs(self:runtime_files()) do files[#files + 1] = f end
  for _, f in ipairs(self:render_registries(cluster).files) do files[#files + 1] = f end
  for _, f in ipairs(self:policy_files(n, cluster)) do files[#files + 1] = f end
  return files
end

function M:config_files(n, cluster)
  cluster = cluster or {}
  local files = { self:render_config(n, cluster) }
  for _, f in ipairs(node_files(self, n, cluster)) do files[#files + 1] = f end
  return files
end

-- A joining node's JoinConfiguration needs a token created on the leader at join time
-- (bootstrap tokens expire), so "Configure engine" writes it no kubeadm document.
function M:static_files(n, cluster)
  cluster = cluster or {}
  if is_leader(n, cluster) then return self:config_files(n, cluster) end
  return node_files(self, n, cluster)
end

function M:join_files(n, cluster)
  cluster = cluster or {}
  if is_leader(n, cluster) then return {} end
  return { self:render_config(n, cluster) }
end

-- The kubeadm document is not kept: a running node's is kubeadm's to change (upgrade).
function M:sync_files(n, cluster) return node_files(self, n, cluster or {}) end

function M.sync_dirs()
  return { { dir = "/etc/cargoship/tls" }, { dir = CERTS_D, depth = 2, match = "^[^/]+/hosts%.toml$" } }
end

function M:sync_node(n, writes, removes)
  local runtime, written = {}, false
  for _, f in ipairs(self:runtime_files()) do runtime[f.path] = true end
  for _, a in ipairs(writes or {}) do written = written or runtime[a.path] == true end
  local out = self:stop(n)
  for _, a in ipairs(writes or {}) do out[#out + 1] = a end
  for _, a in ipairs(removes or {}) do out[#out + 1] = a end
  if written then
    for _, svc in ipairs(self.runtime_services) do
      out[#out + 1] = action.service { verb = "restart", service = svc }
    end
    out[#out + 1] = self:runtime_wait()
  end
  -- the node runs, so kubeadm set it up: its kubelet is only started again
  local up = {}
  for k, v in pairs(n) do up[k] = v end
  up.bootstrapped = true
  for _, a in ipairs(self:start(up)) do out[#out + 1] = a end
  return out
end

function M:bootstrapped_probe() return shell.fmt("test -e %s", self.bootstrapped_marker) end

-- The one spelling of the commands that form and join the cluster.
function M:bootstrap_cmd() return shell.fmt("kubeadm init --config %s --upload-certs", self.config_path) end
function M:join_cmd() return shell.fmt("kubeadm join --config %s", self.config_path) end

local function bootstrap_say(n) return "kubeadm init on " .. n.name end
local function join_say(n)
  return "kubeadm join " .. n.name .. (n.role == "controller" and " as a control plane" or "")
end

-- kubeadm starts the control plane itself; the kubelet service only has to be enabled.
function M:start(n, cluster)
  cluster = cluster or {}
  local out = { action.service { verb = "enable", service = "kubelet" } }
  if n.bootstrapped then
    out[#out + 1] = action.service { verb = "start", service = "kubelet" }
  elseif is_leader(n, cluster) then
    out[#out + 1] = action.run { cmd = self:bootstrap_cmd(), timeout = self.join_timeout, secret = true,
                                 say = bootstrap_say(n) }
  else
    out[#out + 1] = action.run { cmd = self:join_cmd(), timeout = self.join_timeout, say = join_say(n) }
  end
  out[#out + 1] = self:wait_ready(n)
  return out
end

-- A node kubeadm never set up: the phase's "bootstrap" step (init, then the join secret
-- saved on the leader) or "join" step (a fresh secret from the leader, the JoinConfiguration,
-- kubeadm join); one already set up only starts its kubelet.
function M:first_start(n, cluster, o)
  if n.bootstrapped then return engine.Engine.first_start(self, n, cluster, o) end
  local lead = (o or {}).leader
  if lead == nil then lead = is_leader(n, cluster or {}) end
  return { action.service { verb = "enable", service = self:service(n.role) },
           action.step { name = lead and "bootstrap" or "join", say = lead and bootstrap_say(n) or join_say(n) },
           self:wait_ready(n) }
end

-- bootstrap_cmd's output -> the records saving the join secret on the leader | nil, why
function M:bootstrap_secret(out)
  local secret = self:parse_init_output(out)
  if not secret then return nil, "kubeadm init printed no join command" end
  return self:join_secret_save(secret)
end

-- What the leader runs for a node about to join: a fresh token, and for a control plane a
-- fresh certificate key (the one `init --upload-certs` printed expires after two hours).
function M:join_secret_cmds(role)
  local cmds = { { cmd = self.token_create(), timeout = 120, what = "a join token" } }
  if role == "controller" then
    cmds[2] = { cmd = self.certificate_key_create(), timeout = 300, what = "a certificate key" }
  end
  return cmds
end

-- outs: join_secret_cmds' outputs in order -> secret | nil, why
function M:join_secret_of(outs, role)
  local secret = self:parse_init_output(outs[1])
  if not secret then return nil, "printed no join command" end
  if role == "controller" then
    secret.certificate_key = self:parse_certificate_key(outs[2])
    if not secret.certificate_key then return nil, "printed no certificate key" end
  end
  return secret
end

-- From `kubeadm init` (or `kubeadm token create --print-join-command`) output.
function M.parse_init_output(_, out)
  out = out or ""
  local token = out:match("%-%-token%s+([%w]+%.[%w]+)")
  local hash = out:match("%-%-discovery%-token%-ca%-cert%-hash%s+(sha256:%x+)")
  if not (token and hash) then return nil end
  return { token = token, ca_cert_hash = hash, certificate_key = out:match("%-%-certificate%-key%s+(%x+)") }
end

function M.token_create() return "kubeadm token create --print-join-command" end

-- A fresh certificate key for extra control planes: the one `init --upload-certs` printed
-- expires after two hours. The key is the last line of the output.
function M.certificate_key_create() return "kubeadm init phase upload-certs --upload-certs" end
function M.parse_certificate_key(_, out)
  local key
  for line in (out or ""):gmatch("[^\n]+") do key = line:match("^%s*(%x%x%x%x%x%x%x%x+)%s*$") or key end
  return key
end

function M:join_secret_save(s)
  return { action.write { path = self.token_path, content = s.token .. "\n", mode = "0600", secret = true,
                          say = "save the join token on the leader" },
           action.write { path = self.ca_hash_path, content = s.ca_cert_hash .. "\n", mode = "0600", secret = true,
                          say = "save the CA certificate hash on the leader" } }
end

function M:join_secret_read()
  return self:secret_files_read { { "token", self.token_path }, { "ca_cert_hash", self.ca_hash_path } }
end

function M:parse_join_secret(out)
  return self:secret_files_parse(out, { { "token", self.token_path }, { "ca_cert_hash", self.ca_hash_path } })
end

function M.join_secret_write() return {} end

-- The container runtime kubeadm and the kubelet need (engines.md §1: kubelet plus
-- containerd): enabled and (re)started by Configure engine after its config.toml is written,
-- and started before images are imported into it.
M.runtime_services = { "containerd" }

-- containerd answers on its socket a while after its start returns: systemd's start of its
-- Type=notify unit waits for that, runit's `sv up` does not, and ctr, kubeadm's preflight and
-- the kubelet meet "connection refused" until then (a CI-like run at load 10: ctr import on a
-- runit host right after the start). Waits for `ctr version` to reach it, up to 60 s.
M.RUNTIME_WAIT = 60
function M.runtime_wait()
  return action.run {
    cmd = shell.fmt("i=0; until ctr version >/dev/null 2>&1; do [ $i -lt %s ] || { echo %s >&2; exit 1; }; "
      .. "sleep 0.2; i=$((i+1)); done", tostring(M.RUNTIME_WAIT * 5),
      "containerd did not answer on /run/containerd/containerd.sock within " .. M.RUNTIME_WAIT .. " s of its start"),
    say = "wait for containerd to answer", timeout = M.RUNTIME_WAIT + 30 }
end

-- No watcher imports tarballs into containerd: each file is imported into kubelet's namespace.
function M.image_import(self, files)
  local out = {}
  if files and #files > 0 then
    out[1] = action.service { verb = "enable", service = "containerd" }
    out[2] = action.service { verb = "start", service = "containerd" }
    out[3] = self:runtime_wait()
  end
  for _, f in ipairs(files or {}) do
    out[#out + 1] = action.run { cmd = shell.fmt("ctr -n k8s.io images import %s", f), timeout = 1800,
                                 say = "import images from " .. f }
  end
  return out
end

function M:upgrade_node(n, cluster, staged, os)
  local out = {}
  if staged and staged.method ~= "binary" and os then
    local cmd = os:unhold_packages({ "kubeadm", "kubelet", "kubectl" })
    if cmd then out[#out + 1] = action.run { cmd = cmd } end
  end
  for _, a in ipairs(self:install(n, staged, os)) do out[#out + 1] = a end
  if is_leader(n, cluster) then
    out[#out + 1] = action.run { cmd = "kubeadm upgrade plan", timeout = 300 }
    out[#out + 1] = action.run { cmd = shell.fmt("kubeadm upgrade apply %s -y", "v" .. self.version:gsub("^v", "")),
                                 timeout = 1800 }
  else
    out[#out + 1] = action.run { cmd = "kubeadm upgrade node", timeout = 900 }
  end
  out[#out + 1] = action.service { verb = "restart", service = "kubelet" }
  out[#out + 1] = self:wait_ready(n)
  return out
end

-- Best effort after kubeadm reset (engines.md §2.5): CNI links and the rules kube-proxy left.
local CLEANUP = "ip link delete cni0 2>/dev/null; ip link delete flannel.1 2>/dev/null; "
  .. "for t in filter nat mangle; do iptables -t $t -F 2>/dev/null; iptables -t $t -X 2>/dev/null; done; true"

-- kubeadm reset needs containerd (it removes the pods' containers through CRI); then
-- containerd, which Configure engine enabled and started, is stopped, and the files it wrote
-- for it go, with the CNI configuration kubeadm reset leaves (/etc/cni/net.d, as its own
-- message says) and what containerd made under /opt/containerd when empty.
function M:reset(_, os, names)
  local out = { action.run { cmd = "kubeadm reset -f", timeout = 300 },
                action.run { cmd = CLEANUP, say = "remove CNI links and iptables rules (best effort)" } }
  for _, s in ipairs(self.runtime_services) do out[#out + 1] = action.service { verb = "stop", service = s } end
  for _, a in ipairs(self:reset_packages(os, names)) do out[#out + 1] = a end
  local dirs = { self.data_dir, self.config_dir, self.staging_dir, "/etc/containerd/certs.d", "/etc/cni/net.d" }
  for _, p in ipairs(dirs) do
    out[#out + 1] = action.remove { path = p, recursive = true }
  end
  for _, f in ipairs(self:runtime_files()) do out[#out + 1] = action.remove { path = f.path } end
  out[#out + 1] = action.run { cmd = "rmdir /etc/cni /opt/containerd/bin /opt/containerd/lib /opt/containerd "
    .. "2>/dev/null; true", say = "remove /etc/cni and /opt/containerd if empty" }
  return out
end

-- Peer ports: etcd, the API server, kubelet, kube-proxy, controller manager, scheduler; VXLAN.
M.peer_ports = { tcp = { "2379-2380", "6443", "10250", "10256", "10257", "10259" }, udp = { "4789", "8472" } }
-- what must be free where it does not run yet (kubeadm's own preflight checks these ports)
M.listen_ports = { controller = { 6443, 2379, 2380, 10250, 10257, 10259 }, worker = { 10250 } }

-- Pod and service CIDRs: kubeadm networking.podSubnet (none by default) and serviceSubnet
-- (else 10.96.0.0/12).
function M:cluster_cidrs(section)
  local conf = (section or (self.package and self.package.engine) or {}).config or {}
  local net = type(conf.networking) == "table" and conf.networking or {}
  local out = engine.cidr_list(net.podSubnet)
  local svcs = engine.cidr_list(net.serviceSubnet)
  if #svcs == 0 then svcs = { "10.96.0.0/12" } end
  for _, c in ipairs(svcs) do out[#out + 1] = c end
  return out
end

return M

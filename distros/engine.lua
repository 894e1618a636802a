-- distros.engine: the engine configurer base class; pure verbs (node facts and a cluster view in, action records out).
--
-- A configurer is a class: `child = parent:extend{...}` inherits what it does not set;
-- `engine.for_package(pkg)` (or `cls:new{package = pkg}`) is the run's instance (ctx.engine).
-- Hierarchy: engine (this file) < distros.rancher < distros.rke2 / distros.k3s;
--            engine < distros.upstream (kubeadm + containerd).
-- Class fields: name, binary, binary_paths, version_prefix, services = {controller, worker},
--   kubeconfig, kubectl_words, data_dir, config_dir, config_path, join_port;
--   applies_manifests   true: the engine applies the package's manifests itself (a watched
--                       directory); false: "Apply manifests" kubectl-applies them on the leader
--   joins_by_command    true: a node that never ran forms or joins the cluster by a command
--                       (bootstrap_cmd on the leader, join_cmd elsewhere, "bootstrap"/"join"
--                       steps); false: by starting its service on a config with the secret
--   join_timeout        seconds bootstrap_cmd and join_cmd may take
--   secret_at_configure true: "Configure engine" reads the leader's join secret (or makes one
--                       with new_secret) and writes it on every node (secret_files)
--   peer_ports, cluster_cidrs: the firewall's (see os/firewall*)
--   listen_ports        {controller = {..}, worker = {..}}: TCP ports that must be free where
--                       the engine does not run yet (the dry run's forecast checks them)
--
-- Shapes the verbs take:
--   node    = {name (node-name: the configured hostname), role = "controller"|"worker",
--              hostname?, fqdn?, private_address?, labels? = {k = "v"}, taints? = {"k=v:Effect"}}
--   cluster = {leader = node, controllers = {node..}, loadbalancer? = "host", nodes? = {node..},
--              registries? = config.registries list, engine_config? (default: package.engine),
--              secret? = {token, agent_token} (rancher) | {token, ca_cert_hash} (upstream)}
--   staged  = {method = "rpm"|"apt", paths = {..}, names? = {..}}
--           | {method = "binary", moves = {{from, to}..}}      (the upload phases' result)
--
-- engine.node_of(host) -> node and engine.cluster_view(hosts, leader_host, cluster_cfg, secret?)
-- -> cluster build these from the host objects (facts of "Gather host facts") and the cluster file.
--
-- Verbs on every engine (signatures; `os` is the host's OS configurer, host.os):
--   version_probe() -> cmd                 prints `--version` output; fails when absent
--   parse_version(out) -> "v1.35.4+rke2r1" | nil
--   judge(installed|nil, target? (default: the package's), {role, allow_downgrade}) -> verdict (M.judge)
--   service(role) -> name;  service_active_probe(role, os, verb?) -> cmd
--   kubectl(words) -> cmd;  drain(n, {grace_period, timeout}), cordon(n), uncordon(n), delete_node(n),
--     label(n, {k = v}), apply(path), get_nodes(), ready_check(n) -> cmd (run on the leader;
--     one line per node, the same command for every node)
--   ready_line(out, node) -> that node's "STATUS HEARTBEAT" | nil; parse_ready(line, after) -> bool
--   kubectl_step(name, node, cmd, say) -> step record {name, node, cmd, on = "leader", say}
--   kube(verb, node|path, opts) -> action.kube record for the leader: drain (opts as drain's),
--     cordon, uncordon, delete_node, label (opts = the labels), apply (a manifest path)
--   start(node, cluster) -> actions        start + enable + step wait_ready
--   stop(node) -> actions
--   start_refused(log, node_name) -> why|nil a refusal no wait ends, in the service's recent log
--   wait_ready(node) -> step record {name = "wait_ready", node, cmd = ready_check, on = "leader"}
--   install(node, staged, os) -> actions   from the package's staged files
--   image_import(files) -> actions         ({} where the engine imports from its images dir)
--   runtime_services, runtime_wait()       a separate container runtime's services (none here), and
--                                          the action that waits for one (re)started to answer
--   image_dir() -> path | nil              where image tarballs are uploaded
--   config_files(node, cluster) -> every file of the node, as the golden specs pin them
--   static_files(node, cluster) -> the files "Configure engine" writes (default: config_files)
--   join_files(node, cluster)   -> the files written at join time, cluster.secret fresh ({})
--   configure(node, cluster)    -> write records of config_files
--   policy_files(node, cluster) -> audit.yaml / pss.yaml in config_dir (controllers)
--   secret_files(node, secret)  -> write records of the node's join secret ({})
--   first_start(node, cluster, {leader, running, timeout}) -> records that bring up a node
--       not running or not joined (enable first, then start/restart or the bootstrap/join
--       step, then wait_ready)
--   upgrade(node, cluster, staged, os, {drain = opts|false}) -> drain, the engine's upgrade_node records,
--       uncordon;  workloads() -> cmd listing ReplicaSets and StatefulSets as JSON (on the leader)
--   reset_packages(os, names) -> records removing the packages installed from staged files
--   sync_files(node, cluster) -> the files engine-config sync keeps on a running node
--       (engines.md §5.4): {path, content, mode, in_place = true when the engine reconciles a
--       change without a restart}; the base: registries (render_registries) and policies
--   sync_dirs(node) -> {{dir, match?, depth?}..}: managed directories; a file directly inside
--       (down to `depth` levels, named by its path below dir; whose name matches the Lua
--       pattern `match`, when given) that sync_files does not list is stale
--   sync_node(node, writes, removes) -> the node's records between drain and uncordon: stop,
--       the writes and removes, start (with its Ready wait)
--   join_target(node, cluster) -> {host, port, what} | nil: the address the node's engine joins
-- Engine-specific verbs (render_config, join_secret_*, upgrade, reset): see rancher.lua and
-- upstream/init.lua. Nothing here runs anything: the host object runs what these return.
local action = require "cargoship.action"
local shell = require "cargoship.shell"
local yaml = require "cargoship.yaml"

local M = {}

-- The engine modules (distros/<type>/); the package schema takes its list from here.
M.TYPES = { "rke2", "k3s", "upstream" }

local Engine = { name = "engine", applies_manifests = false, joins_by_command = false,
                 secret_at_configure = false, join_timeout = 900 }
Engine.__index = Engine

function Engine:extend(child)
  child.__index = child
  child.parent = self
  return setmetatable(child, self)
end

-- o: {package = cargoship.package record}; an instance shares every method of its class.
function Engine:new(o)
  o = o or {}
  return setmetatable({ package = o.package, version = o.package and o.package.version }, self)
end

-- Kept for configurers written against the old table form.
function M.define(spec)
  return Engine:extend(spec)
end

-- distros.engine.load("rke2") -> configurer class | nil, why
function M.load(type_name)
  for _, t in ipairs(M.TYPES) do
    if t == type_name then return require("distros." .. t) end
  end
  return nil, string.format("unknown engine type %q (known: %s)", tostring(type_name), table.concat(M.TYPES, ", "))
end

-- distros.engine.for_package(pkg) -> the run's engine instance (ctx.engine) | nil, why.
-- The package names the engine; nothing is probed to find it.
function M.for_package(pkg)
  if type(pkg) ~= "table" then return nil, "no distro package given" end
  local cls, why = M.load(pkg.type)
  if not cls then return nil, why end
  return cls:new { package = pkg }
end

-- engine.foreign(found, pkg, role) -> why a host is refused | nil: another engine than the
-- package's is on it. found = {<type> = {version, running}}, what each engine's own probes
-- (its binary's --version, its service) answered on the host. One engine is never put over
-- another: their packages, services, ports and data directories collide.
function M.foreign(found, pkg, role)
  for _, t in ipairs(M.TYPES) do
    local f = found[t]
    if t ~= pkg.type and f then
      local state = f.running and (M.load(t):service(role) .. " running") or "installed, not running"
      return string.format("runs %s %s (%s); the package is %s %s: cargoship does not install one engine over "
        .. "another (reset the host first)", t, f.version or "of unknown version", state, pkg.type,
        tostring(pkg.version))
    end
  end
  return nil
end

-- host (cargoship.host, after gather_facts) -> node: the node name Kubernetes will use, the
-- addresses the config needs, the labels and taints from the merged host config.
function M.node_of(host)
  local f, cfg = host.facts or {}, host.config or {}
  local eng = cfg.engine or {}
  return { name = f.node_name or cfg.hostname or host.name, role = host.role or cfg.role,
           hostname = f.hostname, fqdn = f.fqdn, private_address = f.private_address,
           labels = eng.labels, taints = eng.taints, bootstrapped = f.bootstrapped }
end

-- hosts: the run's hosts in config order; leader: the leader host (ctx.leader);
-- cluster_cfg: the loaded cluster file (loadbalancer, registries); secret: from the leader.
function M.cluster_view(hosts, leader, cluster_cfg, secret)
  cluster_cfg = cluster_cfg or {}
  local view = { controllers = {}, nodes = {}, loadbalancer = cluster_cfg.loadbalancer,
                 registries = cluster_cfg.registries, secret = secret }
  for _, h in ipairs(hosts or {}) do
    local n = M.node_of(h)
    view.nodes[#view.nodes + 1] = n
    if n.role == "controller" then view.controllers[#view.controllers + 1] = n end
    if h == leader then view.leader = n end
  end
  return view
end

-- Builtins only until the binary itself runs: no subshell, no `exit`, so host:probes can
-- run it in the batch's own shell (a dry run sends this to every host).
function Engine:version_probe()
  return string.format('cs_b=; for b in %s; do if [ -x "$b" ]; then cs_b=$b; break; fi; done\n'
    .. 'if [ -n "$cs_b" ]; then "$cs_b" --version; elif command -v %s >/dev/null 2>&1; then %s --version; '
    .. 'else false; fi', shell.words(table.unpack(self.binary_paths)), shell.words(self.binary),
    shell.words(self.binary))
end

local VERSION = "v%d+%.%d+%.%d+[%w.+-]*"

function Engine:parse_version(out)
  out = out or ""
  return out:match(self.version_prefix:gsub("%p", "%%%0") .. "%s+(" .. VERSION .. ")")
    or out:match("(" .. VERSION .. ")")
end

-- The join secret as files on the leader, read back as "key=value" lines. keys: an ordered
-- list of {key, path}. The command never fails, so a leader without the files yet answers
-- with nothing rather than an error; the parser wants every key, or gives nil.
function Engine.secret_files_read(_, keys)
  local parts, paths = {}, {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = "sed 's/^/" .. k[1] .. "=/' %s;"
    paths[#paths + 1] = k[2]
  end
  return shell.fmt("{ " .. table.concat(parts, " ") .. " } 2>/dev/null; true", table.unpack(paths))
end

function Engine.secret_files_parse(_, out, keys)
  local want, s = {}, {}
  for _, k in ipairs(keys) do want[k[1]] = true end
  for line in (out or ""):gmatch("[^\n]+") do
    local k, v = line:match("^(%a[%w_]*)=(%S+)%s*$")
    if want[k] then s[k] = s[k] or v end
  end
  for _, k in ipairs(keys) do
    if not s[k[1]] then return nil end
  end
  return s
end

function Engine:service(role)
  local s = self.services[role]
  if not s then error(string.format("%s: no service for role %s", self.name, tostring(role)), 2) end
  return s
end

-- os: the host's OS configurer (host.os); without one, systemd is assumed. verb: "is_active"
-- (default: running) or "is_up" (running, starting, restarting or stopping: its process may hold
-- the engine's ports, as a Type=notify unit's does from its start until it reports READY)
local SYSTEMD_PROBE = {
  is_active = "systemctl is-active --quiet %s",
  is_up = "case $(systemctl is-active %s) in active|activating|reloading|deactivating) true;; *) false;; esac",
}
function Engine:service_active_probe(role, os, verb)
  verb = verb or "is_active"
  if not SYSTEMD_PROBE[verb] then error("service_active_probe: no verb " .. tostring(verb), 2) end
  local name = self:service(role)
  if os then
    local cmd = os:service(verb, name)
    if cmd then return cmd end
  end
  return shell.fmt(SYSTEMD_PROBE[verb], name)
end

-- ---- kubectl on the leader -----------------------------------------------------------

-- args: a list of words, each quoted; a string would be an unaudited shell fragment.
function Engine:kubectl(args)
  if type(args) ~= "table" then error("kubectl: args must be a list of words", 2) end
  local cmd = shell.fmt("env KUBECONFIG=%s ", self.kubeconfig) .. shell.words(table.unpack(self.kubectl_words))
  if #args > 0 then cmd = cmd .. " " .. shell.words(table.unpack(args)) end
  return cmd
end

local function node_name(n)
  local name = type(n) == "table" and n.name or n
  if type(name) ~= "string" or name == "" then error("a node name is needed", 3) end
  return name
end

-- Through the eviction API, so PodDisruptionBudgets hold: a blocked eviction is retried by
-- kubectl until opts.timeout (seconds, default 300) and then fails naming the pod.
-- opts.grace_period: seconds each pod gets to stop (default -1: the pod's own).
function Engine:drain(n, opts)
  opts = opts or {}
  return self:kubectl { "drain", node_name(n), "--ignore-daemonsets", "--delete-emptydir-data",
    "--grace-period=" .. math.tointeger(opts.grace_period or -1),
    "--timeout=" .. math.tointeger(opts.timeout or 300) .. "s" }
end
function Engine:cordon(n) return self:kubectl { "cordon", node_name(n) } end
function Engine:uncordon(n) return self:kubectl { "uncordon", node_name(n) } end
function Engine:delete_node(n) return self:kubectl { "delete", "node", node_name(n) } end
function Engine:apply(path) return self:kubectl { "apply", "-f", path } end
function Engine:get_nodes() return self:kubectl { "get", "nodes", "-o", "json" } end

-- labels: {k = "v"} (sorted, so the command is stable); a value of false removes the label.
function Engine:label(n, labels)
  local keys = {}
  for k in pairs(labels or {}) do keys[#keys + 1] = k end
  if #keys == 0 then error("label: no labels given", 2) end
  table.sort(keys)
  local words = { "label", "node", node_name(n) }
  for _, k in ipairs(keys) do
    words[#words + 1] = labels[k] == false and (k .. "-") or (k .. "=" .. tostring(labels[k]))
  end
  words[#words + 1] = "--overwrite"
  return self:kubectl(words)
end

-- One word: quoting keeps the jsonpath's own quotes intact through the shell. One line per
-- node: its name, its Ready condition's status and that condition's last heartbeat. The
-- command is the same for every node, so the nodes waited for at once share one kubectl run
-- per poll on the leader (engine_common.steps.wait_ready). A node registered before (its old
-- kubelet still counted Ready for the node controller's grace period) is Ready for this
-- start only once its kubelet has posted a heartbeat newer than the one seen before it.
local READY_PATH = [[jsonpath={range .items[*]}{.metadata.name}{" "}]]
  .. [[{.status.conditions[?(@.type=="Ready")].status}{" "}]]
  .. [[{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}{"\n"}{end}]]
function Engine:ready_check(n)
  node_name(n)
  return self:kubectl { "get", "nodes", "-o", READY_PATH }
end
-- ready_line(out, node) -> "STATUS HEARTBEAT" of node in ready_check's output, or nil when
-- the node is not registered.
function Engine.ready_line(_, out, node)
  for line in (out or ""):gmatch("[^\n]+") do
    local name, rest = line:match("^%s*(%S+)%s*(.-)%s*$")
    if name == node then return rest end
  end
  return nil
end
-- parse_ready(line, after) -> true when Ready is True and, given `after` (an RFC 3339 time
-- in UTC, as the API prints them), the heartbeat is later than it.
function Engine.parse_ready(_, out, after)
  local status, beat = (out or ""):match("^%s*(%S+)%s*(%S*)%s*$")
  if status ~= "True" then return false end
  return after == nil or (beat ~= "" and beat > after)
end

-- A step the phase runs on the leader (kubectl), with its own sentence.
function Engine.kubectl_step(_, name, n, cmd, say)
  return action.step { name = name, node = node_name(n), cmd = cmd, on = "leader", say = say }
end

-- A kubectl operation as the record the leader's host:apply executes (a write, unlike a step).
function Engine:kube(verb, n, opts)
  if verb == "apply" then return action.kube { verb = "apply", path = n, cmd = self:apply(n) } end
  if not self[verb] or not action.KUBE_VERBS[verb] then error("kube: unknown verb " .. tostring(verb), 2) end
  return action.kube { verb = verb, node = node_name(n), cmd = self[verb](self, n, opts), timeout = verb == "drain"
    and (opts and opts.timeout or 300) + 60 or nil }
end

-- ---- what every configurer renders alike ----------------------------------------------

-- The package's engine section (the cluster view may carry another for a spec).
function Engine:section(cluster)
  return (cluster or {}).engine_config or (self.package and self.package.engine) or {}
end

-- An address as a URL's host part: IPv6 in brackets.
function M.url_host(h)
  if h:find(":", 1, true) and not h:find("^%[") then return "[" .. h .. "]" end
  return h
end

-- The name a node is reached by when joining it.
function M.join_host(n)
  return n.fqdn or n.hostname or n.private_address or n.name
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
function M.base64(s)
  return (s:gsub("..?.?", function(c)
    local a, b, d = c:byte(1, 3)
    local n = a * 65536 + (b or 0) * 256 + (d or 0)
    local out = {}
    for i = 3, 0, -1 do
      local k = (n >> (6 * i)) & 63
      out[#out + 1] = B64:sub(k + 1, k + 1)
    end
    if not b then out[3], out[4] = "=", "=" elseif not d then out[4] = "=" end
    return table.concat(out)
  end))
end
Engine.base64 = function(s) return M.base64(s) end

-- Inline registry CAs live under /etc/cargoship/tls/, one file per registry host (name sanitised).
function M.ca_path(host)
  return "/etc/cargoship/tls/" .. host:gsub("[^%w._-]", "_") .. ".crt"
end
Engine.ca_path = function(host) return M.ca_path(host) end

function Engine:audit_path() return self.config_dir .. "/audit.yaml" end
function Engine:pss_path() return self.config_dir .. "/pss.yaml" end

local function with_kind(body, api, kind)
  local doc = {}
  for k, v in pairs(body) do doc[k] = v end
  doc.apiVersion, doc.kind = api, kind
  return yaml.dump(doc)
end

-- Controllers only: the flags pointing at them are API server flags (distro-package.md §5).
function Engine:policy_files(n, cluster)
  local section, out = self:section(cluster), {}
  if n.role ~= "controller" then return out end
  if section.audit then
    out[#out + 1] = { path = self:audit_path(), mode = "0600",
                      content = with_kind(section.audit, "audit.k8s.io/v1", "Policy") }
  end
  if section.podSecurity then
    out[#out + 1] = { path = self:pss_path(), mode = "0600",
                      content = with_kind(section.podSecurity, "apiserver.config.k8s.io/v1", "AdmissionConfiguration") }
  end
  return out
end

function Engine.config_files() return {} end

function Engine:sync_files(n, cluster)
  local out = {}
  if self.render_registries then
    for _, f in ipairs(self:render_registries(cluster or {}).files) do out[#out + 1] = f end
  end
  for _, f in ipairs(self:policy_files(n, cluster or {})) do out[#out + 1] = f end
  return out
end

-- Inline registry CAs (ca_path) are the one directory every engine's sync prunes.
function Engine.sync_dirs() return { { dir = "/etc/cargoship/tls" } } end

function Engine:sync_node(n, writes, removes)
  local out = self:stop(n)
  for _, a in ipairs(writes or {}) do out[#out + 1] = a end
  for _, a in ipairs(removes or {}) do out[#out + 1] = a end
  for _, a in ipairs(self:start(n)) do out[#out + 1] = a end
  return out
end
function Engine:static_files(n, cluster) return self:config_files(n, cluster) end
function Engine.join_files() return {} end
function Engine.secret_files() return {} end

function Engine:configure(n, cluster)
  local out = {}
  for _, f in ipairs(self:config_files(n, cluster)) do
    out[#out + 1] = action.write { path = f.path, content = f.content, mode = f.mode, secret = true }
  end
  return out
end

-- ---- services ------------------------------------------------------------------------

function Engine:wait_ready(n)
  return self:kubectl_step("wait_ready", n, self:ready_check(n),
    string.format("wait for node %s Ready", node_name(n)))
end

-- The start does not wait for the engine to report ready (a systemd Type=notify start would,
-- for ever when the engine refuses its join): the wait_ready step after it watches the
-- service's state and log beside the Ready check, on every service manager alike.
function Engine:start(n)
  local svc = self:service(n.role)
  return { action.service { verb = "start", service = svc, nowait = true },
           action.service { verb = "enable", service = svc }, self:wait_ready(n) }
end

-- start_refused(log) -> why | nil: the engine refused this start for a cause no waiting
-- ends, read off its service's recent log (the base knows none).
function Engine.start_refused() return nil end

function Engine:stop(n)
  return { action.service { verb = "stop", service = self:service(n.role) } }
end

-- o: {leader = this node leads, running = its service runs (not joined: restart it),
-- timeout = seconds a start may take}. Enable comes first: on runit enabling is what makes
-- the service supervised, and `sv up` of a service runsvdir has not picked up yet fails.
-- A start that waits for the service (one not marked nowait) gets the Ready wait's timeout:
-- the engines' own units never time out (TimeoutStartSec=0).
function Engine:first_start(n, cluster, o)
  o = o or {}
  local enable, rest = nil, {}
  for _, a in ipairs(self:start(n, cluster)) do
    if a.kind == "service" and a.verb == "start" then
      a = action.service { verb = o.running and "restart" or "start", service = a.service, timeout = o.timeout,
                           nowait = a.nowait }
    end
    if a.kind == "service" and a.verb == "enable" then enable = a else rest[#rest + 1] = a end
  end
  if enable then table.insert(rest, 1, enable) end
  return rest
end

-- upgrade(node, cluster, staged, os, o) -> the node cordoned and drained on the leader, the
-- engine's own upgrade_node records on the node, the node uncordoned on the leader.
-- o.drain: {grace_period, timeout} (drain's opts), or false: neither drain nor uncordon.
function Engine:upgrade(n, cluster, staged, os, o)
  local d = (o or {}).drain
  local out = {}
  if d ~= false then
    local s = self:kubectl_step("drain", n, self:drain(n, d), "cordon and drain node " .. n.name)
    s.timeout = (d and d.timeout or 300) + 60
    out[1] = s
  end
  for _, a in ipairs(self:upgrade_node(n, cluster or {}, staged, os)) do out[#out + 1] = a end
  if d ~= false then out[#out + 1] = self:kubectl_step("uncordon", n, self:uncordon(n), "uncordon node " .. n.name) end
  return out
end

-- The ReplicaSets and StatefulSets with their ready counts (run on the leader): what a drain
-- evicted is back once each is at its count again.
function Engine:workloads()
  return self:kubectl { "get", "replicasets,statefulsets", "--all-namespaces", "-o", "json" }
end

function Engine:upgrade_node() error(self.name .. ": upgrade_node is not defined", 2) end

-- The packages installed from the staged rpm/deb files, removed through the host's manager.
function Engine.reset_packages(_, os, names)
  if not (names and #names > 0) then return {} end
  if not os then error("reset: the host's OS configurer is needed to remove packages", 3) end
  local cmd, why = os:remove_packages(names)
  if not cmd then error("reset: " .. why, 3) end
  local out = {}
  -- the install pinned them (apt refuses to remove a held package); best effort, as a host
  -- without the pinning tool never pinned them
  local unhold = os:unhold_packages(names)
  if unhold then
    out[1] = action.run { cmd = "{ " .. unhold .. "; } >/dev/null 2>&1 || true",
                          say = "unpin " .. table.concat(names, ", ") }
  end
  -- a package-manager transaction: a cancelled run lets it finish (transport/command.lua)
  out[#out + 1] = action.run { cmd = cmd, finish = 600 }
  return out
end

-- ---- install from staged files ---------------------------------------------------------

-- os must answer install_local(paths, names) (cargoship.os.linux): rpm/apt files go
-- through the host's package manager; binaries were staged beside their target.
function Engine.install(_, _, staged, os)
  if type(staged) ~= "table" then error("install: staged files are needed", 2) end
  if staged.method == "binary" then
    local out = {}
    for _, m in ipairs(staged.moves or {}) do
      out[#out + 1] = action.run { cmd = shell.fmt("mv -f -- %s %s", m.from, m.to),
                                   say = "install " .. m.to }
    end
    return out
  end
  if staged.method ~= "rpm" and staged.method ~= "apt" then
    error("install: unknown staging method " .. tostring(staged.method), 2)
  end
  if not os then error("install: the host's OS configurer is needed for " .. staged.method .. " files", 2) end
  local acts, why = os:install_local(staged.paths or {}, staged.names)
  if not acts then error("install: " .. why, 2) end
  return acts
end

function Engine.image_import() return {} end
function Engine.image_dir() return nil end

-- ---- versions ------------------------------------------------------------------------

-- "1.35.4-rke2r1", "v1.35.4+rke2r1" -> {1, 35, 4, pre = {"rke2r1"}} | nil
-- Packages write "-", hosts "+": both become a pre-release after "+" -> "-" (engines.md §1).
function M.parse(v)
  if type(v) ~= "string" then return nil end
  local s = v:match("^%s*v?(.-)%s*$"):gsub("%+", "-")
  local a, b, c, rest = s:match("^(%d+)%.(%d+)%.(%d+)(.*)$")
  if not a then return nil end
  local pre = {}
  if rest ~= "" then
    local p = rest:match("^%-(.+)$")
    if not p then return nil end
    for id in p:gmatch("[^.]+") do pre[#pre + 1] = id end
  end
  return { tonumber(a), tonumber(b), tonumber(c), pre = pre }
end

-- Identifiers compare as semver's, with one deliberate change: digit runs inside an
-- alphanumeric identifier compare as numbers, so rke2r10 is newer than rke2r9 (plain
-- semver orders them as text and would call r10 a downgrade from r9).
local function chunks(id)
  local out = {}
  for digits, letters in id:gmatch("(%d*)(%D*)") do
    if digits ~= "" then out[#out + 1] = tonumber(digits) end
    if letters ~= "" then out[#out + 1] = letters end
  end
  return out
end

local function compare_ident(x, y)
  local cx, cy = chunks(x), chunks(y)
  for i = 1, math.max(#cx, #cy) do
    local a, b = cx[i], cy[i]
    if a == nil then return -1 end
    if b == nil then return 1 end
    if type(a) ~= type(b) then return type(a) == "number" and -1 or 1 end
    if a ~= b then return a < b and -1 or 1 end
  end
  return 0
end

-- compare_versions(a, b) -> -1 (a older), 0, 1 (a newer) | nil, why
function M.compare_versions(a, b)
  local x, y = M.parse(a), M.parse(b)
  if not x then return nil, string.format("cannot read version %q", tostring(a)) end
  if not y then return nil, string.format("cannot read version %q", tostring(b)) end
  for i = 1, 3 do
    if x[i] ~= y[i] then return x[i] < y[i] and -1 or 1 end
  end
  -- a release is newer than any of its pre-releases
  if #x.pre == 0 or #y.pre == 0 then
    if #x.pre == #y.pre then return 0 end
    return #x.pre == 0 and 1 or -1
  end
  for i = 1, math.max(#x.pre, #y.pre) do
    if x.pre[i] == nil then return -1 end
    if y.pre[i] == nil then return 1 end
    local c = compare_ident(x.pre[i], y.pre[i])
    if c ~= 0 then return c end
  end
  return 0
end
Engine.compare_versions = function(_, a, b) return M.compare_versions(a, b) end

-- Minor versions an upgrade crosses; a major change counts as unbounded.
function M.minor_jump(installed, target)
  local x, y = M.parse(installed), M.parse(target)
  if not x or not y then return 0 end
  if x[1] ~= y[1] then return math.huge end
  return y[2] - x[2]
end

-- M.judge(installed|nil, target, {role, allow_downgrade, name}) ->
--   {verdict, reason, refused, warning?, installed, target}
-- verdict: "install" (nothing installed), "same", "upgrade", "downgrade", "minor_skip",
-- "unreadable" (a version that does not parse). refused = the host must not go on.
-- The rule (Kubernetes version skew policy; kubeadm enforces it): control planes move one
-- minor at a time, so a controller skipping a minor is refused, whatever the engine. A
-- kubelet may trail the API server by up to three minors, so a worker jumping more than
-- one is allowed with a warning (its controllers are upgraded first, one minor at a time).
-- A downgrade is refused unless allow_downgrade.
function M.judge(installed, target, opts)
  opts = opts or {}
  local name = opts.name or "the engine"
  local r = { installed = installed, target = target, refused = false }
  local function say(verdict, reason, refused)
    r.verdict, r.reason, r.refused = verdict, reason, refused or false
    return r
  end
  if not M.parse(target) then
    return say("unreadable", string.format("cannot read the package's version %q", tostring(target)), true)
  end
  if installed == nil then return say("install", string.format("%s is not installed: install %s", name, target)) end
  local c, why = M.compare_versions(installed, target)
  if not c then return say("unreadable", why .. " (installed)", true) end
  if c == 0 then return say("same", string.format("%s %s is the package's version", name, installed)) end
  if c > 0 then
    local msg = string.format("will not downgrade %s: installed %s is newer than the package's %s",
      name, installed, target)
    if opts.allow_downgrade then
      r.warning = msg .. " (allowed by option)"
      return say("downgrade", r.warning)
    end
    return say("downgrade", msg, true)
  end
  local jump = M.minor_jump(installed, target)
  if jump > 1 then
    local span = jump == math.huge and "a major version" or string.format("%d minor versions", jump)
    if opts.role == "controller" then
      return say("minor_skip", string.format("cannot upgrade %s from %s to %s: it crosses %s and a control plane"
        .. " moves one minor version at a time (upgrade through each minor first)", name, installed, target, span),
        true)
    end
    r.warning = string.format("upgrade from %s to %s skips %s minor version(s); Kubernetes supports one minor"
      .. " at a time on controllers, a kubelet may trail by up to three", installed, target,
      jump == math.huge and "a major version's" or tostring(jump - 1))
  end
  return say("upgrade", string.format("upgrade %s from %s to %s", name, installed, target))
end

-- engine:judge(installed, target?, opts) -> the same record; target defaults to the package's.
function Engine:judge(installed, target, opts)
  opts = opts or {}
  if opts.name == nil then
    opts = setmetatable({ name = self.name }, { __index = opts })
  end
  return M.judge(installed, target or self.version, opts)
end

-- 64 characters of [A-Za-z0-9] from 64 random bytes (the caller reads them: no I/O here);
-- byte % 62 favours the first eight letters slightly, which costs under 0.1 bit per character.
local ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
function M.token_from_bytes(bytes)
  if type(bytes) ~= "string" or #bytes < 64 then error("token_from_bytes: 64 random bytes are needed", 2) end
  local out = {}
  for i = 1, 64 do
    local b = bytes:byte(i) % #ALNUM + 1
    out[i] = ALNUM:sub(b, b)
  end
  return table.concat(out)
end

-- join_target(node, cluster) -> {host, port, what} | nil: the address a node's engine joins
-- (the load balancer, else the leader by the name join_host gives), nil for the leader itself;
-- the dry run checks every node resolves and reaches it.
function Engine:join_target(n, cluster)
  local leader = cluster.leader
  if not leader or n.name == leader.name then return nil end
  if cluster.loadbalancer then
    return { host = cluster.loadbalancer, port = self.join_port, what = "the load balancer" }
  end
  return { host = M.join_host(leader), port = self.join_port, what = "the leader " .. leader.name, leader = leader }
end

-- listen_ports: the TCP ports the engine's own processes listen on per role (engines.md
-- §1.1), which must be free on a host where it does not run yet.
Engine.listen_ports = { controller = {}, worker = {} }

-- ---- firewall facts: the phase "Updating hosts firewall" hands them to the OS layer as data
-- peer_ports: what the engine listens on for its peers (engines.md §1.1), {tcp = {..}, udp =
-- {..}} of ports and "a-b" ranges. Peers are trusted, so they reach them; on nftables these
-- are dropped for every other source unless .host.ports opens them.
Engine.peer_ports = { tcp = {}, udp = {} }

-- A CIDR list as an engine config spells it: a YAML list or a comma-separated string.
function M.cidr_list(v)
  local out = {}
  if type(v) == "table" then
    for _, x in ipairs(v) do out[#out + 1] = tostring(x) end
  elseif type(v) == "string" then
    for x in v:gmatch("[^,%s]+") do out[#out + 1] = x end
  end
  return out
end

-- cluster_cidrs(section?) -> the pod and service CIDRs every node trusts, from the package's
-- engine section (default: self.package.engine) else the engine's defaults. The base has none.
function Engine.cluster_cidrs() return {} end

M.Engine = Engine
return M

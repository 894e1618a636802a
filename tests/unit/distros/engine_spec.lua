-- Specs for the engine base: real `--version` output in, versions and verdicts out; kubectl and service verbs.
local engine = require "distros.engine"
local os_registry = require "cargoship.os"
local shell = require "cargoship.shell"
local support = require "unit.phases.support"

local rke2, k3s, upstream = require "distros.rke2", require "distros.k3s", require "distros.upstream"

-- A fixture's captured output without its "# where it came from" line.
local function output(name)
  return (support.fixture("engines/" .. name):gsub("^#[^\n]*\n", ""))
end

describe("engine inheritance", function()
  it("rke2 and k3s share the Rancher base; upstream extends the engine base directly", function()
    local rancher = require "distros.rancher"
    assert.equal(rancher, getmetatable(rke2))
    assert.equal(rancher, getmetatable(k3s))
    assert.equal(engine.Engine, getmetatable(rancher))
    assert.equal(engine.Engine, getmetatable(upstream))
    assert.equal(rancher.render_config, rke2.render_config)
    assert.are_not.equal(rancher.render_config, upstream.render_config)
  end)

  it("sets ctx.engine from the package's type, carrying its version", function()
    local e = engine.for_package { type = "k3s", version = "1.35.2-k3s1" }
    assert.equal(k3s, getmetatable(e))
    assert.equal("k3s", e.name)
    assert.equal("1.35.2-k3s1", e.version)
    assert.equal("k3s-agent", e:service("worker"))
    local none, why = engine.for_package { type = "microk8s", version = "1.35.0" }
    assert.is_nil(none)
    assert.matches('unknown engine type "microk8s"', why)
    assert.same({ nil, "no distro package given" }, { engine.for_package(nil) })
  end)
end)

describe("engine.node_of and engine.cluster_view", function()
  it("build the verbs' node and cluster from host objects after gather_facts", function()
    local function host(name, role, facts, engine_cfg)
      return { name = name, role = role, facts = facts, config = { hostname = name, engine = engine_cfg } }
    end
    local cp1 = host("cp1", "controller", { node_name = "cp1", hostname = "cp1", fqdn = "cp1.example.internal",
                                            private_address = "10.0.0.1" }, { labels = { zone = "a" } })
    local w1 = host("w1", "worker", { node_name = "w1", private_address = "10.0.0.3" },
      { taints = { "dedicated=gpu:NoSchedule" } })
    assert.same({ name = "cp1", role = "controller", hostname = "cp1", fqdn = "cp1.example.internal",
                  private_address = "10.0.0.1", labels = { zone = "a" } }, engine.node_of(cp1))
    local view = engine.cluster_view({ cp1, w1 }, cp1, { loadbalancer = "lb.example.internal", registries = {} },
      { token = "t", agent_token = "a" })
    assert.equal("cp1", view.leader.name)
    assert.same({ "cp1" }, { view.controllers[1].name, view.controllers[2] })
    assert.equal(2, #view.nodes)
    assert.equal("lb.example.internal", view.loadbalancer)
    assert.equal("t", view.secret.token)
    local cfg = require("cargoship.yaml").load(rke2:render_config(engine.node_of(w1), view).content)[1]
    assert.equal("https://lb.example.internal:9345", cfg.server)
    assert.same({ "dedicated=gpu:NoSchedule" }, cfg["node-taint"])
  end)
end)

describe("engine version probe parses real --version output", function()
  it("rke2: the release and a development build", function()
    assert.equal("v1.34.3+rke2r3", rke2:parse_version(output("rke2/version.txt")))
    assert.equal("v1.18.12-dev+229b4b45", rke2:parse_version(output("rke2/version-dev.txt")))
  end)
  it("k3s: with and without the go line", function()
    assert.equal("v1.35.5+k3s1", k3s:parse_version(output("k3s/version.txt")))
    assert.equal("v1.18.6+k3s1", k3s:parse_version(output("k3s/version-old.txt")))
  end)
  it("upstream: kubelet --version, and kubeadm version's GitVersion", function()
    assert.equal("v1.33.3", upstream:parse_version(output("upstream/version.txt")))
    assert.equal("v1.1.3", upstream:parse_version(output("upstream/version-old.txt")))
    assert.equal("v1.33.3", upstream:parse_version(output("upstream/kubeadm-version.txt")))
  end)
  it("nothing installed, nothing printed: no version", function()
    assert.is_nil(rke2:parse_version(""))
    assert.is_nil(k3s:parse_version("k3s version dev (HEAD)\n"))
    assert.is_nil(upstream:parse_version(nil))
  end)
  it("the parsed versions compare with the package's", function()
    assert.equal(0, engine.compare_versions(rke2:parse_version(output("rke2/version.txt")), "1.34.3-rke2r3"))
    assert.equal(-1, engine.compare_versions(k3s:parse_version(output("k3s/version.txt")), "1.35.5-k3s2"))
    assert.equal(1, engine.compare_versions(upstream:parse_version(output("upstream/version.txt")), "1.33.2"))
  end)
end)

describe("engine.compare_versions", function()
  local cmp = engine.compare_versions
  it("compares a package version with a host version as semver after + -> -", function()
    assert.equal(0, cmp("v1.35.4+rke2r1", "1.35.4-rke2r1"))
    assert.equal(-1, cmp("v1.34.9+rke2r1", "1.35.4-rke2r1"))
    assert.equal(1, cmp("v1.36.0+rke2r1", "1.35.4-rke2r1"))
    assert.equal(-1, cmp("v1.35.4+rke2r1", "1.35.4-rke2r2"))
    assert.equal(0, cmp("v1.35.3", "1.35.3"))
    assert.equal(-1, cmp("v1.35.2+k3s1", "1.35.10-k3s1")) -- numbers, not text
  end)
  it("orders rke2r10 after rke2r9 (plain semver would not)", function()
    assert.equal(1, cmp("v1.35.4+rke2r10", "1.35.4-rke2r9"))
    assert.equal(-1, cmp("1.35.4-k3s.1", "1.35.4-k3s.2"))
  end)
  it("puts a pre-release before its release", function()
    assert.equal(-1, cmp("v1.18.12-dev+229b4b45", "1.18.12-rke2r1"))
    assert.equal(1, cmp("1.35.3", "1.35.3-rc.1"))
    assert.equal(-1, cmp("1.35.3-alpha", "1.35.3-alpha.1"))
  end)
  it("refuses what is not a version", function()
    local c, why = cmp("latest", "1.35.3")
    assert.is_nil(c)
    assert.equal('cannot read version "latest"', why)
    assert.is_nil((cmp("1.35", "1.35.3")))
  end)
end)

describe("engine:judge", function()
  local RKE2 = engine.for_package { type = "rke2", version = "1.34.3-rke2r3" }
  local K3S = engine.for_package { type = "k3s", version = "1.35.5-k3s1" }
  local UP = engine.for_package { type = "upstream", version = "1.34.1" }
  local installed_rke2 = rke2:parse_version(output("rke2/version.txt"))      -- v1.34.3+rke2r3
  local installed_k3s = k3s:parse_version(output("k3s/version.txt"))         -- v1.35.5+k3s1
  local installed_up = upstream:parse_version(output("upstream/version.txt")) -- v1.33.3

  it("install: nothing installed", function()
    local v = RKE2:judge(nil, nil, { role = "controller" })
    assert.same({ verdict = "install", refused = false, target = "1.34.3-rke2r3",
                  reason = "rke2 is not installed: install 1.34.3-rke2r3" }, v)
  end)

  it("same: the host runs the package's version", function()
    local v = RKE2:judge(installed_rke2, nil, { role = "worker" })
    assert.equal("same", v.verdict)
    assert.is_false(v.refused)
    assert.equal("rke2 v1.34.3+rke2r3 is the package's version", v.reason)
    assert.equal("same", K3S:judge(installed_k3s).verdict)
  end)

  it("upgrade: one minor, a patch or a newer engine release", function()
    local v = UP:judge(installed_up, nil, { role = "controller" })
    assert.same({ "upgrade", false, "upgrade upstream from v1.33.3 to 1.34.1" }, { v.verdict, v.refused, v.reason })
    assert.equal("upgrade", K3S:judge(installed_k3s, "1.35.5-k3s2", { role = "controller" }).verdict)
    assert.equal("upgrade", RKE2:judge("v1.34.2+rke2r1", nil, { role = "controller" }).verdict)
  end)

  it("downgrade: refused, unless allowed, and then with a warning", function()
    local v = RKE2:judge(installed_rke2, "1.33.9-rke2r1", { role = "worker" })
    assert.equal("downgrade", v.verdict)
    assert.is_true(v.refused)
    assert.equal("will not downgrade rke2: installed v1.34.3+rke2r3 is newer than the package's 1.33.9-rke2r1",
      v.reason)
    local allowed = RKE2:judge(installed_rke2, "1.33.9-rke2r1", { role = "worker", allow_downgrade = true })
    assert.equal("downgrade", allowed.verdict)
    assert.is_false(allowed.refused)
    assert.matches("(allowed by option)", allowed.warning, 1, true)
    -- a newer engine release of the same Kubernetes is a downgrade too
    assert.is_true(RKE2:judge("v1.34.3+rke2r4", nil, { role = "worker" }).refused)
  end)

  it("minor_skip: a controller 1.30 -> 1.32 is refused, for every engine", function()
    for _, case in ipairs({ { RKE2, "v1.30.4+rke2r1", "1.32.1-rke2r1" }, { K3S, "v1.30.4+k3s1", "1.32.1-k3s1" },
                            { UP, "v1.30.4", "1.32.1" } }) do
      local e, from, to = case[1], case[2], case[3]
      local v = e:judge(from, to, { role = "controller" })
      assert.equal("minor_skip", v.verdict, e.name)
      assert.is_true(v.refused)
      assert.equal(string.format("cannot upgrade %s from %s to %s: it crosses 2 minor versions and a control plane"
        .. " moves one minor version at a time (upgrade through each minor first)", e.name, from, to), v.reason)
    end
  end)

  it("a worker skipping a minor upgrades with a warning (a kubelet may trail the API server)", function()
    local v = UP:judge("v1.30.4", "1.32.1", { role = "worker" })
    assert.equal("upgrade", v.verdict)
    assert.is_false(v.refused)
    assert.matches("skips 1 minor version", v.warning, 1, true)
    assert.is_nil(UP:judge("v1.31.4", "1.32.1", { role = "worker" }).warning)
  end)

  it("a major version change is a skip; an unreadable version is refused", function()
    assert.equal("minor_skip", UP:judge("v1.35.0", "2.0.0", { role = "controller" }).verdict)
    local v = UP:judge("banana", "1.34.1", { role = "worker" })
    assert.same({ "unreadable", true }, { v.verdict, v.refused })
    assert.equal("unreadable", engine.judge(nil, "latest").verdict)
  end)
end)

describe("engine kubectl verbs (run on the leader)", function()
  it("quote every word and use the engine's kubeconfig and kubectl", function()
    assert.equal("env KUBECONFIG='/etc/rancher/rke2/rke2.yaml' '/var/lib/rancher/rke2/bin/kubectl' 'get' 'nodes'"
      .. " '-o' 'json'", rke2:get_nodes())
    assert.equal("env KUBECONFIG='/etc/rancher/k3s/k3s.yaml' '/usr/local/bin/k3s' 'kubectl' 'uncordon' 'w1'",
      k3s:uncordon({ name = "w1" }))
    assert.equal("env KUBECONFIG='/etc/kubernetes/admin.conf' 'kubectl' 'delete' 'node' 'it'\\''s'",
      upstream:delete_node("it's"))
    assert.has_error(function() rke2:kubectl("get nodes") end)
    assert.has_error(function() rke2:drain({}) end)
  end)

  it("render each verb as a kube action for the leader", function()
    local d = upstream:kube("drain", { name = "w1" }, { timeout = 90 })
    assert.are.same({ "kube", "drain", "w1", "kubectl drain node w1", upstream:drain("w1", { timeout = 90 }), 150 },
      { d.kind, d.verb, d.node, d.say, d.cmd, d.timeout })
    assert.are.equal(upstream:label("w1", { a = "b" }), upstream:kube("label", "w1", { a = "b" }).cmd)
    assert.are.same({ "/m.yaml", upstream:apply("/m.yaml") }, { upstream:kube("apply", "/m.yaml").path,
      upstream:kube("apply", "/m.yaml").cmd })
    assert.are.equal("kubectl delete node w2", upstream:kube("delete_node", "w2").say)
    assert.has_error(function() upstream:kube("get_nodes", "w1") end, "kube: unknown verb get_nodes")
  end)

  it("drain, cordon, label and apply", function()
    assert.equal("env KUBECONFIG='/etc/kubernetes/admin.conf' 'kubectl' 'drain' 'w1' '--ignore-daemonsets'"
      .. " '--delete-emptydir-data' '--grace-period=-1' '--timeout=300s'", upstream:drain("w1"))
    assert.equal("env KUBECONFIG='/etc/kubernetes/admin.conf' 'kubectl' 'drain' 'w1' '--ignore-daemonsets'"
      .. " '--delete-emptydir-data' '--grace-period=30' '--timeout=90s'",
      upstream:drain("w1", { grace_period = 30, timeout = 90 }))
    assert.equal("env KUBECONFIG='/etc/kubernetes/admin.conf' 'kubectl' 'cordon' 'w1'", upstream:cordon("w1"))
    assert.equal("env KUBECONFIG='/etc/kubernetes/admin.conf' 'kubectl' 'label' 'node' 'w1'"
      .. " 'node-role.kubernetes.io/gpu=true' 'old-' 'zone=a b' '--overwrite'",
      upstream:label("w1", { ["node-role.kubernetes.io/gpu"] = "true", zone = "a b", old = false }))
    assert.has_error(function() upstream:label("w1", {}) end)
    assert.equal("env KUBECONFIG='/etc/kubernetes/admin.conf' 'kubectl' 'apply' '-f' '/var/lib/kubernetes/cni.yaml'",
      upstream:apply("/var/lib/kubernetes/cni.yaml"))
  end)

  it("check Ready with one listing of every node, in a jsonpath that survives the shell", function()
    local cmd = rke2:ready_check("cp1")
    assert.equal(cmd, rke2:ready_check("w7"))
    local word = [['jsonpath={range .items[*]}{.metadata.name}{" "}]]
      .. [[{.status.conditions[?(@.type=="Ready")].status}{" "}]]
      .. [[{.status.conditions[?(@.type=="Ready")].lastHeartbeatTime}{"\n"}{end}']]
    assert.matches("'get' 'nodes' '-o' " .. word, cmd, 1, true)
    local p = io.popen("printf '%s\\n' " .. cmd:match("('jsonpath=[^']*')"))
    assert.equal(word:sub(2, -2) .. "\n", p:read("a"))
    p:close()
    -- kubectl's output: one line per node; a node without a Ready condition yet has none
    local out = "cp1 True 2026-12-01T10:00:00Z\ncp10 False 2026-12-01T09:00:00Z\nw1  \n"
    assert.equal("True 2026-12-01T10:00:00Z", rke2:ready_line(out, "cp1"))
    assert.equal("False 2026-12-01T09:00:00Z", rke2:ready_line(out, "cp10"))
    assert.equal("", rke2:ready_line(out, "w1"))
    assert.is_nil(rke2:ready_line(out, "cp"))
    assert.is_nil(rke2:ready_line("", "cp1"))
    assert.is_true(rke2:parse_ready("True"))
    assert.is_true(rke2:parse_ready("True 2026-12-01T10:00:00Z"))
    assert.is_false(rke2:parse_ready("False 2026-12-01T10:00:00Z"))
    assert.is_false(rke2:parse_ready(""))
    -- a node seen before the start: only a later heartbeat counts
    assert.is_false(rke2:parse_ready("True 2026-12-01T10:00:00Z", "2026-12-01T10:00:00Z"))
    assert.is_false(rke2:parse_ready("True", "2026-12-01T10:00:00Z"))
    assert.is_true(rke2:parse_ready("True 2026-12-01T10:00:07Z", "2026-12-01T10:00:00Z"))
  end)
end)

describe("engine service verbs", function()
  it("name each role's service", function()
    assert.equal("rke2-server", rke2:service("controller"))
    assert.equal("rke2-agent", rke2:service("worker"))
    assert.equal("k3s-server", k3s:service("controller"))
    assert.equal("k3s-agent", k3s:service("worker"))
    assert.equal("kubelet", upstream:service("controller"))
    assert.has_error(function() rke2:service("bystander") end)
  end)

  it("start = start, enable, then a wait-for-Ready step on the leader", function()
    local acts = k3s:start({ name = "w1", role = "worker" })
    assert.same({ "service", "service", "step" }, { acts[1].kind, acts[2].kind, acts[3].kind })
    assert.same({ "start", "k3s-agent" }, { acts[1].verb, acts[1].service })
    assert.same({ "enable", "k3s-agent" }, { acts[2].verb, acts[2].service })
    assert.same({ "wait_ready", "w1", "leader", "wait for node w1 Ready" },
      { acts[3].name, acts[3].node, acts[3].on, acts[3].say })
    assert.equal(k3s:ready_check("w1"), acts[3].cmd)
  end)

  it("probe the version at the known paths, then PATH", function()
    -- run for real: a fake rke2 on PATH answers with the captured output
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir " .. dir)
    local fake = assert(io.open(dir .. "/rke2", "w"))
    -- builtins only: PATH holds nothing but the fake
    fake:write("#!/bin/sh\nprintf '%s' " .. require("cargoship.util").quote(output("rke2/version.txt")) .. "\n")
    fake:close()
    os.execute("chmod +x " .. dir .. "/rke2")
    local function run(path)
      local p = io.popen("PATH=" .. path .. " /bin/sh -c " .. require("cargoship.util").quote(rke2:version_probe())
        .. "; echo \"rc=$?\"")
      local out = p:read("a")
      p:close()
      return out
    end
    local out = run(dir)
    assert.equal("v1.34.3+rke2r3", rke2:parse_version(out))
    assert.matches("rc=0\n$", out)
    assert.are.equal("rc=1\n", run("/nonexistent"))
    os.execute("rm -rf " .. dir)
    assert.is_nil(rke2:version_probe():find("exit", 1, true), "the probe must not exit the batch's shell")
    assert.matches("command -v 'kubelet'", upstream:version_probe(), 1, true)
  end)

  it("probe the service through the host's service manager", function()
    local runit = os_registry.by_name("debian"):new { service_manager = "runit", service_dir = "/etc/service" }
    assert.equal("sv status '/etc/service/rke2-agent' 2>/dev/null | grep -q '^run:'",
      rke2:service_active_probe("worker", runit))
    local sd = os_registry.by_name("rocky"):new { service_manager = "systemd" }
    assert.equal("systemctl is-active --quiet 'k3s-server'", k3s:service_active_probe("controller", sd))
    assert.equal("systemctl is-active --quiet 'kubelet'", upstream:service_active_probe("worker", nil))
    assert.has_error(function() k3s:service_active_probe("controller", sd, "is_running") end)
  end)

  -- is_up: the engine's ports may be its own (predict's port check) while its service is
  -- running, starting, restarting or stopping; run here against a fake systemctl and sv that
  -- answer as the real ones do in each state
  it("tell a service that is up or on its way from one that is stopped, through the real shell", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
    local function fake(name, body)
      local f = assert(io.open(dir .. "/" .. name, "w"))
      f:write("#!/bin/sh\n", body, "\n")
      f:close()
      assert(os.execute("chmod +x " .. dir .. "/" .. name))
    end
    fake("systemctl", [=[[ "$1" = is-active ] || exit 2; echo "$CS_STATE"; [ "$CS_STATE" = active ]]=])
    fake("sv", [=[[ "$1" = status ] || exit 2; echo "$CS_STATE"]=])
    local function up(cmd, state)
      local ok = os.execute("CS_STATE='" .. state .. "' PATH=" .. dir .. ":$PATH sh -c " .. shell.quote(cmd))
      return ok == true
    end
    local sd = os_registry.by_name("debian"):new { service_manager = "systemd" }
    local rn = os_registry.by_name("debian"):new { service_manager = "runit", service_dir = "/etc/service" }
    for _, o in ipairs { sd, false } do
      o = o or nil -- without an OS configurer: systemd
      local cmd = k3s:service_active_probe("controller", o, "is_up")
      for _, st in ipairs { "active", "activating", "reloading", "deactivating" } do
        assert.is_true(up(cmd, st), st)
      end
      for _, st in ipairs { "inactive", "failed", "unknown" } do assert.is_false(up(cmd, st), st) end
      assert.is_false(up(k3s:service_active_probe("controller", o), "activating"), "is_active: activating")
    end
    local cmd = k3s:service_active_probe("controller", rn, "is_up")
    assert.is_true(up(cmd, "run: /etc/service/k3s: (pid 81) 12s; run: log: (pid 80) 40s"))
    assert.is_true(up(cmd, "down: /etc/service/k3s: 0s, normally up, want up; run: log: (pid 80) 40s"))
    assert.is_true(up(cmd, "finish: /etc/service/k3s: (pid 90) 0s, normally up, want up"))
    assert.is_false(up(cmd, "down: /etc/service/k3s: 30s, normally up; run: log: (pid 80) 40s"))
    assert.is_false(up(cmd, "fail: /etc/service/k3s: runsv not running"))
    assert.is_false(up(k3s:service_active_probe("controller", rn), "down: /etc/service/k3s: 0s, normally up, want up"))
    os.execute("rm -rf " .. dir)
  end)

  it("loads configurers by type and refuses others", function()
    assert.equal(rke2, engine.load("rke2"))
    local e, why = engine.load("microk8s")
    assert.is_nil(e)
    assert.matches('unknown engine type "microk8s"', why)
  end)
end)

describe("engine.token_from_bytes", function()
  it("makes 64 alphanumerics from 64 bytes, and refuses fewer", function()
    local bytes = {}
    for i = 1, 64 do bytes[i] = string.char((i * 37) % 256) end
    local t = engine.token_from_bytes(table.concat(bytes))
    assert.equal(64, #t)
    assert.matches("^[%w]+$", t)
    assert.equal(t, engine.token_from_bytes(table.concat(bytes)))
    assert.has_error(function() engine.token_from_bytes("short") end)
  end)
end)

-- Integration spec on the lab: apply upgrades k3s, rke2 and upstream clusters to the next version (phases 23-24).
--
-- Issue 20 "Done when" (Upgrade, Blocked drain, kubeadm minor skip, Workloads kept up), with the
-- stand-in engines as lab-distros packages (<engine>.tar.zst, <engine>-next.tar.zst,
-- upstream-next-minor, upstream-skip-minor; the `lab-distros` target builds them), on h1-h4:
-- - 1 controller + 3 workers (Debian/Rocky, systemd/runit) installed from <engine>.tar.zst,
--   then apply with <engine>-next.tar.zst: every node Ready at the new version through the
--   leader's kubectl, none left cordoned, the controller's phase (23) before the workers'
--   (24), each node's records drain first and uncordon last, the workers one at a time
--   (-w 1) in config order; the dry run before it listed exactly that work; a second apply
--   has nothing pending.
-- - Workloads kept up, in that upgrade: a Deployment of 2 replicas on h3 and h4 whose pods are
--   Ready 35 s after they start stays at >= 1 ready replica, sampled every second through the
--   leader's API with Debian's kubectl from inside the lab (red with the wait for the
--   evicted workloads taken out of phases/lib/upgrade.lua: the next worker's drain takes
--   the last ready pod).
-- - upstream: a package two minors up is refused by the dry run with the reason.
-- - Blocked drain (-w 2: the blocked worker shares its batch): a pod on one worker protected by
--   a PodDisruptionBudget: the run exits 1 naming that worker and the pod, the worker is
--   uncordoned at its old version, the others are upgraded; after the budget is removed a
--   re-run upgrades only that worker; from the cluster the first test left at -next (one
--   install per engine): upstream one minor up (upstream-next-minor, 1.35 -> 1.36: every node
--   Ready at it), k3s and rke2 to <engine>-next2.
-- UPGRADE_ENGINES=k3s,rke2 runs only those (default: all three; CI's integration/upgrade runs
-- k3s,upstream, the others showing as pending). The blocked drain runs for k3s
-- and upstream (UPGRADE_BLOCKED=all: rke2 too; without it rke2's case shows as pending).
-- Duration: see the report of this change (measured quiet and loaded); the lab's stand-ins
-- make pods Ready STANDIN_POD_START (2) s after they start.
local cjson = require "cjson"
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"

local q = util.quote
local HOSTS = lab.hosts()
local MEMBERS = { 1, 2, 3, 4 }   -- h1 debian/systemd controller; h2 rocky/systemd, h3 debian/runit, h4 rocky/runit
local BLOCKED = 3                -- the worker whose pod the budget protects

local package_of = run.package
local function kubelet_version(path)
  local distro_package = require "cargoship.package"
  local pkg = assert(distro_package.read(path))
  distro_package.release(pkg)
  return "v" .. pkg.version:gsub("%-(%a)", "+%1")
end

local function reset()
  local code, out = lab.lab("reset 1 2 3 4")
  assert(code == 0, "lab.sh reset: " .. out)
end

local function cluster(work, name)
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: " .. name,
    "spec:", "  config:", "    loadbalancer: " .. HOSTS[1].address, "  hosts:" }
  for _, i in ipairs(MEMBERS) do
    lines[#lines + 1] = string.format("    - role: %s\n      ssh:\n        address: %s\n"
      .. "        user: root\n        keyPath: %s\n        options: {UserKnownHostsFile: %s}",
      i == 1 and "controller" or "worker", HOSTS[i].address, lab.key, lab.known_hosts)
  end
  lab.write(work .. "/cluster.yaml", table.concat(lines, "\n") .. "\n")
end

local function kubectl(engine, words)
  local eng = assert(require("distros.engine").load(engine))
  local code, out = run.ssh(1, eng:kubectl(words))
  return code, out
end

local function nodes(engine)
  local code, out = kubectl(engine, { "get", "nodes", "-o", "json" })
  assert(code == 0, "kubectl get nodes on h1: " .. out)
  local list = {}
  for _, item in ipairs(cjson.decode(out).items) do
    local ready
    for _, c in ipairs(item.status.conditions or {}) do
      if c.type == "Ready" then ready = c.status end
    end
    list[item.metadata.name] = { ready = ready, version = item.status.nodeInfo.kubeletVersion,
                                 cordoned = (item.spec or {}).unschedulable == true }
  end
  return list
end

-- want: {host index = version}; every node Ready at it and schedulable
local function assert_nodes(engine, want)
  local list = nodes(engine)
  for i, v in pairs(want) do
    local n = list[HOSTS[i].name]
    assert.is_truthy(n, HOSTS[i].name .. " is not a node")
    assert.are.equal("True", n.ready, HOSTS[i].name .. " Ready")
    assert.are.equal(v, n.version, HOSTS[i].name .. "'s kubelet version")
    assert.is_false(n.cordoned, HOSTS[i].name .. " left cordoned")
  end
end

-- Polls fn() (true when done) every second for up to `limit` seconds; -> true | nil.
local function poll(limit, fn)
  local t0 = os.time()
  repeat
    if fn() then return true end
    os.execute("sleep 1")
  until os.time() - t0 > limit
end

-- Workloads kept up: a Deployment `web` of 2 replicas whose pods are Ready WEB_DELAY s after
-- they start (a readinessProbe's initialDelaySeconds, as a slow application has): longer than
-- one worker's upgrade (~10 s quiet, ~30 s with a load average of 60), so draining the next
-- worker before the last one's evicted pod is back would leave none ready. On the last two
-- workers (h3, h4): two waits for it per engine, not three.
local WEB_DELAY = 35

local function web_ready(engine)
  local code, out = kubectl(engine, { "get", "deploy", "web", "-n", "default", "-o",
    "jsonpath={.status.readyReplicas}" })
  return code == 0 and (tonumber(out) or 0) or nil
end

-- `web` on hosts a and b, one pod each (every other node cordoned meanwhile), both Ready.
local function deploy_web(engine, a, b)
  for _, i in ipairs(MEMBERS) do
    if i ~= a and i ~= b then assert.are.equal(0, (kubectl(engine, { "cordon", HOSTS[i].name }))) end
  end
  local man = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\nspec:\n"
    .. "  replicas: 2\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n"
    .. "    spec:\n      containers:\n      - name: web\n        image: pause:1\n"
    .. "        readinessProbe: {initialDelaySeconds: " .. WEB_DELAY .. ", exec: {command: [\"true\"]}}\n"
  assert.are.equal(0, (run.ssh(1, "printf %s " .. q(man) .. " > /root/web.yaml")))
  local code, out = kubectl(engine, { "apply", "-f", "/root/web.yaml" })
  assert.are.equal(0, code, out)
  for _, i in ipairs(MEMBERS) do
    if i ~= a and i ~= b then assert.are.equal(0, (kubectl(engine, { "uncordon", HOSTS[i].name }))) end
  end
  out = select(2, kubectl(engine, { "get", "pods", "-n", "default", "-l", "app=web", "-o",
    "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}" }))
  local on = {}
  for n in out:gmatch("%S+") do on[#on + 1] = n end
  table.sort(on)
  assert.are.same({ HOSTS[a].name, HOSTS[b].name }, on, out)
  assert.is_true(poll(WEB_DELAY + 60, function() return web_ready(engine) == 2 end), "web never got 2 ready replicas")
end

-- Samples web's readyReplicas every second, through the leader's API, with Debian's kubectl
-- from inside the lab (the admin kubeconfig of h1 pointed at its address). -> stop() -> samples
-- {t = seconds, ready = n | nil (no answer)}
local function sampler(engine, work)
  local eng = assert(require("distros.engine").load(engine))
  local code, text = run.ssh(1, "cat " .. q(eng.kubeconfig))
  assert.are.equal(0, code, text)
  local kc = lab.write(work .. "/sampler.kubeconfig", (text:gsub("server: https://[^\n]+",
    "server: https://" .. HOSTS[1].address .. ":6443")))
  local out = work .. "/samples"
  local one = string.format("r=$(kubectl --kubeconfig %s --request-timeout=5s get deploy web -n default -o "
    .. "'jsonpath={.status.readyReplicas}' 2>/dev/null) && echo \"$(date +%%s) ${r:-0}\" >> %s || "
    .. "echo \"$(date +%%s) -\" >> %s", q(kc), q(out), q(out))
  -- every 2 s: web's dips last WEB_DELAY (35 s); a kubectl start costs ~0.26 s of CPU (CI's accounting)
  local loop = "while :; do (" .. one .. ") & sleep 2; done"
  local p = assert(io.popen("sh -c " .. q(loop) .. " >/dev/null 2>&1 & echo $!"))
  local pid = assert(tonumber(p:read("l")))
  p:close()
  return function()
    os.execute("kill " .. pid .. "; sleep 6")  -- the last samples (kubectl --request-timeout=5s) end
    local list = {}
    for line in io.lines(out) do
      local t, v = line:match("^(%d+) (%S+)$")
      if t then list[#list + 1] = { t = tonumber(t), ready = tonumber(v) } end
    end
    return list
  end
end

local function hosts_of(doc, id)
  local out = {}
  for _, h in ipairs(run.phase(doc, id).hosts) do
    if #h.actions > 0 then out[#out + 1] = h end
  end
  return out
end

-- tune: the batch size and drain timeout (default: one worker at a time, a drain timeout the
-- web pods' return fits in: the workloads wait is bounded by it)
local function apply_with(work, pkg, args, tune)
  return run.apply(work, args .. " -F --ready-timeout 90 " .. (tune or ("-w 1 --drain-timeout " .. WEB_DELAY + 40))
    .. " --distro " .. q(pkg))
end

local ENGINES, chosen = {}, {}
for e in (os.getenv("UPGRADE_ENGINES") or "k3s,rke2,upstream"):gmatch("[^,]+") do
  ENGINES[#ENGINES + 1], chosen[e] = e, true
end
-- an engine left out shows as pending, not as nothing (CI: tests/CMakeLists.txt CS_UPGRADE_ENGINES)
for _, engine in ipairs { "k3s", "rke2", "upstream" } do
  if not chosen[engine] then
    describe("apply upgrades " .. engine, function()
      pending("UPGRADE_ENGINES=" .. tostring(os.getenv("UPGRADE_ENGINES")) .. ": not run here "
        .. "(UPGRADE_ENGINES=k3s,rke2,upstream, or -DCS_UPGRADE_ENGINES=k3s,rke2,upstream, runs it)")
    end)
  end
end

for _, engine in ipairs(ENGINES) do
  describe("apply upgrades " .. engine, function()
    local work, old, new, oldv, newv
    setup(function()
      old, new = package_of(engine), package_of(engine .. "-next")
      oldv, newv = kubelet_version(old), kubelet_version(new)
      work = run.work()
      reset()
      cluster(work, engine .. "-upgrade")
    end)
    teardown(function()
      if work then os.execute("rm -rf " .. q(work)) end
      -- the specs after this one on its lab expect hosts without an engine (fapolicyd, firewall
      -- and prepare refuse a host that runs another engine's package: CI of stop 29)
      if engine == ENGINES[#ENGINES] then reset() end
    end)

    it("1 controller + 3 workers from " .. engine .. ".tar.zst, then -next: every node Ready at the new version, "
      .. "drained and uncordoned in order; the plan is what ran; a second apply has nothing pending", function()
      local t0 = os.time()
      local r = apply_with(work, old, "--confirm")
      assert.are.equal(0, r.code, r.stderr)
      assert_nodes(engine, { oldv, oldv, oldv, oldv })
      local t1 = os.time()
      deploy_web(engine, 3, 4)
      local t2 = os.time()
      local plan = apply_with(work, new, "--dry-run")
      assert.are.equal(3, plan.code, plan.stderr)
      -- the dry run assessed the upgrade on every node (not "unassessed"): the compare below covers it
      assert.are.equal(1, #hosts_of(plan.doc, "upgrade_controller"))
      assert.are.equal(3, #hosts_of(plan.doc, "upgrade_worker"))
      local stop = sampler(engine, work)
      r = apply_with(work, new, "--confirm")
      local samples = stop()
      assert.are.equal(0, r.code, r.stderr .. r.stdout:sub(1, 2000))
      -- workloads kept up: every answer through the upgrade had web at >= 1 ready replica (and the drains
      -- did take one away: the samples can see a change); the API answered through the workers' part
      local answered, low, zero = 0, math.huge, {}
      for _, smp in ipairs(samples) do
        if smp.ready then
          answered, low = answered + 1, math.min(low, smp.ready)
          if smp.ready < 1 then zero[#zero + 1] = smp.t - samples[1].t end
        end
      end
      assert.are.same({}, zero, "web had no ready replica at these seconds of the upgrade")
      assert.are.equal(1, low, "the drains never lowered web's ready count")
      assert.is_true(answered >= 20, answered .. " of " .. #samples .. " samples answered")
      run.compare(plan.doc, r.doc)
      assert_nodes(engine, { newv, newv, newv, newv })
      -- the controller in 23, the workers in 24 in config order; each node drained first, uncordoned after Ready
      local c, w = hosts_of(r.doc, "upgrade_controller"), hosts_of(r.doc, "upgrade_worker")
      assert.are.same({ HOSTS[1].address }, { c[1] and c[1].host })
      assert.are.same({ HOSTS[2].address, HOSTS[3].address, HOSTS[4].address }, { w[1].host, w[2].host, w[3].host })
      for _, h in ipairs({ c[1], w[1], w[2], w[3] }) do
        local says = {}
        for k, a in ipairs(h.actions) do
          says[k] = a.say
          assert.is_true(a.outcome == "done" or a.outcome == "skipped", h.host .. ": " .. a.say)
        end
        assert.matches("^cordon and drain node ", says[1])
        assert.matches("^uncordon node ", says[#says - 1])
        assert.matches("^wait for node %S+ Ready at ", says[#says - 2])
        assert.matches("^wait until the ReplicaSets", says[#says])
      end
      local dry = apply_with(work, new, "--dry-run")
      assert.are.equal(0, dry.code, dry.stdout:sub(1, 2000))
      print(string.format("# %s: install %d s, web ready %d s, upgrade (plan + run) %d s, %d samples (%d answered)",
        engine, t1 - t0, t2 - t1, os.time() - t2, #samples, answered))
    end)

    if engine == "upstream" then
      it("a package two minors up is refused by the dry run with the reason, before any host is touched", function()
        local plan = apply_with(work, package_of("upstream-skip-minor"), "--dry-run")
        assert.are.equal(1, plan.code)
        assert.matches("a control plane moves one minor version at a time", plan.stderr .. cjson.encode(plan.doc), 1,
          true)
      end)
    end
    -- from the cluster the first test left at -next: upstream one minor up (upstream-next-minor),
    -- k3s one patch up (-next2). Not rke2: it drains, upgrades and uncordons through the same code
    -- as k3s (distros/rancher.lua, phases/lib/upgrade.lua), and its case cost CI ~150 s of the hour
    -- (UPGRADE_BLOCKED=all runs it for rke2 too)
    local blocked = (os.getenv("UPGRADE_BLOCKED") == "all" or engine ~= "rke2") and it or pending
    blocked("a worker whose pod a PodDisruptionBudget protects is uncordoned at its old version, the others upgraded, "
      .. "exit 1 naming it and the pod; without the budget a re-run upgrades only it"
      .. (engine == "upstream" and " (one minor up: upstream-next-minor)" or " (-next to -next2)"), function()
      local to = package_of(engine == "upstream" and "upstream-next-minor" or engine .. "-next2")
      local fromv, tov = newv, kubelet_version(to)
      assert_nodes(engine, { fromv, fromv, fromv, fromv })
      -- web (the first test's, at WEB_DELAY) goes: this drain timeout is shorter than its pods' return
      assert.are.equal(0, (kubectl(engine, { "delete", "deploy", "web", "-n", "default" })))
      -- the blocked worker shares its batch with another (-w 2): both that one and the later batch go on
      local tune = "-w 2 --drain-timeout 10"
      -- a Deployment of one pod put on the blocked worker (every other node cordoned meanwhile), its budget min 1
      for _, i in ipairs(MEMBERS) do
        if i ~= BLOCKED then assert.are.equal(0, (kubectl(engine, { "cordon", HOSTS[i].name }))) end
      end
      local man = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: guard, namespace: default}\nspec:\n"
        .. "  replicas: 1\n  selector: {matchLabels: {app: guard}}\n  template:\n    metadata: {labels: {app: guard}}\n"
        .. "    spec: {containers: [{name: g, image: pause:1}]}\n---\napiVersion: policy/v1\n"
        .. "kind: PodDisruptionBudget\nmetadata: {name: guard, namespace: default}\n"
        .. "spec: {minAvailable: 1, selector: {matchLabels: {app: guard}}}\n"
      assert.are.equal(0, (run.ssh(1, "printf %s " .. q(man) .. " > /root/guard.yaml")))
      local code, out = kubectl(engine, { "apply", "-f", "/root/guard.yaml" })
      assert.are.equal(0, code, out)
      for _, i in ipairs(MEMBERS) do
        if i ~= BLOCKED then assert.are.equal(0, (kubectl(engine, { "uncordon", HOSTS[i].name }))) end
      end
      assert.is_true(poll(60, function()
        local c, o = kubectl(engine, { "get", "deploy", "guard", "-n", "default", "-o",
          "jsonpath={.status.readyReplicas}" })
        return c == 0 and o == "1"
      end), "guard never ready")
      local r = apply_with(work, to, "--confirm", tune)
      assert.are.equal(1, r.code, r.stdout:sub(1, 2000))
      local text = r.stderr .. cjson.encode(r.doc)
      assert.matches(HOSTS[BLOCKED].address .. ": drain node " .. HOSTS[BLOCKED].name .. " failed", text, 1, true)
      assert.matches("default/guard%-", text)
      local want = { tov, tov, tov, tov }
      want[BLOCKED] = fromv
      assert_nodes(engine, want)
      code, out = kubectl(engine, { "delete", "pdb", "guard", "-n", "default" })
      assert.are.equal(0, code, out)
      local plan = apply_with(work, to, "--dry-run", tune)
      assert.are.equal(3, plan.code)
      local w = hosts_of(plan.doc, "upgrade_worker")
      assert.are.same({ HOSTS[BLOCKED].address }, { w[1] and w[1].host, w[2] and w[2].host },
        cjson.encode(run.phase(plan.doc, "upgrade_worker")))
      assert.are.same({}, hosts_of(plan.doc, "upgrade_controller"))
      r = apply_with(work, to, "--confirm", tune)
      assert.are.equal(0, r.code, r.stdout:sub(1, 2000))
      assert_nodes(engine, { tov, tov, tov, tov })
    end)
  end)
end

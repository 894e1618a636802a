-- Integration spec on the lab: apply upgrades k3s, rke2 and upstream clusters to the next version (phases 23-24).
--
-- Issue 20 "Done when" (Upgrade, Blocked drain, kubeadm minor skip), with the stand-in
-- engines as lab-distros packages (<engine>.tar.zst, <engine>-next.tar.zst; the
-- `lab-distros` target builds them):
-- - 1 controller + 3 workers (Debian/Rocky, systemd/runit) installed from <engine>.tar.zst,
--   then apply with <engine>-next.tar.zst: every node Ready at the new version through the
--   leader's kubectl, none left cordoned, the controller's phase (23) before the workers'
--   (24), each node's records drain first and uncordon last, the workers one at a time
--   (-w 1) in config order; the dry run before it listed exactly that work; a second apply
--   has nothing pending.
-- - Blocked drain: a pod on one worker protected by a PodDisruptionBudget: the run exits 1
--   naming that worker and the pod, the worker is uncordoned at the old version, the others
--   are upgraded; after the budget is removed a re-run upgrades only that worker.
-- - upstream: a package two minors up is refused by the dry run with the reason.
-- UPGRADE_ENGINES=k3s,rke2 runs only those (default: all three).
local cjson = require "cjson"
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"

local q = util.quote
local build = os.getenv("CARGOSHIP_BUILD_DIR") or (lab.src .. "/build")
local HOSTS = lab.hosts()
local MEMBERS = { 1, 2, 3, 4 }   -- h1 debian/systemd controller; h2 rocky/systemd, h3 debian/runit, h4 rocky/runit
local BLOCKED = 3                -- the worker whose pod the budget protects

local function package_of(name)
  local path = build .. "/lab-distros/" .. name .. ".tar.zst"
  assert(io.open(path), path .. " is missing: build the lab-distros target (cmake --build build -t lab-distros)")
  return path
end

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

local function hosts_of(doc, id)
  local out = {}
  for _, h in ipairs(run.phase(doc, id).hosts) do
    if #h.actions > 0 then out[#out + 1] = h end
  end
  return out
end

local function apply_with(work, pkg, args)
  return run.apply(work, args .. " -F -w 1 --ready-timeout 90 --drain-timeout 30 --distro " .. q(pkg))
end

local ENGINES = {}
for e in (os.getenv("UPGRADE_ENGINES") or "k3s,rke2,upstream"):gmatch("[^,]+") do ENGINES[#ENGINES + 1] = e end

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
    teardown(function() if work then os.execute("rm -rf " .. q(work)) end end)

    it("1 controller + 3 workers from " .. engine .. ".tar.zst, then -next: every node Ready at the new version, "
      .. "drained and uncordoned in order; the plan is what ran; a second apply has nothing pending", function()
      local t0 = os.time()
      local r = apply_with(work, old, "--confirm")
      assert.are.equal(0, r.code, r.stderr)
      assert_nodes(engine, { oldv, oldv, oldv, oldv })
      local t1 = os.time()
      local plan = apply_with(work, new, "--dry-run")
      assert.are.equal(3, plan.code, plan.stderr)
      -- the dry run assessed the upgrade on every node (not "unassessed"): the compare below covers it
      assert.are.equal(1, #hosts_of(plan.doc, "upgrade_controller"))
      assert.are.equal(3, #hosts_of(plan.doc, "upgrade_worker"))
      r = apply_with(work, new, "--confirm")
      assert.are.equal(0, r.code, r.stderr .. r.stdout:sub(1, 2000))
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
      print(string.format("# %s: install %d s, upgrade (plan + run) %d s", engine, t1 - t0, os.time() - t1))
    end)

    it("a worker whose pod a PodDisruptionBudget protects is uncordoned at the old version, the others upgraded, "
      .. "exit 1 naming it and the pod; without the budget a re-run upgrades only it", function()
      reset()
      local r = apply_with(work, old, "--confirm")
      assert.are.equal(0, r.code, r.stderr)
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
      r = apply_with(work, new, "--confirm")
      assert.are.equal(1, r.code, r.stdout:sub(1, 2000))
      local text = r.stderr .. cjson.encode(r.doc)
      assert.matches(HOSTS[BLOCKED].address .. ": drain node " .. HOSTS[BLOCKED].name .. " failed", text, 1, true)
      assert.matches("default/guard%-", text)
      local want = { newv, newv, newv, newv }
      want[BLOCKED] = oldv
      assert_nodes(engine, want)
      code, out = kubectl(engine, { "delete", "pdb", "guard", "-n", "default" })
      assert.are.equal(0, code, out)
      local plan = apply_with(work, new, "--dry-run")
      assert.are.equal(3, plan.code)
      local w = hosts_of(plan.doc, "upgrade_worker")
      assert.are.same({ HOSTS[BLOCKED].address }, { w[1] and w[1].host, w[2] and w[2].host },
        cjson.encode(run.phase(plan.doc, "upgrade_worker")))
      assert.are.same({}, hosts_of(plan.doc, "upgrade_controller"))
      r = apply_with(work, new, "--confirm")
      assert.are.equal(0, r.code, r.stdout:sub(1, 2000))
      assert_nodes(engine, { newv, newv, newv, newv })
    end)

    if engine == "upstream" then
      it("a package two minors up is refused by the dry run with the reason, before any host is touched", function()
        local plan = apply_with(work, package_of("upstream-skip-minor"), "--dry-run")
        assert.are.equal(1, plan.code)
        assert.matches("a control plane moves one minor version at a time", plan.stderr .. cjson.encode(plan.doc), 1,
          true)
      end)
    end
  end)
end

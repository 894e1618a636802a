-- Integration spec on the lab: engine config drift (apply phases 26-27, `cargoship engine-config-sync`), per engine.
--
-- Takes about 3.5 minutes on a quiet machine at most (measured 192 s in all on a loaded 2-core
-- machine: k3s ~75 s, rke2 ~50 s (install ~15 s, mirror change ~30 s, chart values ~6 s),
-- upstream ~75 s (install ~25 s, mirror change ~35 s); rke2 and upstream add ~2 minutes,
-- one install each). Issue 20 "Done when" (Drift) and issue 21
-- (engine-config-sync), for k3s, rke2 and upstream in turn, each on one installed cluster of the
-- first three lab hosts (1 controller, 2 workers: Debian/Rocky, systemd/runit), the stand-in
-- from build/lab-distros/<engine>.tar.zst (the engine differences are the unit specs',
-- tests/unit/phases/sync_spec.lua). DRIFT_ENGINES=k3s,rke2 runs only those (default: all three).
-- Every engine:
-- - a registry mirror changed in the cluster file (one worker already holding the new file,
--   another holding a stale CA file in /etc/cargoship/tls): the dry run names the file, why,
--   and the drifted hosts only, and writes nothing; the real run restarts only those hosts
--   (the other engine keeps its process), removes the stale file; its JSON is the plan's;
--   a second apply has nothing pending. The mirror's file: registries.yaml (k3s, rke2),
--   containerd's certs.d/docker.io/hosts.toml (upstream; h3 also holds the hosts.toml of a
--   registry the cluster file no longer has, which is stale). Upstream's engine process is the
--   kubelet (stopped and started around the write); containerd reads hosts.toml on each pull,
--   so it keeps its process, and restarts only where its own config.toml drifted (h3 here).
-- k3s and rke2 (the rancher family):
-- - chart values changed (a distro.yaml carrying engine.manifest, through registry-sync):
--   written in place on the controller, no engine restarted (~6 s). Upstream has no chart
--   values: kubeadm runs no helm controller, so its sync keeps no HelmChartConfig.
-- k3s only:
-- - `engine-config-sync` after another mirror change restarts only the drifted host; then it
--   has nothing pending (the command is engine-neutral: the phases above are what it runs).
-- Uses lab.hosts()[1..3] only, after `lab.sh reset` of those three (before each engine).
local cjson = require "cjson"
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"

local q = util.quote
local build = os.getenv("CARGOSHIP_BUILD_DIR") or (lab.src .. "/build")
local HOSTS = lab.hosts()
local MEMBERS = { 1, 2, 3 }
local STALE = "/etc/cargoship/tls/old-mirror.crt"

-- What differs per engine: the mirror's file, the engine's processes (and a separately run
-- container runtime's, with its own config file), what the running engine writes on its own,
-- the chart whose values change (and the package's version, for a bare distro.yaml).
local ENGINES = {
  k3s = { reg = "/etc/rancher/k3s/registries.yaml", procs = "k3s (server|agent)",
    own = "^/var/lib/rancher/k3s/server/db", chart = "k3s-coredns", version = "1.35.2-k3s1",
    chart_path = "/var/lib/rancher/k3s/server/manifests/k3s-coredns-config.yaml" },
  rke2 = { reg = "/etc/rancher/rke2/registries.yaml", procs = "rke2 (server|agent)",
    own = "^/var/lib/rancher/rke2/server/db", chart = "rke2-coredns", version = "1.35.4-rke2r1",
    chart_path = "/var/lib/rancher/rke2/server/manifests/rke2-coredns-config.yaml" },
  upstream = { reg = "/etc/containerd/certs.d/docker.io/hosts.toml", procs = "[ /]kubelet( |$)",
    runtime = "[ /]containerd( |$)", runtime_config = "/etc/containerd/config.toml", own = "^/var/lib/etcd",
    stale = "/etc/containerd/certs.d/quay.io/hosts.toml" },
}

local E, work, pkg, bare

local function cluster_text(mirror)
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: drift", "spec:",
    "  config:", "    loadbalancer: " .. HOSTS[1].address,
    "    registries:", "      - name: docker.io", "        proxy: {url: '" .. mirror .. "'}", "  hosts:" }
  for _, i in ipairs(MEMBERS) do
    lines[#lines + 1] = string.format("    - role: %s\n      ssh:\n        address: %s\n"
      .. "        user: root\n        keyPath: %s\n        options: {UserKnownHostsFile: %s}",
      i == 1 and "controller" or "worker", HOSTS[i].address, lab.key, lab.known_hosts)
  end
  return table.concat(lines, "\n") .. "\n"
end

local function use_mirror(mirror)
  lab.write(work .. "/cluster.yaml", cluster_text(mirror))
end

-- The registries file cargoship renders for a mirror: the real loader and the real engine.
local function registries_for(mirror)
  local cfg = assert(require("cargoship.config").load_string(cluster_text(mirror), "drift.yaml"))
  local eng = assert(require("distros.engine").load(E.name))
  return eng:render_registries(cfg).files[1].content
end

local function put(i, path, content)
  local code, out = run.ssh(i, "umask 077; mkdir -p \"$(dirname " .. q(path) .. ")\"; printf %s " .. q(content)
    .. " > " .. q(path))
  assert(code == 0, "h" .. i .. ": " .. out)
end

-- "pid start-time args" lines of the processes matching an extended regex on host i
local function ps(i, pattern)
  local _, out = run.ssh(i, "ps -eo pid=,lstart=,args= | grep -E " .. q(pattern) .. " | grep -v grep | sort")
  if not out:find("%d") then
    local _, all = run.ssh(i, "ps -eo pid=,args=")
    error("h" .. i .. ": no process matches " .. pattern .. ":\n" .. all)
  end
  return out
end

-- per member: the engine's processes (and the runtime's, E.runtime, in .runtime)
local function processes()
  local out = {}
  for _, i in ipairs(MEMBERS) do
    out[i] = ps(i, E.procs)
    if E.runtime then out[i] = { engine = out[i], runtime = ps(i, E.runtime) } end
  end
  return out
end
local function engine_of(p) return type(p) == "table" and p.engine or p end

-- The hosts (addresses) with actions in a phase of a report, and their actions' sentences.
local function acting(doc, id)
  local out = {}
  for _, h in ipairs(run.phase(doc, id).hosts) do
    if #h.actions > 0 then
      local says = {}
      for _, a in ipairs(h.actions) do says[#says + 1] = a.say end
      out[h.host] = says
    end
  end
  return out
end

local function has(list, s)
  for _, x in ipairs(list or {}) do if x == s then return true end end
  return false
end

-- What a running engine writes on its own (its datastore, its logs) is not the dry run's. The
-- package managers' caches are not ignored: the dry run's reads of the hosts' packages (apt-get
-- -s without its on-disk cache, the versionlock list read from its file) must leave them as they are.
local function uppers()
  local ignore = { E.own, "^/var/log/" }
  for _, p in ipairs(run.IGNORE) do ignore[#ignore + 1] = p end
  local s = {}
  for _, i in ipairs(MEMBERS) do s[i] = lab.upper_tree(i, ignore) end
  return s
end

local function apply(args)
  return run.apply(work, args .. " --ready-timeout 90 --drain-timeout 30 --distro " .. q(pkg))
end
local function sync(args, distro)
  return run.command(work, "engine-config-sync", args .. " --ready-timeout 90 --drain-timeout 30 --distro "
    .. q(distro or pkg))
end

-- One engine's cluster: installed from <name>.tar.zst on h1-h3, the mirror at mirror-a.
local function install(name)
  E = ENGINES[name]
  E.name = name
  pkg = build .. "/lab-distros/" .. name .. ".tar.zst"
  assert(io.open(pkg), pkg .. " is missing: build the lab-distros target (cmake --build build -t lab-distros)")
  work = run.work()
  local code, out = lab.lab("reset 1 2 3")
  assert(code == 0, "lab.sh reset: " .. out)
  use_mirror("https://mirror-a.lab.internal:5000")
  local t0 = os.time()
  local r = apply("--confirm")
  assert(r.code == 0, r.stderr .. r.stdout:sub(1, 2000))
  print(string.format("# %s install on 3 hosts: %d s", name, os.time() - t0))
end

local function mirror_change()
  local t0, b, reg = os.time(), "https://mirror-b.lab.internal:5000", E.reg
  use_mirror(b)
  put(2, reg, registries_for(b))          -- h2 is in line already
  put(3, STALE, "stale\n")                -- h3 holds a CA no registry renders
  if E.stale then put(3, E.stale, "stale\n") end  -- and a file of a registry the cluster file dropped
  if E.runtime_config then                -- and a runtime config edited by hand
    local code, out = run.ssh(3, "echo '# edited' >> " .. q(E.runtime_config))
    assert(code == 0, out)
  end
  local before, up0 = processes(), uppers()
  local plan = apply("--dry-run")
  assert.are.equal(3, plan.code, plan.stderr .. plan.stdout:sub(1, 1500))
  local up1 = uppers()
  for _, i in ipairs(MEMBERS) do assert.are.same({}, lab.snapshot_diff(up0[i], up1[i]), "h" .. i) end
  local c, w = acting(plan.doc, "sync_controller"), acting(plan.doc, "sync_worker")
  local h1, h2, h3 = HOSTS[1].address, HOSTS[2].address, HOSTS[3].address
  assert.is_truthy(c[h1], cjson.encode(run.phase(plan.doc, "sync_controller")))
  assert.is_true(has(c[h1], "write " .. reg .. " (different content)"), table.concat(c[h1], " | "))
  assert.is_nil(w[h2], "h2 holds the new file: nothing to sync there")
  assert.is_true(has(w[h3], "write " .. reg .. " (different content)"), table.concat(w[h3], " | "))
  assert.is_true(has(w[h3], "remove " .. STALE .. " (stale: the cluster file no longer renders it)"))
  if E.stale then
    assert.is_true(has(w[h3], "remove " .. E.stale .. " (stale: the cluster file no longer renders it)"))
  end
  if E.runtime_config then
    assert.is_true(has(w[h3], "write " .. E.runtime_config .. " (different content)"), table.concat(w[h3], " | "))
    assert.is_false(has(c[h1], "write " .. E.runtime_config .. " (different content)"))
  end
  assert.are.equal("cordon and drain node " .. HOSTS[3].name, w[h3][1])
  -- nothing else is pending: the sync is the plan
  for _, p in ipairs(plan.doc.phases) do
    if p.id ~= "sync_controller" and p.id ~= "sync_worker" and p.id ~= "acquire_lock" and p.id ~= "release_lock"
      and p.verdict == "would_act" then
      error(p.id .. " has work: " .. cjson.encode(p))
    end
  end

  local r = apply("--confirm")
  assert.are.equal(0, r.code, r.stderr .. r.stdout:sub(1, 2000))
  run.compare(plan.doc, r.doc)
  local after = processes()
  assert.are_not.equal(engine_of(before[1]), engine_of(after[1]), "h1 restarted")
  assert.are.same(before[2], after[2], "h2's engine kept its process")
  assert.are_not.equal(engine_of(before[3]), engine_of(after[3]), "h3 restarted")
  if E.runtime then
    assert.are.equal(before[1].runtime, after[1].runtime, "h1's runtime kept its process: hosts.toml needs none")
    assert.are_not.equal(before[3].runtime, after[3].runtime, "h3's runtime restarted: its config.toml changed")
  end
  for _, i in ipairs(MEMBERS) do
    local code, out = run.ssh(i, "cat " .. q(reg) .. "; stat -c %a " .. q(reg) .. "; for f in " .. STALE .. " "
      .. q(E.stale or STALE) .. "; do test -e $f && echo STALE $f; done; true")
    assert.are.equal(0, code)
    assert.are.equal(registries_for(b) .. "600\n", out, "h" .. i)
  end
  local again = apply("--dry-run")
  assert.are.equal(0, again.code, again.stdout:sub(1, 2000))
  print(string.format("# %s mirror change, apply: %d s", E.name, os.time() - t0))
end

-- The chart values package: the same engine and version as <engine>.tar.zst, a bare
-- distro.yaml (nothing to upload) with engine.manifest added
local function chart_package()
  bare = work .. "/charts/distro.yaml"
  assert(os.execute("mkdir -p " .. q(work .. "/charts")))
  lab.write(bare, table.concat({ "apiVersion: zarf.dev/v1alpha1", "kind: ZarfDistro",
    "metadata: {name: " .. E.name .. "-charts, version: " .. E.version .. "}", "spec:", "  type: " .. E.name,
    "  version: " .. E.version, "  config:", "    engine:", "      config: {write-kubeconfig-mode: '0600'}",
    "      manifest: {" .. E.chart .. ": {autoscaler: {enabled: false}}}", "" }, "\n"))
end

local function chart_values()
  local t0, before = os.time(), processes()
  -- the real run's JSON carries the plan it showed (a dry-run pass): compared with what ran
  local r = run.command(work, "registry-sync", "--confirm --distro " .. q(bare))
  assert.are.equal(0, r.code, r.stderr .. r.stdout:sub(1, 2000))
  local plan = r.doc.plan
  assert.are.same({ [HOSTS[1].address] = { "write " .. E.chart_path .. " (missing)" } },
    acting(plan, "sync_controller"))
  assert.are.same({}, acting(plan, "sync_worker"))
  run.compare(plan, r.doc)
  assert.are.same(before, processes(), "no engine restarted")
  local code, out = run.ssh(1, "stat -c %a " .. E.chart_path .. "; grep -c HelmChartConfig " .. E.chart_path)
  assert.are.equal(0, code, out)
  assert.are.equal("600\n1\n", out)
  print(string.format("# %s chart values: %d s", E.name, os.time() - t0))
end

local function config_sync()
  local c = "https://mirror-c.lab.internal:5000"
  use_mirror(c)
  put(1, E.reg, registries_for(c))
  put(2, E.reg, registries_for(c))
  local t0, before = os.time(), processes()
  local r = sync("--confirm", bare)
  assert.are.equal(0, r.code, r.stderr .. r.stdout:sub(1, 2000))
  local plan = r.doc.plan
  assert.are.same({}, acting(plan, "sync_controller"))
  local w = acting(plan, "sync_worker")
  assert.are.same({ HOSTS[3].address }, (function()
    local k = {}
    for h in pairs(w) do k[#k + 1] = h end
    return k
  end)())
  run.compare(plan, r.doc)
  local after = processes()
  assert.are.equal(before[1], after[1], "h1's engine kept its process")
  assert.are.equal(before[2], after[2], "h2's engine kept its process")
  assert.are_not.equal(before[3], after[3], "h3 restarted")
  local again = sync("--dry-run", bare)
  assert.are.equal(0, again.code, again.stdout:sub(1, 2000))
  print(string.format("# engine-config-sync: %d s", os.time() - t0))
end

teardown(function()
  if work then os.execute("rm -rf " .. q(work)) end
  -- the next spec on this lab meets these hosts: a reset that failed is this spec's failure
  local code, out = lab.lab("reset 1 2 3")
  assert(code == 0, "lab.sh reset: " .. out)
end)

for name in (os.getenv("DRIFT_ENGINES") or "k3s,rke2,upstream"):gmatch("[^,]+") do
  assert(ENGINES[name], "DRIFT_ENGINES: unknown engine " .. name)
  describe("engine config drift, " .. name, function()
    setup(function()
      if work then os.execute("rm -rf " .. q(work)) end
      install(name)
      if E.chart then chart_package() end
    end)

    it("a changed mirror: the dry run names the file, why and the drifted hosts only, writing nothing; the run "
      .. "restarts only those, removes the stale CA file, did what the plan said; a second apply has nothing",
      mirror_change)

    if ENGINES[name].chart then
      it("chart values are written in place on the controller, no engine restarted (registry-sync, a distro.yaml)",
        chart_values)
    end
    if name == "k3s" then
      it("engine-config-sync after another mirror change restarts only the drifted host; then nothing is pending",
        config_sync)
    end
  end)
end

-- Specs for phases 26-27 (Sync Registry Config Controller / Worker): per file drift with its reason, stale files,
-- chart values in place, the restart sequence, which nodes are chosen, and the run's order and restarts.
--
-- Packages are tests/fixtures/packages/k3s-sync (registries, audit, PSS, chart values) and
-- tests/fixtures/packages/upstream, built and read by the real code; the engine renders the
-- desired files. Each host's disk is a table (path -> {content, mode}) the facts probe is
-- answered from, parsed out of the real probe command, so the real facts.host parser reads it.
local common = require "cargoship.phases.lib.engine_common"
local digest = require "cargoship.digest"
local engine = require "distros.engine"
local host_mod = require "cargoship.host"
local loop = require "cargoship.loop"
local os_registry = require "cargoship.os"
local packages = require "unit.phases.packages"
local support = require "unit.phases.support"

local controller = require "cargoship.phases.sync_controller"
local worker = require "cargoship.phases.sync_worker"

local MIRROR = { { name = "docker.io", proxy = { endpoint = "https://mirror.lab.internal:5000" },
                   tls = { ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n" } } }

local function unquote(s)
  return (s:gsub("^'(.*)'$", "%1"):gsub("'\\''", "'"))
end

-- The answers of facts.host's files and dirs probes for a disk.
local function files_answer(disk, body)
  local out = {}
  for path, i in body:gmatch("cs_file ('[^\n]-') (%d+)\n?") do
    local f = disk[unquote(path)]
    if f then
      out[#out + 1] = string.format("%s Y file %s root root %s", i, f.mode:gsub("^0", ""), digest.sha256(f.content))
    else
      out[#out + 1] = i .. " N"
    end
  end
  return table.concat(out, "\n") .. "\n"
end

-- (find's -maxdepth: the files down to that depth, by their path below the dir)
local function dirs_answer(disk, body)
  local out = {}
  for dir, i, depth in body:gmatch("if %[ %-d ('[^\n]-') %]; then echo '(%d+) %-'; find '[^\n]-' %-mindepth 1 "
    .. "%-maxdepth '?(%d+)'?") do
    dir = unquote(dir)
    local names = {}
    for p in pairs(disk) do
      local name = p:sub(1, #dir + 1) == dir .. "/" and p:sub(#dir + 2)
      if name and select(2, name:gsub("/", "")) < tonumber(depth) then names[#names + 1] = name end
    end
    if #names > 0 then
      out[#out + 1] = i .. " -"
      table.sort(names)
      for _, n in ipairs(names) do out[#out + 1] = i .. " " .. n end
    end
  end
  return table.concat(out, "\n") .. "\n"
end

local function cluster(registries)
  return { name = "lab", loadbalancer = "10.253.11.10", hosts = {}, profiles = {}, registries = registries }
end

-- A dry-run host whose engine runs the package's version ("same") and has joined.
local function dry_host(name, role, disk, action)
  local h = support.host({ name = name, role = role }, {
    files = function(body) return files_answer(disk, body) end,
    dirs = function(body) return dirs_answer(disk, body) end,
  })
  h.os = os_registry.by_name("debian"):new { service_manager = "systemd" }
  h.facts = { node_name = name, hostname = name, private_address = "10.253.11.1",
              engine = { running = true, joined = true, version = "v1.35.2+k3s1", action = action or "same" } }
  return h
end

local function context(pkg_name, hosts, registries, options)
  local ctx = support.ctx(hosts, { distro = packages.of(pkg_name), cluster = cluster(registries),
    options = options or {} })
  ctx.engine = engine.for_package(ctx.distro)
  ctx.leader = hosts[1]
  ctx.nodes = { { name = hosts[1].name, host = hosts[1], heartbeat = "2026-12-01T00:00:00Z" } }
  return ctx
end

-- The disk a converged node has: every file the engine renders for it, plus files of other phases.
local function converged(ctx, host)
  local disk = {
    ["/etc/rancher/k3s/config.yaml"] = { content = "node-name: x\n", mode = "0600" },
    ["/etc/cargoship/distro-release.json"] = { content = "{}\n", mode = "0600" },
    ["/var/lib/rancher/k3s/server/manifests/ccm.yaml"] = { content = "kind: List\n", mode = "0600" },
  }
  for _, f in ipairs(ctx.engine:sync_files(common.node(host), common.cluster(ctx))) do
    disk[f.path] = { content = f.content, mode = f.mode or "0600" }
  end
  return disk
end

local function run(fn)
  local ok, a, b = loop.run(fn)
  assert(ok, a)
  return a, b
end

local function sayings(acts)
  local out = {}
  for i, a in ipairs(acts) do
    out[i] = a.kind == "step" and a.name or a.kind == "service" and (a.verb .. " " .. a.service) or a.say
  end
  return out
end

after_each(function() packages.release() end)

describe("Sync Registry Config (assess)", function()
  local disk, cp1, w1, ctx

  local function setup(registries, options)
    disk = {}
    cp1, w1 = dry_host("cp1", "controller", disk), dry_host("w1", "worker", {})
    ctx = context("k3s-sync", { cp1, w1 }, registries, options)
    for p, f in pairs(converged(ctx, cp1)) do disk[p] = f end
  end

  it("has nothing to do on a converged node, the files other phases keep in /etc/cargoship left alone", function()
    setup(MIRROR)
    assert.are.same({}, run(function() return controller.assess(ctx, cp1) end))
  end)

  it("a changed mirror: drain, stop, the registries file written (why: different content), start, Ready, uncordon",
    function()
    setup(MIRROR, { drain_grace_period = 30, drain_timeout = 60 })
    ctx.cluster.registries = { { name = "docker.io", proxy = { endpoint = "https://other.lab.internal:5000" },
                                 tls = MIRROR[1].tls } }
    local acts = run(function() return controller.assess(ctx, cp1) end)
    assert.are.same({
      "drain", "stop k3s-server", "run k3s-killall.sh if present",
      "remove /var/lib/rancher/k3s/agent/images/.cache.json",
      "write /etc/rancher/k3s/registries.yaml (different content)",
      "start k3s-server", "enable k3s-server", "wait_ready", "uncordon", "wait_workloads",
    }, sayings(acts))
    assert.matches("'drain' 'cp1' .*'%-%-grace%-period=30' '%-%-timeout=60s'", acts[1].cmd)
    assert.are.equal("2026-12-01T00:00:00Z", acts[8].after, "Ready counts only a heartbeat newer than before")
    assert.is_true(acts[5].secret, "the registries file holds credentials: its record is secret")
    assert.are.equal("0600", acts[5].mode)
  end)

  it("--no-drain: the same without cordon, drain, uncordon or the workloads wait", function()
    setup(MIRROR, { no_drain = true })
    disk["/etc/rancher/k3s/audit.yaml"] = nil
    local acts = run(function() return controller.assess(ctx, cp1) end)
    assert.are.same({ "stop k3s-server", "run k3s-killall.sh if present",
      "remove /var/lib/rancher/k3s/agent/images/.cache.json", "write /etc/rancher/k3s/audit.yaml (missing)",
      "start k3s-server", "enable k3s-server", "wait_ready" }, sayings(acts))
  end)

  it("chart values alone are written in place: no drain, no stop, no restart", function()
    setup(MIRROR)
    local p = "/var/lib/rancher/k3s/server/manifests/k3s-coredns-config.yaml"
    disk[p] = { content = "old values\n", mode = "0600" }
    assert.are.same({ "write " .. p .. " (different content)" },
      sayings(run(function() return controller.assess(ctx, cp1) end)))
    disk[p] = nil
    assert.are.same({ "write " .. p .. " (missing)" }, sayings(run(function() return controller.assess(ctx, cp1) end)))
  end)

  it("a wrong mode and a stale file in each managed directory restart the node; other files are kept", function()
    setup(MIRROR)
    disk["/etc/rancher/k3s/pss.yaml"].mode = "0644"
    disk["/etc/cargoship/tls/old.registry_5000.crt"] = { content = "x", mode = "0600" }
    disk["/etc/cargoship/leftover.json"] = { content = "x", mode = "0600" }
    disk["/var/lib/rancher/k3s/server/manifests/k3s-traefik-config.yaml"] = { content = "x", mode = "0600" }
    local said = sayings(run(function() return controller.assess(ctx, cp1) end))
    local want = {
      "write /etc/rancher/k3s/pss.yaml (mode 0644, not 0600)",
      "remove /etc/cargoship/tls/old.registry_5000.crt (stale: the cluster file no longer renders it)",
      "remove /etc/cargoship/leftover.json (stale: the cluster file no longer renders it)",
      "remove /var/lib/rancher/k3s/server/manifests/k3s-traefik-config.yaml (stale: the cluster file no longer "
        .. "renders it)",
    }
    for i, w in ipairs(want) do assert.are.equal(w, said[4 + i]) end
    assert.are.equal("start k3s-server", said[9])
    for _, s in ipairs(said) do
      assert.is_nil(s:find("distro-release", 1, true))
      assert.is_nil(s:find("ccm.yaml", 1, true))
      assert.is_nil(s:find("/etc/rancher/k3s/config.yaml", 1, true), "config.yaml is not the sync's")
    end
  end)

  it("a registry dropped from the cluster file: its CA file is stale, the registries file rewritten", function()
    setup(MIRROR)
    ctx.cluster.registries = {}
    local said = sayings(run(function() return controller.assess(ctx, cp1) end))
    assert.are.equal("write /etc/rancher/k3s/registries.yaml (different content)", said[5])
    assert.are.equal("remove /etc/cargoship/tls/docker.io.crt (stale: the cluster file no longer renders it)", said[6])
  end)

  it("a worker's managed dirs leave the manifests dir alone, and it gets no policies or chart values", function()
    setup(MIRROR)
    local wdisk = {}
    for p, f in pairs(converged(ctx, w1)) do wdisk[p] = f end
    wdisk["/var/lib/rancher/k3s/server/manifests/x-config.yaml"] = { content = "x", mode = "0600" }
    w1 = dry_host("w1", "worker", wdisk)
    ctx.hosts[2] = w1
    assert.are.same({}, run(function() return worker.assess(ctx, w1) end))
    assert.is_nil(wdisk["/etc/rancher/k3s/audit.yaml"])
  end)

  it("chooses settled nodes of its role only: an upgrade, an install or a stopped engine is another phase's", function()
    setup(MIRROR)
    local up = dry_host("cp2", "controller", {}, "upgrade")
    local stopped = dry_host("cp3", "controller", {})
    stopped.facts.engine.running = false
    local unjoined = dry_host("cp4", "controller", {})
    unjoined.facts.engine.joined = false
    ctx.hosts = { cp1, w1, up, stopped, unjoined }
    assert.are.same({ cp1 }, controller.prepare(ctx))
    assert.are.same({ w1 }, worker.prepare(ctx))
    assert.are.same({}, run(function() return controller.assess(ctx, up) end))
  end)
end)

describe("Sync Registry Config, upstream engine (assess)", function()
  it("containerd's hosts.toml drifted: kubelet stopped and started, containerd left running", function()
    local disk = {}
    local w = dry_host("w1", "worker", disk)
    local cp = dry_host("cp1", "controller", {})
    local ctx = context("upstream", { cp, w }, MIRROR, { no_drain = true })
    for _, f in ipairs(ctx.engine:sync_files(common.node(w), common.cluster(ctx))) do
      disk[f.path] = { content = f.content, mode = f.mode or "0600" }
    end
    assert.are.same({}, run(function() return worker.assess(ctx, w) end))
    disk["/etc/containerd/certs.d/docker.io/hosts.toml"].content = "server = \"https://old\"\n"
    assert.are.same({ "stop kubelet", "write /etc/containerd/certs.d/docker.io/hosts.toml (different content)",
      "enable kubelet", "start kubelet", "wait_ready" }, sayings(run(function() return worker.assess(ctx, w) end)))
    disk["/etc/containerd/config.toml"].mode = "0600"
    assert.are.same({ "stop kubelet", "write /etc/containerd/config.toml (mode 0600, not 0644)",
      "write /etc/containerd/certs.d/docker.io/hosts.toml (different content)", "restart containerd",
      "wait for containerd to answer", "enable kubelet", "start kubelet", "wait_ready" },
      sayings(run(function() return worker.assess(ctx, w) end)))
  end)

  it("a registry dropped from the cluster file: its hosts.toml in certs.d is stale, other files there are kept",
    function()
    local disk = {}
    local w = dry_host("w1", "worker", disk)
    local ctx = context("upstream", { dry_host("cp1", "controller", {}), w }, MIRROR, { no_drain = true })
    for _, f in ipairs(ctx.engine:sync_files(common.node(w), common.cluster(ctx))) do
      disk[f.path] = { content = f.content, mode = f.mode or "0600" }
    end
    disk["/etc/containerd/certs.d/docker.io/client.pem"] = { content = "x", mode = "0600" }
    disk["/etc/containerd/certs.d/_default/notes.txt"] = { content = "x", mode = "0600" }
    assert.are.same({}, run(function() return worker.assess(ctx, w) end))
    ctx.cluster.registries = {}
    assert.are.same({ "stop kubelet",
      "remove /etc/cargoship/tls/docker.io.crt (stale: the cluster file no longer renders it)",
      "remove /etc/containerd/certs.d/docker.io/hosts.toml (stale: the cluster file no longer renders it)",
      "enable kubelet", "start kubelet", "wait_ready" }, sayings(run(function() return worker.assess(ctx, w) end)))
  end)

  it("manages only the TLS dir and certs.d: /etc/cargoship's other files are not stale", function()
    local disk = { ["/etc/cargoship/nftables.nft"] = { content = "x", mode = "0600" } }
    local w = dry_host("w1", "worker", disk)
    local ctx = context("upstream", { dry_host("cp1", "controller", {}), w }, {}, { no_drain = true })
    for _, f in ipairs(ctx.engine:sync_files(common.node(w), common.cluster(ctx))) do
      disk[f.path] = { content = f.content, mode = f.mode or "0600" }
    end
    assert.are.same({}, run(function() return worker.assess(ctx, w) end))
  end)
end)

describe("Sync Registry Config (run)", function()
  local journal, disks

  -- A writing host: the facts probe answered from its disk, a write or remove applied to it.
  local function real_host(name, role)
    local disk = {}
    disks[name] = disk
    local rules = {
      { "cs_file()", fn = function(cmd)
          local parts = {}
          local fb = cmd:match("\n[({] (cs_file%(%).-)\n[)}] 2>/dev/null")
          local db = cmd:match("\n[({] (if %[ %-d .-)\n[)}] 2>/dev/null")
          parts[#parts + 1] = "\30cs-begin:files\n" .. files_answer(disk, fb or "") .. "\30cs-end:files:0\n"
          parts[#parts + 1] = "\30cs-begin:dirs\n" .. dirs_answer(disk, db or "") .. "\30cs-end:dirs:0\n"
          return table.concat(parts), 0
        end },
    }
    -- every controller answers as a leader would: one stands in while the leader restarts
    rules[#rules + 1] = { "'replicasets,statefulsets'", '{"items":[]}', 0 }
    rules[#rules + 1] = { "'get' 'nodes'", fn = function()
        return "cp1 True 2026-12-01T00:01:00Z\ncp2 True 2026-12-01T00:01:00Z\nw1 True 2026-12-01T00:01:00Z\n"
          .. "w2 True 2026-12-01T00:01:00Z\n", 0
      end }
    local h = host_mod.new { config = { index = 1, name = name, role = role, engine = { labels = {}, taints = {} } },
                             dry_run = false }
    h:attach(support.scripted(name, rules, function(line) journal[#journal + 1] = line end))
    h.os = os_registry.by_name("debian"):new { service_manager = "systemd" }
    h.facts = { node_name = name, hostname = name, private_address = "10.253.11.1",
                engine = { running = true, joined = true, version = "v1.35.2+k3s1", action = "same" } }
    return h
  end

  local function events()
    local out = {}
    for _, l in ipairs(journal) do
      local h = l:match("^(%S+): ")
      local d, u = l:match("'drain' '([^']+)'"), l:match("'uncordon' '([^']+)'")
      -- an engine's start does not wait for it (the systemd command restarts a unit waiting to)
      local s = l:match("systemctl (%a+) 'k3s%-%a+'") or l:match("else systemctl (%a+) %-%-no%-block 'k3s%-%a+'")
      local w = l:match("dst='([^']+)'")
      if d then out[#out + 1] = h .. ": drain " .. d
      elseif u then out[#out + 1] = h .. ": uncordon " .. u
      elseif s == "stop" or s == "start" then out[#out + 1] = h .. ": " .. s
      elseif w then out[#out + 1] = h .. ": write " .. w end
    end
    return out
  end

  before_each(function()
    journal, disks = {}, {}
    require("cargoship.phases.lib.upgrade_steps").WORKLOADS_INTERVAL = 0.01
    common.READY_INTERVAL = 0.01
    common.READY_TIMEOUT = 2
  end)

  it("restarts only the drifted nodes, controllers leader first and one at a time, through the leader", function()
    local cp1, cp2 = real_host("cp1", "controller"), real_host("cp2", "controller")
    local w1, w2 = real_host("w1", "worker"), real_host("w2", "worker")
    local hosts = { cp1, cp2, w1, w2 }
    local ctx = support.ctx(hosts, { dry_run = false, distro = packages.of("k3s-sync"), cluster = cluster(MIRROR) })
    ctx.engine = engine.for_package(ctx.distro)
    ctx.leader = cp1
    for _, h in ipairs(hosts) do
      local disk = disks[h.name]
      for p, f in pairs(converged(ctx, h)) do disk[p] = f end
    end
    -- cp1 (the leader) and w2 lack the new mirror's registries file; cp2 and w1 are in line
    ctx.cluster.registries = { { name = "docker.io", proxy = { endpoint = "https://new.lab.internal:5000" },
                                 tls = MIRROR[1].tls } }
    for _, h in ipairs({ cp2, w1 }) do
      local f = ctx.engine:sync_files(common.node(h), common.cluster(ctx))[1]
      local disk = disks[h.name]
      disk[f.path] = { content = f.content, mode = "0600" }
    end
    run(function()
      assert(support.drive(controller, ctx))
      assert(support.drive(worker, ctx))
    end)
    assert.are.same({
      "cp2: drain cp1", "cp1: stop", "cp1: write /etc/rancher/k3s/registries.yaml", "cp1: start",
      "cp2: uncordon cp1",
      "cp1: drain w2", "w2: stop", "w2: write /etc/rancher/k3s/registries.yaml", "w2: start", "cp1: uncordon w2",
    }, events())
    assert.are.same(ctx.leader, cp1, "the leader leads again after its own restart")
  end)
end)

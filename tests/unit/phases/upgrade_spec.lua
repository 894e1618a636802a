-- Specs for phases 23-24 (Upgrade Controller, Upgrade Worker): the plan from facts and a real package, the order,
-- drain through the leader, a refused drain leaving its node uncordoned at the old version.
--
-- The package is tests/fixtures/packages/k3s (1.35.2-k3s1) built and read by the real code;
-- the hosts are real Host objects over scripted connections that answer as k3s and its
-- leader's kubectl would, and record every command per host in order.
local common = require "cargoship.phases.lib.engine_common"
local host_mod = require "cargoship.host"
local loop = require "cargoship.loop"
local os_registry = require "cargoship.os"
local packages = require "unit.phases.packages"
local support = require "unit.phases.support"

local OLD, NEW = "v1.35.1+k3s1", "v1.35.2+k3s1"
local journal, version, blocked, stuck, workload_answers = {}, {}, {}, {}, {}

local function conn(name, rules)
  return support.scripted(name, rules, function(line) journal[#journal + 1] = line end)
end

-- The leader's kubectl: node listings at each node's running version, drains (refused for a
-- node in `blocked`), the workload list.
local LEADER_RULES = {
  { "'drain'", fn = function(cmd)
      for n in pairs(blocked) do
        if cmd:find("'drain' '" .. n .. "'", 1, true) then
          return "evicting pod default/web-1\nerror when evicting pods/\"web-1\" -n \"default\" (will retry after 5s): "
            .. "Cannot evict pod as it would violate the pod's disruption budget.\n"
            .. "error: unable to drain node \"" .. n .. "\" due to error: global timeout reached: 60s", 1
        end
      end
      return "node drained", 0
    end },
  { "'replicasets,statefulsets'", fn = function()
      local ready = table.remove(workload_answers, 1)
      if ready == nil then ready = 2 end
      return '{"items":[{"kind":"ReplicaSet","metadata":{"namespace":"default","name":"web"},'
        .. '"spec":{"replicas":2},"status":{"readyReplicas":' .. ready .. '}}]}', 0
    end },
  { "'-o' 'json'", fn = function()
      local items = {}
      for n, v in pairs(version) do
        items[#items + 1] = string.format('{"metadata":{"name":"%s"},"status":{"nodeInfo":{"kubeletVersion":"%s"},'
          .. '"conditions":[{"type":"Ready","status":"True"}]}}', n, v)
      end
      return '{"items":[' .. table.concat(items, ",") .. "]}", 0
    end },
  { "'get' 'nodes'", fn = function()
      local lines = {}
      for n in pairs(version) do lines[#lines + 1] = n .. " True 2026-12-01T00:00:00Z" end
      return table.concat(lines, "\n") .. "\n", 0
    end },
}

local function host(name, role, o)
  o = o or {}
  local svc = role == "controller" and "k3s-server" or "k3s-agent"
  local rules = { { ".cargoship-staged' ] && echo S1", "S1\n", 0 },
                  { "systemctl start --no-block '" .. svc .. "'", fn = function()
                    if not stuck[name] then version[name] = NEW end
                    return "", 0
                  end } }
  if o.leader then for _, r in ipairs(LEADER_RULES) do rules[#rules + 1] = r end end
  local h = host_mod.new { config = { index = 1, name = name, role = role, profile = o.profile,
                                      engine = { labels = {}, taints = {} } }, dry_run = false }
  h:attach(conn(name, rules))
  h.os = os_registry.by_name("debian"):new { service_manager = "systemd" }
  h.facts = { node_name = name, hostname = name, private_address = "10.253.11.1",
              engine = { running = true, version = OLD, action = o.action or "upgrade" } }
  version[name] = OLD
  return h
end

local function context(hosts, options, profiles)
  local ctx = support.ctx(hosts, { dry_run = false, distro = packages.of("k3s"), options = options or {},
    cluster = { name = "lab", loadbalancer = "10.253.11.10", hosts = {}, profiles = profiles or {} } })
  ctx.engine = require("distros.engine").for_package(ctx.distro)
  ctx.join_secret = { token = string.rep("T", 64), agent_token = string.rep("A", 64) }
  ctx.leader = hosts[1]
  return ctx
end

local drive = support.drive

local function run(fn)
  local ok, a, b = loop.run(fn)
  assert(ok, a)
  return a, b
end

-- The journal's lines matching any of the patterns, in order, each shortened to "host: what".
local function events()
  local out = {}
  for _, l in ipairs(journal) do
    local h = l:match("^(%S+): ")
    local d = l:match("'drain' '([^']+)'")
    local s = l:match("systemctl (%a+) 'k3s%-%a+'") or l:match("else systemctl (%a+) %-%-no%-block 'k3s%-%a+'")
    local u = l:match("'uncordon' '([^']+)'")
    if d then out[#out + 1] = h .. ": drain " .. d
    elseif u then out[#out + 1] = h .. ": uncordon " .. u
    elseif s == "stop" or s == "start" then out[#out + 1] = h .. ": " .. s end
  end
  return out
end

local controller = require "cargoship.phases.upgrade_controller"
local worker = require "cargoship.phases.upgrade_worker"

before_each(function()
  journal, version, blocked, stuck, workload_answers = {}, {}, {}, {}, {}
  require("cargoship.phases.lib.upgrade_steps").WORKLOADS_INTERVAL = 0.01
  common.READY_INTERVAL = 0.01
  common.READY_TIMEOUT = 2
end)
after_each(function() packages.release() end)

describe("Upgrade plan (assess)", function()
  local function kinds(acts)
    local out = {}
    for i, a in ipairs(acts) do
      out[i] = a.kind == "step" and a.name or (a.kind .. (a.verb and (" " .. a.verb) or ""))
    end
    return out
  end

  it("names per node: cordon and drain, stop, install, start, Ready at the new version, uncordon, workloads back",
    function()
    local cp1, w1 = host("cp1", "controller", { leader = true }), host("w1", "worker")
    local ctx = context({ cp1, w1 }, { drain_grace_period = 30, drain_timeout = 60 })
    local acts = run(function() return worker.assess(ctx, w1) end)
    local k = kinds(acts)
    assert.equal("drain", k[1])
    assert.matches("'drain' 'w1' '%-%-ignore%-daemonsets' '%-%-delete%-emptydir%-data' '%-%-grace%-period=30' "
      .. "'%-%-timeout=60s'", acts[1].cmd)
    assert.equal("leader", acts[1].on)
    assert.equal("service stop", k[2])
    local mv
    for i, a in ipairs(acts) do
      local want = "mv -f -- '/usr/local/bin/k3s.cargoship-staged' '/usr/local/bin/k3s'"
      if a.kind == "run" and a.cmd:find(want, 1, true) then
        mv = i
      end
    end
    assert.is_true(mv ~= nil and mv > 2, "the staged binary is moved into place after the stop")
    local n = #k
    assert.same({ "service start", "service enable", "wait_ready", "uncordon", "wait_workloads" },
      { k[n - 4], k[n - 3], k[n - 2], k[n - 1], k[n] })
    assert.equal("1.35.2-k3s1", acts[n - 2].version)
    assert.equal(60, acts[n].timeout)
    -- controllers are phase 23's, workers phase 24's; a node at the package's version is neither's
    assert.same({ cp1 }, controller.prepare(ctx))
    assert.same({ w1 }, worker.prepare(ctx))
    w1.facts.engine.action = "same"
    assert.same({}, worker.prepare(ctx))
  end)

  it("--no-drain: neither drain, uncordon nor the wait for workloads; defaults are 120 s and 5 min", function()
    local cp1, w1 = host("cp1", "controller", { leader = true }), host("w1", "worker")
    local acts = run(function() return worker.assess(context({ cp1, w1 }, { no_drain = true }), w1) end)
    for _, a in ipairs(acts) do
      assert.is_false(a.kind == "step" and (a.name == "drain" or a.name == "uncordon" or a.name == "wait_workloads"))
    end
    acts = run(function() return worker.assess(context({ cp1, w1 }), w1) end)
    assert.matches("'%-%-grace%-period=120' '%-%-timeout=300s'", acts[1].cmd)
  end)
end)

describe("Upgrade run", function()
  it("controller first, then workers one batch at a time, each drained and uncordoned on the leader around "
    .. "its restart at the new version", function()
    local cp1 = host("cp1", "controller", { leader = true })
    local w1, w2 = host("w1", "worker", { profile = "w" }), host("w2", "worker", { profile = "w" })
    local ctx = context({ cp1, w1, w2 }, {}, { w = { concurrency = { kind = "count", value = 1 } } })
    assert.is_true(run(function() return drive(controller, ctx) end))
    assert.is_true(run(function() return drive(worker, ctx) end))
    assert.same({ "cp1: drain cp1", "cp1: stop", "cp1: start", "cp1: uncordon cp1",
                  "cp1: drain w1", "w1: stop", "w1: start", "cp1: uncordon w1",
                  "cp1: drain w2", "w2: stop", "w2: start", "cp1: uncordon w2" }, events())
    assert.same({ cp1 = NEW, w1 = NEW, w2 = NEW }, version)
  end)

  it("a refused drain uncordons that node, leaves it at the old version and fails it alone, naming the pod",
    function()
    local cp1 = host("cp1", "controller", { leader = true })
    local w1, w2 = host("w1", "worker", { profile = "w" }), host("w2", "worker", { profile = "w" })
    local ctx = context({ cp1, w1, w2 }, { drain_timeout = 60 },
      { w = { concurrency = { kind = "count", value = 1 } } })
    blocked.w1 = true
    local ok, failures = run(function() return drive(worker, ctx) end)
    assert.is_nil(ok)
    local errs = support.errors(failures)
    assert.equal(1, #errs)
    assert.matches("^w1: ", errs[1])
    assert.matches("default/web-1", errs[1], 1, true)
    assert.matches("disruption budget", errs[1], 1, true)
    assert.matches("uncordoned and left at " .. OLD, errs[1], 1, true)
    assert.same({ "cp1: drain w1", "cp1: uncordon w1", "cp1: drain w2", "w2: stop", "w2: start", "cp1: uncordon w2" },
      events())
    assert.same({ cp1 = OLD, w1 = OLD, w2 = NEW }, version)
  end)

  it("a node whose task is cut mid-drain (its lock lost, Ctrl-C) is uncordoned through the leader by the "
    .. "phase's cleanup at the run's end", function()
    -- w1's drain hangs (its pods' eviction retried) until the task is cancelled
    table.insert(LEADER_RULES, 1, { "'drain' 'w1'", fn = function() loop.sleep(30) return "", 0 end })
    local cp1 = host("cp1", "controller", { leader = true })
    local w1 = host("w1", "worker", { profile = "w" })
    table.remove(LEADER_RULES, 1)
    local ctx = context({ cp1, w1 }, {}, { w = { concurrency = { kind = "count", value = 1 } } })
    local before
    run(function()
      local t = loop.spawn(function() return drive(worker, ctx) end)
      while #events() == 0 do loop.sleep(0.01) end
      t:cancel()
      t:join()
      before = events()
      ctx._cleanup = true
      worker.cleanup(ctx)
    end)
    assert.same({ "cp1: drain w1" }, before, "the cut task ran no uncordon of its own")
    assert.same({ "cp1: drain w1", "cp1: uncordon w1" }, events())
    -- nothing cordoned is left: a second cleanup has nothing to do
    assert.are.equal("skipped", worker.cleanup(ctx))
  end)

  it("a node Ready again but still at the old version fails, is uncordoned, and no later batch starts", function()
    local cp1 = host("cp1", "controller", { leader = true })
    local w1, w2 = host("w1", "worker", { profile = "w" }), host("w2", "worker", { profile = "w" })
    local ctx = context({ cp1, w1, w2 }, {}, { w = { concurrency = { kind = "count", value = 1 } } })
    ctx.options.ready_timeout = 0.2
    stuck.w1 = true
    local ok, failures = run(function() return drive(worker, ctx) end)
    assert.is_nil(ok)
    local errs = support.errors(failures)
    assert.equal(1, #errs)
    assert.matches("node w1 is Ready but not at 1.35.2-k3s1", errs[1], 1, true)
    assert.matches("its kubelet reports " .. OLD, errs[1], 1, true)
    assert.same({ "cp1: drain w1", "w1: stop", "w1: start", "cp1: uncordon w1" }, events())
  end)

  it("the next batch is drained only once the workloads the last one evicted are at their ready counts again",
    function()
    local cp1 = host("cp1", "controller", { leader = true })
    local w1, w2 = host("w1", "worker", { profile = "w" }), host("w2", "worker", { profile = "w" })
    local ctx = context({ cp1, w1, w2 }, {}, { w = { concurrency = { kind = "count", value = 1 } } })
    -- before w1's drain: 2/2 ready; after it: 1/2 twice, then 2/2
    workload_answers = { 2, 1, 1, 2 }
    assert.is_true(run(function() return drive(worker, ctx) end))
    local listings, drain_w2 = {}, nil
    for i, l in ipairs(journal) do
      if l:find("'replicasets,statefulsets'", 1, true) then listings[#listings + 1] = i end
      if l:find("'drain' 'w2'", 1, true) then drain_w2 = i end
    end
    assert.is_true(#listings >= 5, "w1's snapshot, three waits, w2's snapshot")
    assert.is_true(drain_w2 > listings[4], "w2 drained before w1's evicted workloads were back")
  end)
end)

-- Specs pinning the install's round trips per host and phase (issue 24: each costs a full RTT on a slow link).
--
-- Real phases over real Host objects (not dry run) whose scripted connections
-- (unit.phases.support) count every command and upload they are handed: each is one round
-- trip to the host (a batch of records is one command). A change that sends a phase's
-- records one command each again, or re-checks an assessed upload, turns these red.
local host_mod = require "cargoship.host"
local loop = require "cargoship.loop"
local os_registry = require "cargoship.os"
local action = require "cargoship.action"
local support = require "unit.phases.support"

local K3S = { type = "k3s", version = "1.35.2-k3s1", engine = {}, manifests = {},  -- as install_phases_spec
              os_files = { { selector = { package = "binary" }, staged = "/dev/null", target = "/usr/local/bin/k3s",
                             mode = "0755" } } }

-- A host whose connection counts: trips.reads (exec of a read), trips.writes (exec/check of a
-- write, a batch included), trips.uploads (one per file handed to the transport).
local function host(name, role, rules, o)
  o = o or {}
  local c = support.scripted(name, rules or {}, function() end)
  local trips = { reads = 0, writes = 0, uploads = 0, batches = 0 }
  local exec, check = c.exec, c.check
  function c.exec(self, cmd, opts)
    if cmd == require("cargoship.host_batch").LOADER then trips.batches = trips.batches + 1 end
    trips.n = (trips.n or 0) + 1
    return exec(self, cmd, opts)
  end
  function c.check(self, cmd, opts)
    trips.n = (trips.n or 0) + 1
    return check(self, cmd, opts)
  end
  function c.upload(_, _, _, opts)
    trips.n = (trips.n or 0) + 1
    trips.uploads = trips.uploads + 1
    return { skipped = false, bytes = 1, sha256 = opts.sha256 }
  end
  local h = host_mod.new { config = { index = 1, name = name, role = role, engine = { labels = {}, taints = {} } },
                           dry_run = false }
  h:attach(c)
  h.os = os_registry.by_name("debian"):new { service_manager = "systemd" }
  h.facts = { node_name = name, hostname = name, private_address = o.address or "10.253.11.1",
              engine = { running = false, action = "install" } }
  return h, trips
end

local function context(hosts)
  local cluster = { name = "lab", loadbalancer = "10.253.11.10", hosts = {}, profiles = {} }
  local ctx = support.ctx(hosts, { dry_run = false, distro = K3S, cluster = cluster })
  ctx.join_secret = { token = string.rep("T", 64), agent_token = string.rep("A", 64) }
  return ctx
end

local function run(fn)
  local ok, a, b = loop.run(fn)
  assert(ok, a)
  return a, b
end

-- The phase's assess, counted apart from its run: -> reads of assess, round trips of the run.
local function drive(phase, ctx, counted)
  local work = run(function() return phase.prepare(ctx) end)
  ctx._planned, ctx._outcomes, ctx._steps = {}, {}, phase.steps
  for _, h in ipairs(work) do
    ctx._planned[h] = run(function() return phase.assess(ctx, h) end)
  end
  local before = {}
  for h, t in pairs(counted) do before[h] = t.n or 0 end
  -- a phase without run: the runner executes each host's records (pipeline/runner.lua)
  local go = phase.run or function(c, hosts) return c:each(hosts, function(h) return c:apply(h) end) end
  assert(run(function() return go(ctx, work) end))
  local spent = {}
  for h, t in pairs(counted) do spent[h.name] = (t.n or 0) - before[h] end
  return spent
end

describe("round trips of the install's writing phases, per host", function()
  it("Configure engine writes a fresh host's directories and files in one round trip", function()
    local cp1, t1 = host("cp1", "controller")
    local w1, t2 = host("w1", "worker", {}, { address = "10.253.11.2" })
    local ctx = context({ cp1, w1 })
    ctx.leader = cp1
    local phase = require "cargoship.phases.configure_engine"
    local spent = drive(phase, ctx, { [cp1] = t1, [w1] = t2 })
    assert.is_true(#ctx._planned[cp1] >= 4, "a fresh controller gets a directory and several files")
    assert.is_true(#ctx._planned[w1] >= 3, "a fresh worker gets a directory and its files")
    assert.same({ cp1 = 1, w1 = 1 }, spent)
    assert.equal(1, t1.batches)
  end)

  it("Initialize Worker installs and starts a fresh worker in two round trips, the leader's Ready listing in one",
    function()
    local leader, tl = host("cp1", "controller", { { "'get' 'nodes'", "cp1 True\nw1 True\n", 0 } })
    leader.facts.engine = { running = true, action = "same" }
    local w1, tw = host("w1", "worker", { { ".cargoship-staged' ] && echo S1", "S1\n", 0 } },
      { address = "10.253.11.2" })
    local ctx = context({ leader, w1 })
    ctx.leader = leader
    require("cargoship.phases.lib.engine_common").READY_INTERVAL = 0.01
    local phase = require "cargoship.phases.initialize_worker"
    local spent = drive(phase, ctx, { [leader] = tl, [w1] = tw })
    local kinds = {}
    for _, a in ipairs(ctx._planned[w1]) do kinds[#kinds + 1] = a.kind end
    assert.same({ "run", "service", "service", "step" }, kinds)
    -- install, enable and start in one batch; the wait step reads the agent's log in the other
    assert.same({ cp1 = 1, w1 = 2 }, spent)
    assert.equal(1, tw.batches)
  end)

  it("Upload files sends a host's directories in one round trip and each assessed file in two (put, finish)",
    function()
    local h, t = host("w1", "worker")
    local ctx = context({ h })
    local planned = {
      action.run { cmd = "rm -f -- /var/lib/x/.a.cargoship-r0.tmp", say = "remove 1 partial upload a cut run left" },
      action.run { cmd = "mkdir -p -- /var/lib/x", say = "create /var/lib/x" },
      action.upload { path = "/var/lib/x/a.deb", source = "/dev/null", sha256 = string.rep("a", 64), size = 0,
                      assessed = true },
      action.upload { path = "/var/lib/x/b.deb", source = "/dev/null", sha256 = string.rep("b", 64), size = 0,
                      assessed = true },
    }
    ctx._planned, ctx._outcomes = { [h] = planned }, {}
    -- the transport's own count: a real connection would add the put's finishing script
    local uploads = require "cargoship.phases.lib.uploads"
    assert(run(function() return uploads.run(ctx, { h }) end))
    assert.equal(1, t.batches, "the two records before the uploads travel together")
    assert.equal(2, t.uploads)
    assert.equal(3, t.n, "one batch and two files handed to the transport")
    -- and an assessed upload reaches the transport marked so, which then skips its re-check
    -- (transport_upload_spec: 2 round trips instead of 3)
  end)
end)

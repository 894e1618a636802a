-- Specs of the lock phases (7 acquire, 30 release) and 31 disconnect: fields, dry runs that write nothing, cleanup.
local loop = require "cargoship.loop"
local pool = require "cargoship.pool"
local util = require "cargoship.util"
local host_mod = require "cargoship.host"
local context = require "cargoship.pipeline.context"
local acquire = require "cargoship.phases.acquire_lock"
local release = require "cargoship.phases.release_lock"
local disconnect = require "cargoship.phases.disconnect"
local connect = require "cargoship.phases.connect"
local action = require "cargoship.action"

local function temp_dir()
  local path = os.tmpname()
  os.remove(path)
  assert(os.execute("mkdir -p " .. util.quote(path)))
  return path
end

local function exists(path)
  return os.execute("test -e " .. util.quote(path)) == true
end

local function recorder()
  local lines = {}
  local log = {}
  for _, level in ipairs { "error", "warn", "info", "verbose", "debug" } do
    log[level] = function(_, fmt, ...)
      lines[#lines + 1] = level .. ": " .. (select("#", ...) > 0 and string.format(fmt, ...) or fmt)
    end
  end
  return log, lines
end

-- A connection that runs commands here, by /bin/sh, with this host's own directory standing
-- in for /run: each fake host is its own machine. A lock script that would look at the real
-- /run fails the spec instead.
local function fake_conn(lockdir)
  local c = { temps = {}, execs = 0, closed = false, removed = 0 }
  function c.exec(self, cmd)
    self.execs = self.execs + 1
    local n
    cmd, n = cmd:gsub("\nset %-%- '/run' '/var/lib'\n",
      function() return "\nset -- " .. util.quote(lockdir) .. "\n" end)
    assert(n == 1, "not a lock script with the default directories: " .. cmd:sub(1, 200))
    assert(not cmd:find("CS_BASE='/run", 1, true), "a lock script for the real /run")
    local errf = os.tmpname()
    local p = assert(io.popen("sh -c " .. util.quote(cmd) .. " 2>" .. util.quote(errf)))
    local out = p:read("a")
    local _, _, code = p:close()
    local f = io.open(errf, "rb")
    local err = f and f:read("a") or ""
    if f then f:close() end
    os.remove(errf)
    return out, err, code
  end
  function c.remove_temps(self)
    self.removed = self.removed + 1
    self.temps = {}
    return true
  end
  function c.close(self) self.closed = true end
  return c
end

local function hosts_for(base, n, dry_run)
  local hosts = {}
  for i = 1, n do
    local dir = base .. "/h" .. i
    assert(os.execute("mkdir -p " .. util.quote(dir)))
    local log, lines = recorder()
    local h = host_mod.new { config = { name = "h" .. i, index = i }, log = log, dry_run = dry_run }
    h.lines, h.lockdir = lines, dir
    h:attach(fake_conn(dir))
    hosts[i] = h
  end
  return hosts
end

-- The context as the runner hands it over, with every ctx:host_lost recorded in ctx.lost.
local function new_ctx(hosts, o)
  o = o or {}
  local log = recorder()
  local ctx = context.new {
    hosts = hosts, options = { cluster_file = "lab.yaml", command = "apply" }, dry_run = o.dry_run or false,
    log = log, run_id = o.run_id or "20261130T090000Z-4242",
    env = function(k) return (o.env or {})[k] end,
  }
  ctx.lost = {}
  function ctx.host_lost(self, host, msg)
    self.lost[#self.lost + 1] = { host = host, err = msg }
    return context.Context.host_lost(self, host, msg)
  end
  function ctx.each(_, list, fn, opts)
    local failures, values = {}, {}
    for i, r in ipairs(pool.map(list, opts and opts.concurrency or 10, fn)) do
      local err = (not r.ok and tostring(r.err)) or (r[1] == nil and r[2])
      if err then failures[#failures + 1] = { host = list[i], err = err } else values[list[i]] = r[1] end
    end
    if #failures > 0 then return nil, failures, values end
    return true, values
  end
  return ctx
end

-- What the runner does with a phase on hosts: assess each (the plan), then execute those
-- records, by the phase's run or through host:apply.
local function execute(ctx, phase, hosts)
  ctx._planned, ctx._outcomes, ctx._steps = {}, {}, phase.steps
  for _, h in ipairs(hosts) do ctx._planned[h] = phase.assess(ctx, h) end
  if phase.run then return phase.run(ctx, hosts) end
  return ctx:each(hosts, function(h) return ctx:apply(h) end)
end

local function says(list)
  local out = {}
  for i, a in ipairs(list) do out[i] = a.say end
  return out
end

local function run(fn)
  if loop.running() then return fn() end
  local ok, a, b, c = loop.run(fn)
  if not ok then error(a, 0) end
  return a, b, c
end

local function lockpath(h) return h.lockdir .. "/cargoship/lock" end

-- Another run's lock on h, aged `age` seconds: firm (that run holds all its hosts) unless
-- `taking` (that run is still taking its hosts). -> the handle
local function hold(h, age, taking)
  local other = hosts_for(h.lockdir .. "/other", 1)[1]
  other.conn = fake_conn(h.lockdir)
  local lock = require "cargoship.lock"
  local handle
  run(function()
    handle = assert(lock.acquire(other, { holder = "dev@laptop", pid = 77, command = "apply other.yaml",
      run_id = "r-b" }, { heartbeat = false }))
    if not taking then assert(handle:firm()) end
  end)
  if age then os.execute("touch -d '" .. age .. " seconds ago' " .. util.quote(lockpath(h))) end
  return handle
end

-- Makes h's commands take a random few milliseconds before and after they run (rng), so the
-- tasks of runs side by side in one loop interleave as over a network.
local function slow(h, rng)
  local exec = h.conn.exec
  h.conn.exec = function(self, cmd, o)
    loop.sleep(rng() * 0.01)
    local out, err, code = exec(self, cmd, o)
    loop.sleep(rng() * 0.01)
    return out, err, code
  end
end

-- The run_id in the holder record of the lock on h, or nil when h has none.
local function holder_run(h)
  local f = io.open(lockpath(h) .. "/holder")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text:match("run_id=([^\n]*)")
end

describe("lock phases", function()
  local base
  before_each(function() base = temp_dir() end)
  after_each(function() os.execute("rm -rf " .. util.quote(base)) end)

  it("declare their titles, dry-run policies and the lock state", function()
    assert.are.equal("acquire_lock", acquire.id)
    assert.are.equal("Acquire exclusive host lock", acquire.title)
    assert.is_nil(acquire.dry_run)
    assert.are.same({ "lock" }, acquire.creates)
    assert.is_function(acquire.cleanup)
    assert.are.equal("release_lock", release.id)
    assert.are.equal("Release exclusive host lock", release.title)
    assert.is_nil(release.dry_run)
    assert.are.same({}, release.reads, "assessed in a plan too: the path is known before the lock is taken")
    assert.are.equal("disconnect", disconnect.id)
    assert.are.equal("Disconnect from hosts", disconnect.title)
    assert.is_function(disconnect.dry_run, "an own dry-run path")
    local ok, contract = pcall(require, "cargoship.pipeline.contract")
    if ok then
      for _, p in ipairs { acquire, release, disconnect } do
        assert.are.same({ true }, { contract.check(p) })
      end
    end
  end)

  it("assesses in a dry run by reading the lock, writing nothing", function()
    local hosts = hosts_for(base, 2, true)
    hold(hosts[2], 12)
    local ctx = new_ctx(hosts, { dry_run = true })
    local a1, a2 = run(function()
      local list = acquire.prepare(ctx)
      assert.are.equal(2, #list)
      return acquire.assess(ctx, list[1]), acquire.assess(ctx, list[2])
    end)
    assert.are.same({ kind = "step", name = "take_lock", say = "take the lock at " .. lockpath(hosts[1]) }, a1[1])
    assert.matches("^take the lock at .* %(currently held by dev@laptop %(pid 77", a2[1].say)
    assert.matches("last heartbeat 1%d s ago, lock directory owned by [^()]+ %(uid %d+%)%)$", a2[1].say)
    for _, h in ipairs(hosts) do
      assert.are.equal(0, h.writes_sent)
      assert.are.same({}, h.refused)
    end
    assert.is_false(exists(lockpath(hosts[1])))
    local r = run(function() return release.assess(ctx, hosts[1]) end)
    -- the path the lock would be taken at, as the real run's release names it
    assert.are.same({ "release the lock at " .. lockpath(hosts[1]) }, says(r))
  end)

  it("says a stale holder would be taken over", function()
    local hosts = hosts_for(base, 1, true)
    hold(hosts[1], 300)
    local a = run(function() return acquire.assess(new_ctx(hosts, { dry_run = true }), hosts[1]) end)
    assert.matches("stale, so it would be taken over", a[1].say, 1, true)
  end)

  it("says a lock directory it would refuse, with its owner, and refuses it for real", function()
    local hosts = hosts_for(base, 1, true)
    assert(os.execute("mkdir -m 755 " .. util.quote(hosts[1].lockdir .. "/cargoship")))
    local a = run(function() return acquire.assess(new_ctx(hosts, { dry_run = true }), hosts[1]) end)
    assert.matches("^take the lock, but it would be refused: h1: lock: refusing .*/cargoship: it is not private "
      .. "%(mode 700%) %(owner ", a[1].say)
    hosts = hosts_for(base, 1)
    local ctx = new_ctx(hosts)
    local ok, failures = run(function() return execute(ctx, acquire, hosts) end)
    assert.is_nil(ok)
    assert.matches("it is not private (mode 700)", failures[1].err, 1, true)
    assert.are.same({}, ctx.lock_conflicts, "a refusal is not another run's lock")
  end)

  it("cannot take a lock in a dry run even if asked: the host refuses the write", function()
    local hosts = hosts_for(base, 1, true)
    local ok, failures = run(function() return execute(new_ctx(hosts, { dry_run = true }), acquire, hosts) end)
    assert.is_nil(ok)
    assert.matches("dry run: refused", failures[1].err, 1, true)
    assert.is_false(exists(lockpath(hosts[1])))
  end)

  it("takes every lock, keeps the handles in ctx.locks, and cleanup releases them", function()
    local hosts = hosts_for(base, 3)
    local ctx = new_ctx(hosts)
    local handles = {}
    run(function()
      assert.is_true(execute(ctx, acquire, acquire.prepare(ctx)))
      for _, h in ipairs(hosts) do
        assert.is_true(exists(lockpath(h)))
        assert.are.equal(lockpath(h), ctx.locks[h.name].path)
        handles[h] = ctx.locks[h.name]
        assert.are.equal("done", ctx._outcomes[h][ctx._planned[h][1]].status)
      end
      local f = assert(io.open(lockpath(hosts[1]) .. "/holder"))
      local text = f:read("a")
      f:close()
      assert.matches("command=apply lab.yaml", text, 1, true)
      assert.matches("run_id=20261130T090000Z-4242", text, 1, true)
      acquire.cleanup(ctx)
      for _, h in ipairs(hosts) do
        assert.is_false(exists(lockpath(h)))
        assert.is_true(handles[h].released)
      end
      acquire.cleanup(ctx)
    end)
  end)

  it("reconnects a dropped session for cleanup: releases the lock, removes temps, or fails naming the host", function()
    local hosts = hosts_for(base, 2)
    local ctx = new_ctx(hosts)
    local function drop(h)   -- sshd killed on h: its session can carry nothing more
      local dead = h.conn
      dead.session = { state = function() return "lost" end }
      dead.temps = { "/etc/.app.conf.cargoship-r.tmp" }
      function dead.exec() return nil, h.name .. ": exec: connection closed by the host", "closed" end
      return dead
    end
    run(function()
      assert.is_true(execute(ctx, acquire, acquire.prepare(ctx)))
      drop(hosts[1])
      drop(hosts[2])
      local fresh = fake_conn(hosts[1].lockdir)
      hosts[1].transport = { connect = function() return fresh end }
      hosts[2].transport = { connect = function() return nil, "h2: connect: connection refused", "refused" end }
      local ok, err = pcall(acquire.cleanup, ctx)
      assert.is_false(ok)
      assert.are.equal("lock not released: h2: connect: connection refused", err)
      assert.is_false(exists(lockpath(hosts[1])), "h1's lock released through a new session")
      assert.are.equal(fresh, hosts[1].conn)
      assert.is_true(exists(lockpath(hosts[2])))
      -- the temp names of the dropped session are removed through the new one
      ok, err = pcall(connect.cleanup, ctx)
      assert.is_false(ok)
      assert.matches("^temp files of cut uploads left %(the next run removes them%): h2: ", err)
      assert.are.equal(1, fresh.removed)
      -- h2's sshd is back: the next cleanup gets through
      local fresh2 = fake_conn(hosts[2].lockdir)
      hosts[2].transport = { connect = function() return fresh2 end }
      acquire.cleanup(ctx)
      assert.is_false(exists(lockpath(hosts[2])))
      connect.cleanup(ctx)
      assert.are.equal(1, fresh2.removed)
      assert.are.equal("skipped", connect.cleanup(ctx), "nothing left: no report line")
    end)
  end)

  it("fails at once on a lock another run holds, and cleanup leaves it holding nothing", function()
    local hosts = hosts_for(base, 3)
    hold(hosts[1])
    local ctx = new_ctx(hosts)
    run(function()
      local ok, failures = execute(ctx, acquire, hosts)
      assert.is_nil(ok)
      assert.are.equal(2, hosts[1].conn.execs, "the plan's read and one take: no wait for a firm lock")
      assert.are.equal(1, #failures)
      assert.matches("h1: another cargoship holds the lock .* dev@laptop", failures[1].err)
      assert.are.same({ failures[1].err }, ctx.lock_conflicts)
      acquire.cleanup(ctx)
    end)
    assert.are.equal("r-b", holder_run(hosts[1]))
    assert.is_false(exists(lockpath(hosts[2])))
    assert.is_false(exists(lockpath(hosts[3])))
  end)

  -- one round of takes and one of firms, every host at once: 2 round trips per host
  it("takes every host at once and marks the locks firm: 2 round trips per host", function()
    local hosts = hosts_for(base, 4)
    local ctx = new_ctx(hosts)
    run(function()
      assert.is_true(execute(ctx, acquire, hosts))
      for _, h in ipairs(hosts) do
        assert.are.equal(3, h.conn.execs, "the plan's read, then one take and one firm")
        local token = ctx.locks[h.name].token
        assert.is_true(exists(lockpath(h) .. "/firm." .. token))
      end
      acquire.cleanup(ctx)
    end)
  end)

  -- the lab's hosts share two cores: 1,000 takes at once held back the heartbeats of the
  -- locks already taken past their deadline
  it("has at most take_locks.CONCURRENCY takes or firms in flight", function()
    local hosts = hosts_for(base, 6)
    local now, most = 0, 0
    for _, h in ipairs(hosts) do
      local exec = h.conn.exec
      h.conn.exec = function(self, cmd, o)
        now = now + 1
        most = math.max(most, now)
        loop.sleep(0.02)
        local out, err, code = exec(self, cmd, o)
        now = now - 1
        return out, err, code
      end
    end
    local take = require "cargoship.phases.lib.take_locks"
    local saved = take.CONCURRENCY
    take.CONCURRENCY = 2
    local ctx = new_ctx(hosts)
    local ok, peak = run(function()
      ctx._planned, ctx._outcomes, ctx._steps = {}, {}, acquire.steps
      for _, h in ipairs(hosts) do ctx._planned[h] = { action.step { name = "take_lock", say = "take" } } end
      local r = acquire.run(ctx, hosts)
      local peak = most
      acquire.cleanup(ctx)
      return r, peak
    end)
    take.CONCURRENCY = saved
    assert.is_true(ok)
    assert.are.equal(2, peak)
  end)

  it("waits for a run still taking its locks, and takes the host once that run lets go", function()
    local hosts = hosts_for(base, 3)
    local other = hold(hosts[2], nil, true)
    local ctx = new_ctx(hosts)
    run(function()
      loop.spawn(function()
        loop.sleep(0.3)
        assert(other:release())
      end)
      local t0 = loop.now()
      assert.is_true(execute(ctx, acquire, hosts))
      assert.is_true(loop.now() - t0 >= 0.3)
      for _, h in ipairs(hosts) do assert.are.equal("20261130T090000Z-4242", holder_run(h)) end
      -- it let go of what lay after the host it waited on (h3), then took it again
      assert.are.equal(5, hosts[3].conn.execs, "read, take, release, take, firm")
      assert.are.same({}, ctx.lock_conflicts)
      acquire.cleanup(ctx)
    end)
  end)

  it("fails, exit 4, on a run still taking its locks after lock.TAKING_WAIT, holding nothing", function()
    local lock = require "cargoship.lock"
    local hosts = hosts_for(base, 3)
    hold(hosts[2], nil, true)
    local ctx = new_ctx(hosts)
    local saved = lock.TAKING_WAIT
    lock.TAKING_WAIT = 0.3
    local ok, failures = run(function()
      local r, f = execute(ctx, acquire, hosts)
      acquire.cleanup(ctx)
      return r, f
    end)
    lock.TAKING_WAIT = saved
    assert.is_nil(ok)
    assert.are.equal(hosts[2], failures[1].host)
    assert.matches("h2: another cargoship is still taking its locks", failures[1].err, 1, true)
    assert.are.same({ failures[1].err }, ctx.lock_conflicts)
    assert.is_false(exists(lockpath(hosts[1])))
    assert.are.equal("r-b", holder_run(hosts[2]))
    assert.is_false(exists(lockpath(hosts[3])))
  end)

  -- The guarantee of taking one host at a time, kept while taking all at once: runs over the
  -- same or overlapping hosts, listed in any order and let in at the same instant with their
  -- commands interleaving at random, end one 0 and the others 4; a loser holds nothing.
  it("never lets two runs over overlapping hosts both fail on each other", function()
    local lock = require "cargoship.lock"
    local saved, poll = lock.TAKING_WAIT, lock.TAKING_POLL
    lock.TAKING_WAIT, lock.TAKING_POLL = 30, 0.02  -- a long wait costs only when it ends unanswered
    local names = { "n1", "n2", "n3", "n4", "n5", "n6" }
    local sets = {
      { { 1, 2, 3, 4, 5, 6 }, { 6, 5, 4, 3, 2, 1 } },   -- the same hosts, opposite orders
      { { 1, 2, 3, 4 }, { 3, 4, 5, 6 } },               -- overlapping at the end of one list
      { { 4, 2, 6 }, { 1, 3, 6, 5, 2 } },                -- interleaved in the order
      { { 1, 2, 3, 4, 5 }, { 5, 4, 3 }, { 2, 6, 4 } },  -- three runs
    }
    local seed, trials = 1, 0
    for si, set in ipairs(sets) do
      for _ = 1, 4 do
        trials = trials + 1
        seed = seed + 1
        local rng_state = seed
        local function rng()
          rng_state = (rng_state * 1103515245 + 12345) % 2147483648
          return rng_state / 2147483648
        end
        local dir = base .. "/t" .. trials
        local ctxs, lists = {}, {}
        for r, idx in ipairs(set) do
          local all = hosts_for(dir, #names)  -- this run's own sessions to the shared machines
          local list = {}
          for i, n in ipairs(idx) do
            all[n].facts.hostname = names[n]
            slow(all[n], rng)
            list[i] = all[n]
          end
          lists[r] = list
          ctxs[r] = new_ctx(list, { run_id = "run-" .. r })
        end
        local results = {}
        run(function()
          local tasks = {}
          for r = 1, #set do
            -- the plan without its reads (they cost time here and decide nothing)
            local ctx = ctxs[r]
            ctx._planned, ctx._outcomes, ctx._steps = {}, {}, acquire.steps
            for _, h in ipairs(lists[r]) do ctx._planned[h] = { action.step { name = "take_lock", say = "take" } } end
            tasks[r] = loop.spawn(function() return acquire.run(ctx, lists[r]) end)
          end
          for r = 1, #set do
            local _, ok = tasks[r]:join()
            results[r] = ok == true
          end
          -- what each holds now, before any cleanup
          for r = 1, #set do
            if results[r] then
              for _, h in ipairs(lists[r]) do assert.are.equal("run-" .. r, holder_run(h)) end
            else
              acquire.cleanup(ctxs[r])
            end
          end
          for r = 1, #set do
            if not results[r] then
              for _, h in ipairs(lists[r]) do assert.are_not.equal("run-" .. r, holder_run(h)) end
            end
          end
          for r = 1, #set do if results[r] then acquire.cleanup(ctxs[r]) end end
        end)
        local won = 0
        for r = 1, #set do if results[r] then won = won + 1 end end
        -- every pair of these runs overlaps: exactly one wins
        if won ~= 1 then lock.TAKING_WAIT, lock.TAKING_POLL = saved, poll end
        assert.are.equal(1, won, string.format("set %d, seed %d: %d runs won", si, seed, won))
      end
    end
    lock.TAKING_WAIT, lock.TAKING_POLL = saved, poll
  end)

  -- two runs whose files list the hosts in different orders: with the file's order each took
  -- its own first host, then failed on the other's, and both exited 4
  it("takes the locks one host at a time in one order, whatever order the file lists them in", function()
    local hosts = hosts_for(base, 3)
    local names = { "node-c", "node-a", "node-b" }
    local taken = {}
    for i, h in ipairs(hosts) do
      h.facts.hostname = names[i]
      local exec = h.conn.exec
      h.conn.exec = function(self, cmd, o)
        if cmd:find("\ncs_take() {", 1, true) then taken[#taken + 1] = h.facts.hostname end
        return exec(self, cmd, o)
      end
    end
    for _, list in ipairs { { hosts[1], hosts[2], hosts[3] }, { hosts[3], hosts[1], hosts[2] } } do
      taken = {}
      local ctx = new_ctx(list)
      run(function()
        assert.is_true(execute(ctx, acquire, list))
        acquire.cleanup(ctx)
      end)
      assert.are.same({ "node-a", "node-b", "node-c" }, taken)
    end
    -- the machine's own name decides, not how the file reaches it; then address and port
    local a = { name = "10.0.0.9", config = { connection = { address = "10.0.0.9", port = 22 } }, facts = {} }
    local b = { name = "b.example", config = { connection = { address = "b.example", port = 22 } },
      facts = { hostname = "Alpha" } }
    local c = { name = "10.0.0.1", config = { connection = { address = "10.0.0.1", port = 2222 } }, facts = {} }
    local d = { name = "10.0.0.1:22", config = { connection = { address = "10.0.0.1", port = 22 } }, facts = {} }
    assert.are.same({ d, c, a, b }, acquire.order { a, b, c, d })
  end)

  it("meets a run that listed the hosts the other way round on the same first host, holding nothing", function()
    local lock = require "cargoship.lock"
    local hosts = hosts_for(base, 3)
    -- the other run took h1, the first host in the order, and is on its way to the others
    local first = hold(hosts[1], nil, true)
    local list = { hosts[3], hosts[2], hosts[1] }
    local ctx = new_ctx(list)
    run(function()
      local others = {}
      local side = loop.spawn(function()
        -- this run, waiting on h1, has let go of h2 and h3: the other run takes them, then holds all
        local t0 = loop.now()
        repeat loop.sleep(0.05) until not (exists(lockpath(hosts[2])) or exists(lockpath(hosts[3])))
          or loop.now() - t0 > 10
        for i = 2, 3 do
          assert.is_false(exists(lockpath(hosts[i])))
          local o = hosts_for(hosts[i].lockdir .. "/other", 1)[1]
          o.conn = fake_conn(hosts[i].lockdir)
          others[i] = assert(lock.acquire(o, { holder = "dev@laptop", pid = 77, command = "apply other.yaml",
            run_id = "r-b" }, { heartbeat = false }))
        end
        for _, h in ipairs { first, others[2], others[3] } do assert(h:firm()) end
      end)
      local ok, failures = execute(ctx, acquire, list)
      local sd, serr = side:join()
      assert(sd, tostring(serr))
      assert.is_nil(ok)
      assert.are.equal(1, #failures)
      assert.are.equal(hosts[1], failures[1].host)
      assert.matches("h1: another cargoship holds the lock .* dev@laptop", failures[1].err)
      -- before any cleanup: this run holds none of the hosts; the other holds them all
      for _, h in ipairs(hosts) do assert.are.equal("r-b", holder_run(h)) end
      acquire.cleanup(ctx)
      for _, h in ipairs(hosts) do assert.are.equal("r-b", holder_run(h)) end
    end)
  end)

  it("fails on a later host that is held, and cleanup releases what it took", function()
    local hosts = hosts_for(base, 3)
    hold(hosts[3])
    local ctx = new_ctx(hosts)
    run(function()
      local ok, failures = execute(ctx, acquire, hosts)
      assert.is_nil(ok)
      assert.are.equal(hosts[3], failures[1].host)
      assert.is_true(exists(lockpath(hosts[1])))
      acquire.cleanup(ctx)
    end)
    assert.is_false(exists(lockpath(hosts[1])))
    assert.is_false(exists(lockpath(hosts[2])))
    assert.is_true(exists(lockpath(hosts[3])), "the other run's lock stays")
  end)

  it("fails the host through the lock's callback, ctx:host_lost, when its lock is stolen mid-run", function()
    local hosts = hosts_for(base, 1)
    -- a stale window far above the beat: on a loaded machine (CI, load 15) a beat's local sh
    -- can take over a second, and "no heartbeat got through" must not come before the takeover
    local ctx = new_ctx(hosts, { env = { CARGOSHIP_LOCK_INTERVAL = "0.1", CARGOSHIP_LOCK_STALE_AFTER = "60" } })
    run(function()
      assert.is_true(execute(ctx, acquire, hosts))
      os.execute("rm -rf " .. util.quote(lockpath(hosts[1])))
      hold(hosts[1])
      -- the next beat sees the other run's lock: at 0.1 s apart, at once unloaded; allow 20 s
      for _ = 1, 200 do
        if #ctx.lost > 0 then break end
        loop.sleep(0.1)
      end
    end)
    assert.are.equal(1, #ctx.lost)
    assert.are.equal(hosts[1], ctx.lost[1].host)
    assert.matches("taken over by dev@laptop", ctx.lost[1].err, 1, true)
  end)

  it("releases in phase 30, and fails a host whose lock is no longer this run's", function()
    local hosts = hosts_for(base, 2)
    local ctx = new_ctx(hosts)
    run(function()
      assert.is_true(execute(ctx, acquire, hosts))
      assert.are.equal(2, #release.prepare(ctx))
      assert.are.same({ "release the lock at " .. lockpath(hosts[1]) }, says(release.assess(ctx, hosts[1])))
      -- h2's lock was broken and taken by another run meanwhile
      os.execute("rm -rf " .. util.quote(lockpath(hosts[2])))
      hold(hosts[2])
      local ok, failures = execute(ctx, release, release.prepare(ctx))
      assert.is_nil(ok)
      assert.are.equal(1, #failures)
      assert.are.equal(hosts[2], failures[1].host)
      assert.is_false(exists(lockpath(hosts[1])))
      assert.is_true(exists(lockpath(hosts[2])))
      -- a later failure's cleanup finds nothing left to do
      acquire.cleanup(ctx)
      assert.is_true(exists(lockpath(hosts[2])))
    end)
  end)

  it("reports its own dry run of disconnect without touching the hosts", function()
    local hosts = hosts_for(base, 2, true)
    hosts[1].conn.temps = { "/etc/.x.cargoship-r.tmp" }
    local report = disconnect.dry_run(new_ctx(hosts, { dry_run = true }), disconnect.prepare(new_ctx(hosts)))
    assert.are.equal(2, #report)
    for i, r in ipairs(report) do
      assert.are.equal(hosts[i], r.host)
      -- the same sentence as the real run's: plan and run compare action by action
      assert.are.same({ { kind = "step", name = "disconnect", say = disconnect.SAY } }, r.actions)
      assert.are.same(r.actions, disconnect.assess(nil, hosts[i]))
    end
    for _, h in ipairs(hosts) do
      assert.are.equal(0, h.conn.execs)
      assert.are.equal(0, h.conn.removed)
      assert.is_false(h.conn.closed)
    end
  end)

  it("removes the run's temp files and closes every connection, as the plan's step says", function()
    local hosts = hosts_for(base, 2)
    local conns = { hosts[1].conn, hosts[2].conn }
    local ctx = new_ctx(hosts)
    run(function() assert.is_true(execute(ctx, disconnect, disconnect.prepare(ctx))) end)
    for i, h in ipairs(hosts) do
      assert.are.equal(1, conns[i].removed)
      assert.is_true(conns[i].closed)
      assert.is_false(h:connected())
    end
    assert.are.same({}, disconnect.prepare(ctx))
  end)
end)

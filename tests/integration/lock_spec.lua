-- Integration specs of the host lock on the lab: concurrent runs, kill -9 and stale takeover, Ctrl-C, unlock.
--
-- Each "run" is a separate process. Until `cargoship apply` runs the pipeline, a run is a
-- small Lua driver that does what apply does around the lock: connect, acquire (phase 7),
-- hold while "working", release (phase 30). Once apply works, the same scenarios also run
-- against the real binary (see the last block). Timings are shrunk through
-- CARGOSHIP_LOCK_INTERVAL / CARGOSHIP_LOCK_STALE_AFTER.
local util = require "cargoship.util"
local lab = require "integration.lab"

local q = util.quote
-- Where the lock lives on a host: /run/lock, else /var/lock, else /tmp (the lab's runit
-- hosts have no /run/lock). Set per host in setup, as h.lock.
local FIND_LOCK = "for d in /run/lock /var/lock /tmp; do if [ -d $d ]; then echo $d/cargoship.lock; break; fi; done"

local DRIVER = [==[
local src, build = os.getenv("CARGOSHIP_SOURCE_DIR"), os.getenv("CARGOSHIP_BUILD_DIR")
package.path = src .. "/lua/?.lua;" .. src .. "/lua/?/init.lua;" .. package.path
package.cpath = build .. "/lib/?.so;" .. package.cpath
package.loaded["cargoship.build"] = { version = "0.0.0-lockdriver", root = src }
local loop = require "cargoship.loop"
local context = require "cargoship.pipeline.context"
local runner = require "cargoship.pipeline.runner"
local path = os.getenv("CLUSTER")
local log = require("cargoship.log").new { level = "verbose", stream = io.stderr }
local function say(...) io.stdout:write(...) io.stdout:write("\n") io.stdout:flush() end
-- "working" between the lock phases: a read-only phase that only waits
local hold = { id = "hold", title = "Hold", dry_run = "read_only", run = function()
  say("ACQUIRED")
  loop.sleep(tonumber(os.getenv("HOLD") or "60"))
  return true
end }
local ok, code = loop.run(function()
  local cluster = assert(require("cargoship.config").load(path, { env = os.getenv }))
  local o = { cluster_file = path, known_hosts = os.getenv("KNOWN_HOSTS") }
  -- the command builds the transport, as apply does
  local transport = assert(require("cargoship.commands.apply").transport_for(o, os.getenv))
  local ctx = context.new { cluster = cluster, log = log, options = o, transport = transport }
  local phases = { require("cargoship.phases.connect"), require("cargoship.phases.acquire_lock"), hold,
    (require("cargoship.phases.release_lock")) }
  local rep = runner.run(ctx, phases)
  if not rep.final then return 130 end
  for _, p in ipairs(rep.phases) do
    if p.verdict == "failed" then
      for _, h in ipairs(p.hosts) do
        if h.error then say("FAILED ", p.id == "connect" and "connect: " or "", h.error) end
      end
      if p.id == "release_lock" then say("RELEASE FAILED") end
      return #ctx.lock_conflicts > 0 and 4 or 1
    end
  end
  say("RELEASED")
  return 0
end)
os.exit(ok and code or (loop.interrupted() and 130 or 1))
]==]

local function sleep(s) os.execute("sleep " .. s) end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

local work, cluster, driver
local hosts = {}

-- A cluster of the first four lab hosts (every flavour the ctest lab cycles through).
local function write_cluster()
  local all = lab.hosts()
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: lock",
    "spec:", "  config:", "    loadbalancer: h1.lab.internal", "  hosts:" }
  for i = 1, math.min(4, #all) do
    hosts[i] = all[i]
    lines[#lines + 1] = string.format("    - role: %s\n      ssh:\n        address: %s\n        user: root\n"
      .. "        keyPath: %s", i == 1 and "controller" or "worker", all[i].address, lab.key)
  end
  local f = assert(io.open(cluster, "wb"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end

local function ssh(h, cmd)
  return lab.sh("ssh -F " .. q(lab.state .. "/ssh_config") .. " " .. h.name .. " " .. q(cmd))
end

-- Which hosts hold a cargoship lock right now.
local function locked_hosts()
  local held = {}
  for _, h in ipairs(hosts) do
    if ssh(h, "test -d " .. h.lock) == 0 then held[#held + 1] = h.name end
  end
  return held
end

local function clear_locks()
  for _, h in ipairs(hosts) do ssh(h, "rm -rf " .. h.lock .. " " .. h.lock .. ".*") end
end

local started = {}

-- Starts a run in the background; returns its files and start time. Its first line of
-- output is "PID n": the shell prints its own pid, then becomes the command (exec).
local function start(name, env, cmd)
  -- a name of its own per run: no run may read an earlier one's output
  name = name .. "-" .. (#started + 1)
  local p = { out = work .. "/" .. name .. ".out", err = work .. "/" .. name .. ".err",
    rc = work .. "/" .. name .. ".rc", t0 = util.now() }
  local vars = { "CLUSTER=" .. q(cluster), "KNOWN_HOSTS=" .. q(lab.known_hosts), "HOME=" .. q(work .. "/home") }
  for k, v in pairs(env or {}) do vars[#vars + 1] = k .. "=" .. q(v) end
  local inner = "echo PID $$; exec " .. (cmd or ("lua5.4 " .. q(driver)))
  os.execute(string.format("(env %s sh -c %s >%s 2>%s </dev/null; echo $? >%s) >/dev/null 2>&1 &",
    table.concat(vars, " "), q(inner), q(p.out), q(p.err), q(p.rc)))
  started[#started + 1] = p
  return p
end

local function wait_until(fn, timeout, what)
  local deadline = util.now() + timeout
  while util.now() < deadline do
    local v = fn()
    if v then return v end
    sleep(0.1)
  end
  error("timed out after " .. timeout .. " s waiting for " .. what, 2)
end

local function finished(p)
  local rc = read(p.rc):match("%d+")
  return rc and tonumber(rc)
end

local function wait_exit(p, timeout)
  local rc = wait_until(function() return finished(p) end, timeout or 30, "a run to end")
  p.elapsed = util.now() - p.t0
  return rc
end

local function pid_of(p)
  return tonumber(wait_until(function() return read(p.out):match("PID (%d+)") end, 10, "a PID line"))
end

local function acquired(p)
  return read(p.out):find("ACQUIRED", 1, true) ~= nil
end

local function signal(p, sig)
  os.execute("kill -" .. sig .. " " .. pid_of(p))
end

local FAST = { CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "3" }

describe("host lock on the lab", function()
  setup(function()
    work = os.tmpname()
    os.remove(work)
    -- HOME/.ssh/known_hosts is where cargoship looks by default: the lab's, for the binary
    assert(os.execute("mkdir -p " .. q(work .. "/home/.ssh") .. " && cp " .. q(lab.known_hosts) .. " "
      .. q(work .. "/home/.ssh/known_hosts")))
    cluster = work .. "/cluster.yaml"
    driver = work .. "/driver.lua"
    local f = assert(io.open(driver, "wb"))
    f:write(DRIVER)
    f:close()
    write_cluster()
    for _, h in ipairs(hosts) do
      local _, out = ssh(h, FIND_LOCK)
      h.lock = out:match("%S+") or error(h.name .. ": no directory for the lock")
    end
  end)
  teardown(function()
    -- only the processes these specs started, by pid
    for _, p in ipairs(started) do
      local pid = read(p.out):match("PID (%d+)")
      if pid and not finished(p) then os.execute("kill -9 " .. pid .. " 2>/dev/null") end
    end
    clear_locks()
    os.execute("rm -rf " .. q(work))
  end)
  before_each(clear_locks)

  it("lets one of two concurrent runs proceed and fails the other within 5 s, naming the holder", function()
    local a = start("a", { HOLD = "60" })
    local b = start("b", { HOLD = "60" })
    wait_until(function() return acquired(a) or acquired(b) or (finished(a) and finished(b)) end, 20,
      "one run to take the locks")
    local winner, loser = a, b
    if acquired(b) then winner, loser = b, a end
    assert.is_true(acquired(winner), read(winner.out) .. read(winner.err))
    local rc = wait_exit(loser, 15)
    assert.are.equal(4, rc, read(loser.out) .. read(loser.err))
    local out = read(loser.out)
    assert.matches("FAILED .*another cargoship holds the lock at " .. hosts[1].lock:gsub("%p", "%%%0"), out)
    assert.matches("(pid " .. pid_of(winner) .. ", cargoship 0.0.0-lockdriver, `apply " .. cluster .. "`)", out,
      1, true)
    assert.matches("last heartbeat %d+ s ago", out)
    -- the loser met the winner on the first host and held nothing anywhere
    assert.is_nil(out:match("FAILED [^\n]*\nFAILED"), "one failure only: the loser stopped at the first host")
    assert.is_true(loser.elapsed < 5, "the loser took " .. loser.elapsed .. " s")
    assert.are.equal(#hosts, #locked_hosts())
    signal(winner, "INT")
    assert.are.equal(130, wait_exit(winner, 20))
    assert.are.same({}, locked_hosts())
  end)

  it("takes over from a run killed with -9 once its lock went stale, warning with the old holder", function()
    local a = start("a", { HOLD = "60", CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "3" })
    wait_until(function() return acquired(a) end, 20, "the first run to take the locks")
    local apid = pid_of(a)
    signal(a, "9")
    wait_exit(a, 10)
    assert.are.equal(#hosts, #locked_hosts(), "kill -9 releases nothing")
    -- at once: the dead run's lock is still fresh
    local b = start("b", FAST)
    assert.are.equal(4, wait_exit(b, 15))
    assert.matches("(pid " .. apid .. ",", read(b.out), 1, true)
    sleep(4)
    local c = start("c", { HOLD = "60", CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "3" })
    wait_until(function() return acquired(c) or finished(c) end, 20, "the third run to take over")
    assert.is_true(acquired(c), read(c.out) .. read(c.err))
    local err = read(c.err)
    local warnings = 0
    for line in err:gmatch("[^\n]+") do
      if line:find("took over a stale lock at /", 1, true) then
        warnings = warnings + 1
        assert.matches("(pid " .. apid .. ", cargoship 0.0.0-lockdriver", line, 1, true)
      end
    end
    assert.are.equal(#hosts, warnings, err)
    -- held and kept fresh by the new run's heartbeat, well past the stale window
    sleep(4)
    local d = start("d", FAST)
    assert.are.equal(4, wait_exit(d, 15))
    assert.matches("(pid " .. pid_of(c) .. ",", read(d.out), 1, true)
    signal(c, "INT")
    assert.are.equal(130, wait_exit(c, 20))
    assert.are.same({}, locked_hosts())
  end)

  it("releases every lock on Ctrl-C mid-run", function()
    local a = start("a", { HOLD = "60" })
    wait_until(function() return acquired(a) end, 20, "the run to take the locks")
    assert.are.equal(#hosts, #locked_hosts())
    sleep(1)
    signal(a, "INT")
    assert.are.equal(130, wait_exit(a, 20))
    assert.is_true(a.elapsed < 20)
    assert.are.same({}, locked_hosts())
    -- and nothing else of the lock is left behind
    for _, h in ipairs(hosts) do
      local _, out = ssh(h, "ls -d " .. h.lock .. "* 2>/dev/null; true")
      assert.are.equal("", out, h.name)
    end
  end)

  it("stops a run whose lock was stolen, and releases nothing of the thief's", function()
    local a = start("a", { HOLD = "60", CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "3" })
    wait_until(function() return acquired(a) end, 20, "the run to take the locks")
    -- another run's lock appears on h2 behind a's back
    local l2 = hosts[2].lock
    ssh(hosts[2], "rm -rf " .. l2 .. " && mkdir " .. l2 .. " && printf 'holder=thief@elsewhere\\n"
      .. "pid=1\\ntoken=thief.1\\n' >" .. l2 .. "/holder")
    wait_until(function() return read(a.err):find("lost the lock", 1, true) end, 10, "the loss to be noticed")
    assert.matches("taken over by thief@elsewhere", read(a.err), 1, true)
    signal(a, "INT")
    wait_exit(a, 20)
    assert.are.same({ hosts[2].name }, locked_hosts())
    local _, holder = ssh(hosts[2], "cat " .. l2 .. "/holder")
    assert.matches("thief@elsewhere", holder, 1, true)
  end)

  describe("cargoship unlock", function()
    local function unlock(extra)
      local p = start("unlock", {}, q(lab.bin) .. " unlock " .. q(cluster) .. " --known-hosts "
        .. q(lab.known_hosts) .. " " .. (extra or ""))
      local rc = wait_exit(p, 60)
      return rc, read(p.out), read(p.err)
    end

    it("shows the holders, refuses without a terminal or --yes, then breaks the locks", function()
      assert.is_truthy(lab.bin, "CARGOSHIP_BIN is not set")
      local rc, out = unlock()
      assert.are.equal(0, rc, out)
      for _, h in ipairs(hosts) do assert.matches(h.address .. ": not locked", out, 1, true) end
      local a = start("a", { HOLD = "60", CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "3" })
      wait_until(function() return acquired(a) end, 20, "the run to take the locks")
      local apid = pid_of(a)
      local err
      rc, out, err = unlock()
      assert.are.equal(1, rc)
      for _, h in ipairs(hosts) do
        assert.matches(h.address .. ": locked at " .. h.lock .. " by ", out, 1, true)
      end
      assert.matches("(pid " .. apid .. ",", out, 1, true)
      assert.matches("pass --yes", err, 1, true)
      assert.are.equal(#hosts, #locked_hosts())
      rc, out = unlock("--yes")
      assert.are.equal(0, rc, out)
      for _, h in ipairs(hosts) do assert.matches(h.address .. ": lock broken", out, 1, true) end
      assert.are.same({}, locked_hosts())
      -- the run that held them notices at its next heartbeat
      wait_until(function() return read(a.err):find("it is gone", 1, true) end, 10, "the run to notice")
      signal(a, "INT")
      wait_exit(a, 20)
    end)
  end)

  describe("with the real binary", function()
    local function apply_available()
      if not lab.bin then return false end
      local _, out = lab.sh(q(lab.bin) .. " apply --help")
      return not out:find("NOT AVAILABLE IN THIS BUILD", 1, true)
    end

    -- apply holds its locks for milliseconds in this build (phases 8-29 are not in it), too
    -- short to meet: so phase 30 is made to wait on every host. A stand-in `mv` earlier in
    -- PATH blocks the first release of the lock on each host while /run/cs-hold exists;
    -- later calls (the cleanup's, another run's) go straight through.
    local WRAPPER = "#!/bin/sh\n"
      .. "case \"$3\" in */cargoship.lock) ;; *) exec /bin/mv \"$@\";; esac\n"
      .. "if [ -e /run/cs-hold ] && mkdir /run/cs-held 2>/dev/null; then\n"
      .. "  while [ -e /run/cs-hold ]; do sleep 0.2; done\n"
      .. "fi\n"
      .. "exec /bin/mv \"$@\"\n"
    local function hold_releases()
      for _, h in ipairs(hosts) do
        ssh(h, "printf '" .. WRAPPER:gsub("'", "'\\''") .. "' >/usr/local/bin/mv && chmod 755 /usr/local/bin/mv"
          .. " && rm -rf /run/cs-held && touch /run/cs-hold")
      end
    end
    local function let_go()
      for _, h in ipairs(hosts) do ssh(h, "rm -f /run/cs-hold /usr/local/bin/mv") end
      sleep(0.5)
      for _, h in ipairs(hosts) do ssh(h, "rm -rf /run/cs-held") end
    end
    local function releases_held()
      for _, h in ipairs(hosts) do
        if ssh(h, "test -d /run/cs-held") ~= 0 then return false end
      end
      return true
    end
    local function apply(name, env)
      return start(name, env, q(lab.bin) .. " -v apply --confirm " .. q(cluster))
    end

    after_each(let_go)

    it("fails a second apply within 5 s naming the holder, and Ctrl-C mid-run releases every lock", function()
      if not apply_available() then
        pending("cargoship apply does not run the pipeline in this build yet")
        return
      end
      hold_releases()
      local a = apply("apply-a")
      wait_until(function() return releases_held() or finished(a) end, 60, "apply to reach phase 30")
      assert.is_falsy(finished(a), read(a.err))
      assert.are.equal(#hosts, #locked_hosts())
      local b = apply("apply-b")
      assert.are.equal(4, wait_exit(b, 30), read(b.err))
      assert.is_true(b.elapsed < 5, "the second apply took " .. b.elapsed .. " s")
      assert.matches("another cargoship holds the lock at " .. hosts[1].lock, read(b.err), 1, true)
      assert.matches("(pid " .. pid_of(a) .. ",", read(b.err), 1, true)
      signal(a, "INT")
      assert.are.equal(130, wait_exit(a, 30), read(a.err))
      assert.are.same({}, locked_hosts())
    end)

    it("takes over after the stale window from an apply killed with -9", function()
      if not apply_available() then
        pending("cargoship apply does not run the pipeline in this build yet")
        return
      end
      local timings = { CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "5" }
      hold_releases()
      local a = apply("apply-a", timings)
      wait_until(function() return releases_held() or finished(a) end, 60, "apply to reach phase 30")
      local apid = pid_of(a)
      signal(a, "9")
      wait_exit(a, 10)
      assert.are.equal(#hosts, #locked_hosts(), "kill -9 releases nothing")
      local b = apply("apply-b", timings)
      assert.are.equal(4, wait_exit(b, 30), read(b.err))
      assert.matches("(pid " .. apid .. ",", read(b.err), 1, true)
      sleep(6)
      local c = apply("apply-c", timings)
      assert.are.equal(0, wait_exit(c, 60), read(c.err))
      local n = 0
      for line in read(c.err):gmatch("[^\n]+") do
        if line:find("took over a stale lock at /", 1, true) then
          n = n + 1
          assert.matches("(pid " .. apid .. ",", line, 1, true)
        end
      end
      assert.are.equal(#hosts, n, read(c.err))
      assert.are.same({}, locked_hosts())
    end)
  end)
end)

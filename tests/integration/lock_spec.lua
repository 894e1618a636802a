-- Integration specs of the host lock on the lab: concurrent runs, takeover, Ctrl-C, unlock, hostile users, stalls.
--
-- Each "run" is a separate process. A run is a small Lua driver that does what apply does
-- around the lock: connect, acquire (phase 7), hold while "working", release (phase 30); the
-- same scenarios also run against the real binary (see the last block). Timings are shrunk
-- through CARGOSHIP_LOCK_INTERVAL / CARGOSHIP_LOCK_STALE_AFTER.
local util = require "cargoship.util"
local lab = require "integration.lab"

local q = util.quote
-- Where the lock lives on a host: /run/cargoship/lock, else /var/lib/cargoship/lock. Set per
-- host in setup, as h.lock (and its private directory as h.base).
local FIND_LOCK = "for d in /run /var/lib; do if [ -d $d ]; then echo $d/cargoship/lock; break; fi; done"
-- Where earlier builds kept it, world-writable places a local user can plant things in.
local OLD_PLACES = "/run/lock/cargoship.lock /var/lock/cargoship.lock /tmp/cargoship.lock"

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
local now = require("cargoship.util").now  -- CLOCK_MONOTONIC: one clock for every process here
local function say(...) io.stdout:write(...) io.stdout:write("\n") io.stdout:flush() end
-- the moment this run counts a host's lock lost and stops there (the lock's callback ends
-- in ctx:host_lost)
local function stamp_losses(ctx)
  local told, method = {}, ctx.host_lost
  ctx.host_lost = function(self, host, msg)
    if not told[host] and tostring(msg):find("lost the lock", 1, true) then
      told[host] = true
      say(string.format("LOST %s %.3f", host.name, now()))
    end
    return method(self, host, msg)
  end
end
-- "working" between the lock phases: a read-only phase that says what it holds, then waits
local hold = { id = "hold", title = "Hold", dry_run = "read_only", run = function(ctx)
  for _, h in ipairs(ctx.hosts) do
    local l = ctx.locks[h.name]
    say(string.format("HOLDS %s %s %s", h.name, l.path, l.took_over and ("from pid " .. tostring(l.took_over.pid))
      or "fresh"))
  end
  say(string.format("ACQUIRED %.3f", now()))
  loop.sleep(tonumber(os.getenv("HOLD") or "60"))
  return true
end }
local function once(cluster, o)
  -- the command builds the transport, as apply does
  local transport = assert(require("cargoship.pipeline.session").transport_for(o, os.getenv))
  local ctx = context.new { cluster = cluster, log = log, options = o, transport = transport }
  stamp_losses(ctx)
  local phases = { require("cargoship.phases.connect"), require("cargoship.phases.acquire_lock"), hold,
    (require("cargoship.phases.release_lock")) }
  local rep = runner.run(ctx, phases)
  -- an interrupted run's cleanup goes on after runner.run returned: it needs the sessions
  if rep.final then transport:close_all() end
  return rep, ctx
end
local ok, code = loop.run(function()
  local cluster = assert(require("cargoship.config").load(path, { env = os.getenv }))
  local o = { cluster_file = path, known_hosts = os.getenv("KNOWN_HOSTS"),
    command = os.getenv("LOCK_COMMAND") or "apply" }
  -- RETRY=seconds: try again while another run holds a lock, as an operator re-running would
  local retry_until = now() + tonumber(os.getenv("RETRY") or "0")
  while true do
    local rep, ctx = once(cluster, o)
    if not rep.final then return 130 end
    local failed
    for _, p in ipairs(rep.phases) do
      if p.verdict == "failed" then failed = p break end
    end
    if not failed then
      say("RELEASED")
      return 0
    end
    local conflict = #ctx.lock_conflicts > 0
    if not (conflict and failed.id == "acquire_lock" and now() < retry_until) then
      for _, h in ipairs(failed.hosts) do
        if h.error then say("FAILED ", failed.id == "connect" and "connect: " or "", h.error) end
      end
      if failed.id == "release_lock" then say("RELEASE FAILED") end
      return conflict and 4 or 1
    end
    loop.sleep(0.2)
  end
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

local work, cluster, cluster1, driver
local hosts = {}

-- A cluster of the first n lab hosts (four: every flavour the ctest lab cycles through);
-- reversed: listed last to first (the hosts list of the spec keeps the lab's order).
local function write_cluster(file, n, reversed)
  local all = lab.hosts()
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: lock",
    "spec:", "  config:", "    loadbalancer: h1.lab.internal", "  hosts:" }
  n = math.min(n, #all)
  for k = 1, n do
    local i = reversed and (n + 1 - k) or k
    if not reversed then hosts[i] = all[i] end
    lines[#lines + 1] = string.format("    - role: %s\n      %s", k == 1 and "controller" or "worker",
      lab.block(all[i], { user = "root" }))
  end
  local f = assert(io.open(file, "wb"))
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
  local old = OLD_PLACES .. " " .. OLD_PLACES:gsub("(%S+)", "%1.*")
  for _, h in ipairs(hosts) do ssh(h, "rm -rf " .. h.base .. " " .. old .. " /etc/cs-precious") end
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

-- The last n lines of a text (all of it when shorter).
local function tail(text, n)
  local lines = {}
  for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
  return table.concat(lines, "\n", math.max(1, #lines - n + 1))
end

-- What a run's end says, for an assertion's message: its exit code first, then the last lines of
-- its stderr and its stdout (a CI log keeps only the head of a long message, and the cause of an
-- early end is at the tail of its output).
local function story(p)
  return string.format("%s: exit %s\n-- last lines of its stderr:\n%s\n-- last lines of its stdout:\n%s", p.err,
    tostring(finished(p) or "none yet"), tail(read(p.err), 30), tail(read(p.out), 15))
end

-- A run that fails on a held lock ends well before this (its holder holds for 60 s): the bound
-- leaves room for a loaded machine's process start and handshakes, nothing more.
local LOSER_S = 15

local function wait_exit(p, timeout)
  local rc = wait_until(function() return finished(p) end, timeout or 60, "a run to end")
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

-- As the unprivileged user tb (uid 1000 on every lab host), through root's login.
local function as_tb(h, cmd)
  return ssh(h, "su -s /bin/sh tb -c " .. q(cmd))
end

-- The first "WORD t" a run printed, t as a number (its CLOCK_MONOTONIC seconds).
local function stamp(p, word, name)
  local t = read(p.out):match(word .. (name and (" " .. name) or "") .. " (%d+%.%d+)")
  return t and tonumber(t)
end

-- PIDs, as the machine sees them, of host i's sshd session processes serving root (the one
-- process per connection that reads and writes its socket; "sshd-session" from OpenSSH 9.8),
-- found in the host's own PID namespace (lab.sh pid I gives its PID 1).
local function sshd_sessions(i)
  local _, pid1 = lab.lab("pid " .. i)
  pid1 = assert(pid1:match("%d+"), "no PID 1 for host " .. i)
  local _, out = lab.sh("ns=$(readlink /proc/" .. pid1 .. "/ns/pid); for p in /proc/[0-9]*; do "
    .. "[ \"$(readlink $p/ns/pid 2>/dev/null)\" = \"$ns\" ] || continue; "
    .. "case $(tr '\\0' ' ' <$p/cmdline 2>/dev/null) in 'sshd: root@notty'* | 'sshd-session: root@notty'*) "
    .. "echo ${p#/proc/};; esac; done")
  local pids = {}
  for pid in out:gmatch("%d+") do pids[#pids + 1] = pid end
  return pids
end

-- Content, size and mtime of a file on h, for "byte-identical" proofs.
local function fingerprint(h, path)
  local _, out = ssh(h, "stat -c '%s %Y %U %a' " .. path .. " && sha256sum " .. path)
  return out
end

local STALE20 = { CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "20" }
local HOLD_STALE20 = { HOLD = "60", CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "20" }

describe("host lock on the lab", function()
  setup(function()
    work = os.tmpname()
    os.remove(work)
    -- HOME/.ssh/known_hosts is where cargoship looks by default: the lab's, for the binary
    assert(os.execute("mkdir -p " .. q(work .. "/home/.ssh") .. " && cp " .. q(lab.known_hosts) .. " "
      .. q(work .. "/home/.ssh/known_hosts")))
    cluster = work .. "/cluster.yaml"
    cluster1 = work .. "/cluster1.yaml"
    driver = work .. "/driver.lua"
    local f = assert(io.open(driver, "wb"))
    f:write(DRIVER)
    f:close()
    write_cluster(cluster1, 1)
    write_cluster(cluster, 4)
    for _, h in ipairs(hosts) do
      local _, out = ssh(h, FIND_LOCK)
      h.lock = out:match("%S+") or error(h.name .. ": no directory for the lock")
      h.base = h.lock:match("^(.*)/lock$")
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

  it("lets one of two concurrent runs proceed and fails the other at once, naming the holder", function()
    local a = start("a", { HOLD = "60" })
    local b = start("b", { HOLD = "60" })
    -- a red case must not leave a holder behind for the next ones (they would meet its locks)
    finally(function()
      for _, p in ipairs { a, b } do
        if not finished(p) then signal(p, "INT"); pcall(wait_exit, p, 20) end
      end
    end)
    wait_until(function() return acquired(a) or acquired(b) or (finished(a) and finished(b)) end, 20,
      "one run to take the locks")
    local winner, loser = a, b
    if acquired(b) then winner, loser = b, a end
    assert.is_true(acquired(winner), story(winner))
    local rc = wait_exit(loser, 15)
    assert.are.equal(4, rc, story(loser))
    local out = read(loser.out)
    assert.matches("FAILED .*another cargoship holds the lock at " .. hosts[1].lock:gsub("%p", "%%%0"), out)
    assert.matches("(pid " .. pid_of(winner) .. ", cargoship 0.0.0-lockdriver, `apply " .. cluster .. "`)", out,
      1, true)
    assert.matches("last heartbeat %d+ s ago", out)
    -- the holder runs, on this machine: it is not taken for gone
    assert.matches("it is free once that run ends", out, 1, true)
    -- the loser tried its hosts at once (phases/lib/take_locks.lua): each host it failed on
    -- names the winner, and it holds nothing anywhere (every lock below is the winner's)
    for line in out:gmatch("FAILED ([^\n]+)") do
      assert.matches("(pid " .. pid_of(winner) .. ",", line, 1, true)
    end
    -- at once: the holder holds for 60 s (HOLD), so a loser that waited for it would take that
    -- long. Not 5 s: on the 2-core CI machine at load 7+ a run's start and its 4 handshakes alone
    -- took 5.3-7.6 s (CI, stop 27); unloaded the loser ends in ~1 s.
    assert.is_true(loser.elapsed < LOSER_S, "the loser took " .. loser.elapsed .. " s")
    assert.are.equal(#hosts, #locked_hosts())
    signal(winner, "INT")
    assert.are.equal(130, wait_exit(winner, 20))
    assert.are.same({}, locked_hosts())
  end)

  it("takes over from a run killed with -9 once its lock went stale, warning with the old holder", function()
    -- a 20 s window, not 6 s: on the loaded CI machine a run took more than 6 s from its
    -- start to its lock, and met the dead run's lock already stale (stop 28)
    local a = start("a", HOLD_STALE20)
    wait_until(function() return acquired(a) end, 20, "the first run to take the locks")
    local apid = pid_of(a)
    signal(a, "9")
    wait_exit(a, 10)
    assert.are.equal(#hosts, #locked_hosts(), "kill -9 releases nothing")
    -- at once: the dead run's lock is still fresh
    local b = start("b", STALE20)
    assert.are.equal(4, wait_exit(b))
    assert.matches("(pid " .. apid .. ",", read(b.out), 1, true)
    -- the holder ran on this machine and its process is gone: said so, not "free once that run ends"
    assert.matches("is held by a run that is gone (pid " .. apid .. ", killed?)", read(b.out), 1, true)
    assert.matches("; stale after %d+ s more, or `cargoship unlock CLUSTER` breaks it now", read(b.out))
    assert.is_nil(read(b.out):find("free once that run ends", 1, true), read(b.out))
    sleep(21)
    local c = start("c", HOLD_STALE20)
    wait_until(function() return acquired(c) or finished(c) end, 20, "the third run to take over")
    assert.is_true(acquired(c), story(c))
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
    sleep(21)
    local d = start("d", STALE20)
    assert.are.equal(4, wait_exit(d))
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
      local _, out = ssh(h, "ls -A " .. h.base .. " 2>/dev/null; true")
      assert.are.equal("", out, h.name)
    end
  end)

  it("stops a run whose lock was stolen, and releases nothing of the thief's", function()
    local a = start("a", { HOLD = "60", CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "6" })
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

  describe("against a local user", function()
    it("cannot be made by one: the lock's parent is root's, and the old world-writable places are ignored", function()
      -- before any run: tb can make neither the private directory nor anything in /run
      for _, h in ipairs(hosts) do
        local code = as_tb(h, "mkdir " .. h.base)
        assert.are_not.equal(0, code, h.name .. ": tb could make " .. h.base)
      end
      -- a spoofed, fresh lock where earlier builds looked (/run/lock is 1777 on Debian, /tmp
      -- where it is absent), claiming root: blocks nothing
      for _, h in ipairs(hosts) do
        as_tb(h, "for d in /run/lock /tmp; do [ -w $d ] || continue; mkdir $d/cargoship.lock && printf '"
          .. "holder=root@ops\\npid=1\\ntoken=spoof.1\\nstarted=1\\n' >$d/cargoship.lock/holder; break; done")
      end
      local a = start("a", { HOLD = "60" })
      wait_until(function() return acquired(a) or finished(a) end, 20, "the run to take the locks")
      assert.is_true(acquired(a), story(a))
      assert.are.equal(#hosts, #locked_hosts())
      for _, h in ipairs(hosts) do
        local _, out = ssh(h, "stat -c '%U %a %F' " .. h.base .. " " .. h.lock)
        assert.are.equal("root 700 directory\nroot 700 directory\n", out, h.name)
      end
      signal(a, "INT")
      assert.are.equal(130, wait_exit(a, 20))
      assert.are.same({}, locked_hosts())
    end)

    it("leaves a file that a planted symlink names byte-identical when it takes over a stale lock", function()
      -- earlier builds took over a stale lock in /run/lock (or /tmp) and, as root, wrote a
      -- marker through whatever the planted directory held: here a symlink to a root file
      for _, h in ipairs(hosts) do
        ssh(h, "printf 'precious\\n' >/etc/cs-precious && chmod 600 /etc/cs-precious")
      end
      local before = {}
      for _, h in ipairs(hosts) do
        as_tb(h, "for d in /run/lock /tmp; do [ -w $d ] || continue; L=$d/cargoship.lock; mkdir $L && "
          .. "printf 'holder=root@ops\\npid=1\\ntoken=old.1\\nstarted=1\\n' >$L/holder && "
          .. "for f in gone holder.new lock stale_after; do ln -s /etc/cs-precious $L/$f; done; "
          .. "touch -h -d '1 hour ago' $L/* $L; break; done")
        before[h.name] = fingerprint(h, "/etc/cs-precious")
        assert.matches("^9 %d+ root 600\n", before[h.name])
      end
      -- and a stale lock of an earlier, killed run in the right place, so a takeover happens
      local a = start("a", { HOLD = "60", CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "6" })
      wait_until(function() return acquired(a) end, 20, "the first run to take the locks")
      signal(a, "9")
      wait_exit(a, 10)
      sleep(7)
      local c = start("c", { HOLD = "60", CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "6" })
      wait_until(function() return acquired(c) or finished(c) end, 20, "the second run to take over")
      assert.is_true(acquired(c), story(c))
      for _, h in ipairs(hosts) do
        assert.are.equal(before[h.name], fingerprint(h, "/etc/cs-precious"), h.name)
      end
      assert.matches("HOLDS " .. hosts[1].address .. " " .. hosts[1].lock .. " from pid " .. pid_of(a), read(c.out),
        1, true)
      signal(c, "INT")
      assert.are.equal(130, wait_exit(c, 20))
      assert.are.same({}, locked_hosts())
    end)

    it("refuses a lock directory that is not root's, showing its real owner, not the holder it claims", function()
      -- a private directory that someone else owns (given away by mistake, or made while the
      -- parent was writable): tb fills it with a fresh lock claiming root
      local h = hosts[1]
      ssh(h, "mkdir -m 700 " .. h.base .. " && chown tb:tb " .. h.base)
      as_tb(h, "mkdir " .. h.lock .. " && printf 'holder=root@ops\\npid=1\\ntoken=spoof.2\\nstarted=1\\n' >"
        .. h.lock .. "/holder")
      local planted = fingerprint(h, h.lock .. "/holder")
      local a = start("a", { HOLD = "60", CLUSTER = cluster1 })
      assert.are.equal(1, wait_exit(a, 20), story(a))
      local out = read(a.out)
      assert.matches("lock: refusing " .. h.base .. ": it does not belong to uid 0 (owner tb (uid 1000), mode 700)",
        out, 1, true)
      assert.is_nil(out:find("root@ops", 1, true), out)
      -- `cargoship unlock` shows the same, and breaks nothing
      assert.is_truthy(lab.bin, "CARGOSHIP_BIN is not set")
      local u = start("unlock", {}, q(lab.bin) .. " unlock " .. q(cluster1) .. " --known-hosts "
        .. q(lab.known_hosts) .. " --yes")
      assert.are.equal(1, wait_exit(u, 60), story(u))
      assert.matches(h.address .. ": lock: refusing " .. h.base .. ": it does not belong to uid 0 (owner tb (uid 1000)",
        read(u.out), 1, true)
      assert.is_nil(read(u.out):find("root@ops", 1, true))
      assert.are.equal(planted, fingerprint(h, h.lock .. "/holder"))
    end)
  end)

  describe("one lock, one holder", function()
    -- window 6 s: the holder counts its lock lost 4.5 s after its last good touch (1.5 s
    -- margin); shorter windows make a live holder on a loaded machine give up, as it should
    local TIMINGS = { CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "6" }
    local function env(extra)
      local e = { CLUSTER = cluster1 }
      for k, v in pairs(TIMINGS) do e[k] = v end
      for k, v in pairs(extra or {}) do e[k] = v end
      return e
    end

    -- a holds h1; its path to h1 is cut by `cut`; b tries to take the lock, at once or, when
    -- the cut lasts `restore_after` seconds (a pulled link cuts off every run alike), as soon as
    -- the path is back, while a's beat in flight may still hang in TCP's retransmission
    -- backoff. However long each side takes, a must have stopped before b took the lock.
    local function never_two_holders(cut, restore, restore_after)
      local h = hosts[1]
      local a = start("a", env { HOLD = "60" })
      wait_until(function() return acquired(a) or finished(a) end, 20, "the first run to take the lock")
      assert.is_true(acquired(a), story(a))
      sleep(1.5)
      local t_cut = util.now()
      cut()
      local ok, err = pcall(function()
        if restore_after then
          sleep(restore_after)
          restore()
        end
        local b = start("b", env { HOLD = "60", RETRY = "40" })
        wait_until(function() return acquired(b) or finished(b) end, 45, "the second run to take the lock")
        assert.is_true(acquired(b), story(b))
        local taken = stamp(b, "ACQUIRED")
        -- builds before the deadline noticed only once the beat in flight timed out (20 s)
        wait_until(function() return stamp(a, "LOST", h.address) end, 40, "the holder to count its lock lost")
        local lost = stamp(a, "LOST", h.address)
        io.stderr:write(string.format("[lock] %s: the holder counted its lock lost %.2f s after the cut; the next "
          .. "run took it %.2f s after that\n", h.name, lost - t_cut, taken - lost))
        assert.is_true(lost < taken, string.format("the holder stopped %.2f s after the taker took over", lost - taken))
        assert.matches("HOLDS " .. h.address .. " " .. h.lock .. " from pid " .. pid_of(a), read(b.out), 1, true)
        assert.matches("no heartbeat got through", read(a.err), 1, true)
        -- once a's path is back, its late beats and its release leave b's lock alone
        if not restore_after then restore() end
        sleep(2.5)
        local _, holder = ssh(h, "cat " .. h.lock .. "/holder")
        assert.matches("pid=" .. pid_of(b) .. "\n", holder, 1, true)
        signal(a, "INT")
        wait_exit(a, 30)
        _, holder = ssh(h, "cat " .. h.lock .. "/holder")
        assert.matches("pid=" .. pid_of(b) .. "\n", holder, 1, true)
        signal(b, "INT")
        assert.are.equal(130, wait_exit(b, 20))
      end)
      restore()
      assert(ok, err)
    end

    it("the holder whose sshd session is stopped (SIGSTOP) counts its lock lost before another run takes it", function()
      local stopped
      never_two_holders(function()
        -- the holder's session is up (it took the lock through it), but its sshd may not have
        -- retitled itself "root@notty" yet on a loaded machine (CI of stop 29, over openSSH)
        wait_until(function() stopped = sshd_sessions(1); return #stopped >= 1 end, 10, "an sshd session of the holder")
        assert.is_true(#stopped >= 1, "no sshd session of the holder on h1")
        assert(os.execute("kill -STOP " .. table.concat(stopped, " ")))
      end, function()
        if stopped then os.execute("kill -CONT " .. table.concat(stopped, " ") .. " 2>/dev/null") end
      end)
    end)

    it("the holder whose link is pulled counts its lock lost before another run takes it", function()
      local down = false
      never_two_holders(function()
        local code, out = lab.lab("link 1 down")
        assert.are.equal(0, code, out)
        down = true
      end, function()
        if down then lab.lab("link 1 up") end
        down = false
      end, 5)
    end)
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
      -- a lock taken by another pipeline command than apply: its record names that command
      local a = start("a", { HOLD = "60", CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "6",
        LOCK_COMMAND = "reset" })
      wait_until(function() return acquired(a) end, 20, "the run to take the locks")
      local apid = pid_of(a)
      local err
      rc, out, err = unlock()
      assert.are.equal(1, rc)
      for _, h in ipairs(hosts) do
        assert.matches(h.address .. ": locked at " .. h.lock .. " by ", out, 1, true)
      end
      assert.matches("(pid " .. apid .. ",", out, 1, true)
      assert.matches("`reset " .. cluster .. "`", out, 1, true)
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

    -- apply holds its locks for milliseconds on these engine-less hosts, too short to meet:
    -- so phase 30 is made to wait on every host. A stand-in `mv` earlier in
    -- PATH blocks the first release of the lock on each host while /run/cs-hold exists;
    -- later calls (the cleanup's, another run's) go straight through.
    local WRAPPER = "#!/bin/sh\n"
      .. "case \"$3\" in */cargoship/lock) ;; *) exec /bin/mv \"$@\";; esac\n"
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
    -- a custom phase with work on every host, every time: a run with nothing to do stops
    -- at its plan and takes no lock
    local PHASE = "-- luacheck: read globals action\nreturn { id = 'always_work', title = 'Always work',"
      .. " after = 'acquire_lock', reads = { 'connection' }, creates = { 'nothing' },"
      .. " assess = function() return { action.run { cmd = 'true', say = 'run true' } } end }\n"
    local function apply(name, env)
      local dir = work .. "/phases"
      os.execute("mkdir -p " .. q(dir))
      local f = assert(io.open(dir .. "/always.lua", "w"))
      f:write(PHASE)
      f:close()
      return start(name, env, q(lab.bin) .. " -v apply --confirm --phases " .. q(dir) .. " " .. q(cluster))
    end

    after_each(let_go)

    it("fails a second apply at once naming the holder, and Ctrl-C mid-run releases every lock", function()
      if not apply_available() then
        pending("cargoship apply does not run the pipeline in this build yet")
        return
      end
      hold_releases()
      local a = apply("apply-a")
      wait_until(function() return releases_held() or finished(a) end, 60, "apply to reach phase 30")
      assert.is_falsy(finished(a), "apply a ended before holding every lock: " .. story(a))
      assert.are.equal(#hosts, #locked_hosts())
      local b = apply("apply-b")
      assert.are.equal(4, wait_exit(b, 30), story(b))
      assert.is_true(b.elapsed < LOSER_S, "the second apply took " .. b.elapsed .. " s")
      assert.matches("another cargoship holds the lock at " .. hosts[1].lock, read(b.err), 1, true)
      assert.matches("(pid " .. pid_of(a) .. ",", read(b.err), 1, true)
      signal(a, "INT")
      assert.are.equal(130, wait_exit(a, 30), story(a))
      assert.are.same({}, locked_hosts())
    end)

    -- Two applies whose files list the hosts in opposite orders, let into phase 7 at the same
    -- instant: a barrier phase before it waits, in the real run only, on a FIFO on h1 that the
    -- spec opens once both wait. Earlier builds took locks in the file's order (the first host
    -- alone, then the others at once): each took its own first host and both exited 4.
    local BARRIER = "-- luacheck: read globals action\nreturn { id = 'barrier', title = 'Barrier',"
      .. " before = 'acquire_lock', dry_run = 'read_only', reads = { 'connection' }, creates = { 'barrier' },"
      .. " run = function(ctx, hosts)\n  if ctx.dry_run then return true end\n"
      .. "  for _, h in ipairs(hosts) do\n    if h.config.connection.address == %q then\n"
      .. "      local out, err, code = h:probe('touch /run/cs-wait.$$ && timeout 60 cat /run/cs-go >/dev/null')\n"
      .. "      if code ~= 0 then return nil, 'barrier: ' .. tostring(err) end\n    end\n  end\n"
      .. "  return true\nend }\n"
    -- the work between the lock phases: a file naming the run on every host, then a while
    local WORK = "-- luacheck: read globals action\nreturn { id = 'order_work', title = 'Order work',"
      .. " after = 'acquire_lock', reads = { 'connection' }, creates = { 'order' },"
      .. " assess = function() return { action.write { path = '/root/cs-order.%s', content = '%s\\n',"
      .. " mode = '0644' }, action.run { cmd = 'sleep 2', say = 'work a while' } } end }\n"

    it("lets one of two applies listing the hosts in opposite orders through, the other holding nothing", function()
      if not apply_available() then
        pending("cargoship apply does not run the pipeline in this build yet")
        return
      end
      local reversed = work .. "/cluster-reversed.yaml"
      write_cluster(reversed, #hosts, true)
      local h1 = hosts[1]
      -- the lab's hosts call themselves h1..h4: h1 comes first in the order of every run
      local _, name = ssh(h1, "hostname")
      assert.are.equal("h1", name:match("%S+"))
      for round = 1, 3 do
        for _, h in ipairs(hosts) do ssh(h, "rm -f /root/cs-order.* /run/cs-wait.* /run/cs-go") end
        ssh(h1, "mkfifo /run/cs-go")
        local runs = {}
        for i, file in ipairs { cluster, reversed } do
          local tag = "r" .. round .. (i == 1 and "fwd" or "rev")
          local dir = work .. "/phases-" .. tag
          os.execute("mkdir -p " .. q(dir))
          lab.write(dir .. "/1barrier.lua", string.format(BARRIER, h1.address))
          lab.write(dir .. "/2work.lua", string.format(WORK, tag, tag))
          runs[i] = start("apply-" .. tag, {},
            q(lab.bin) .. " -v apply --confirm --phases " .. q(dir) .. " " .. q(file))
          runs[i].tag = tag
        end
        wait_until(function()
          local _, out = ssh(h1, "ls /run/cs-wait.* 2>/dev/null | wc -l")
          return tonumber(out) == 2 or finished(runs[1]) or finished(runs[2])
        end, 60, "both applies to reach the barrier")
        assert.is_falsy(finished(runs[1]) or finished(runs[2]), story(runs[1]) .. "\n---\n" .. story(runs[2]))
        sleep(0.3)
        ssh(h1, ": >/run/cs-go")
        local rc = { wait_exit(runs[1], 60), wait_exit(runs[2], 60) }
        io.stderr:write(string.format("[lock] round %d: exit codes %d and %d\n", round, rc[1], rc[2]))
        assert.is_false(rc[1] == 4 and rc[2] == 4, "both applies exited 4:\n" .. story(runs[1]) .. "\n---\n"
          .. story(runs[2]))
        table.sort(rc)
        if rc[1] == 0 and rc[2] == 4 then
          local winner, loser = runs[1], runs[2]
          if finished(winner) ~= 0 then winner, loser = runs[2], runs[1] end
          local err = read(loser.err)
          -- the loser met the winner's firm lock (the winner held every host by then) and let
          -- go of every lock it had taken meanwhile
          assert.matches(": another cargoship holds the lock at ", err, 1, true)
          assert.matches("(pid " .. pid_of(winner) .. ",", err, 1, true)
          for addr in err:gmatch("\n([%d.]+) | took the lock at ") do
            assert.matches("\n" .. addr:gsub("%.", "%%.") .. " | released the lock at ", err, nil, false)
          end
          for _, h in ipairs(hosts) do
            local _, have = ssh(h, "cat /root/cs-order.* 2>/dev/null")
            assert.are.equal(winner.tag .. "\n", have, h.name)
          end
        else
          -- no meeting: one ran before the other took its first lock
          assert.are.same({ 0, 0 }, rc, story(runs[1]) .. "\n---\n" .. story(runs[2]))
        end
        assert.are.same({}, locked_hosts())
      end
      for _, h in ipairs(hosts) do ssh(h, "rm -f /root/cs-order.* /run/cs-wait.* /run/cs-go") end
    end)

    it("takes over after the stale window from an apply killed with -9", function()
      if not apply_available() then
        pending("cargoship apply does not run the pipeline in this build yet")
        return
      end
      -- a's heartbeat ends when its release starts, and the release is what is held here: the
      -- window must outlast the wait for every host's release on a loaded machine (13 s seen)
      -- and a run's start to its lock took ~20 s at load 13 (stop 28): 40 s, not 20
      local timings = { CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "40" }
      hold_releases()
      local a = apply("apply-a", timings)
      wait_until(function() return releases_held() or finished(a) end, 60, "apply to reach phase 30")
      local apid = pid_of(a)
      signal(a, "9")
      wait_exit(a, 10)
      assert.are.equal(#hosts, #locked_hosts(), "kill -9 releases nothing")
      local b = apply("apply-b", timings)
      assert.are.equal(4, wait_exit(b, 30), story(b))
      assert.matches("(pid " .. apid .. ",", read(b.err), 1, true)
      assert.matches("is held by a run that is gone (pid " .. apid .. ", killed?)", read(b.err), 1, true)
      assert.is_nil(read(b.err):find("free once that run ends", 1, true), read(b.err))
      sleep(41)
      local c = apply("apply-c", timings)
      assert.are.equal(0, wait_exit(c, 60), story(c))
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

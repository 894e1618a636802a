-- Specs of cargoship.lock: its remote scripts run for real by /bin/sh in a temp dir, through a fake host.
local loop = require "cargoship.loop"
local util = require "cargoship.util"
local lock = require "cargoship.lock"

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end

local function temp_dir()
  local path = os.tmpname()
  os.remove(path)
  assert(os.execute("mkdir -p " .. util.quote(path)))
  return path
end

local read = require("unit.files").read

local function exists(path)
  local _, code = sh("test -e " .. util.quote(path))
  return code == 0
end

local function mtime(path)
  return tonumber((sh("stat -c %Y " .. util.quote(path))))
end

-- stat(1) of path itself (not what a symlink names), in fmt.
local function stat(path, fmt)
  return (sh("stat -c " .. util.quote(fmt) .. " " .. util.quote(path)):gsub("%s+$", ""))
end

local write = require("unit.files").write

local ME = stat("/proc/self", "%u")
local ME_NAME = (sh("id -un"):gsub("%s+$", ""))
local AS_ROOT = ME == "0"

-- Ages path by `seconds` (the heartbeat's absence, as the host's clock sees it).
local function age(path, seconds)
  assert(os.execute("touch -d " .. util.quote(seconds .. " seconds ago") .. " " .. util.quote(path)))
end

local function recorder()
  local lines = { warn = {}, error = {}, verbose = {} }
  local log = {}
  for _, level in ipairs { "error", "warn", "info", "verbose", "debug" } do
    log[level] = function(_, fmt, ...)
      lines[level] = lines[level] or {}
      table.insert(lines[level], select("#", ...) > 0 and string.format(fmt, ...) or fmt)
    end
  end
  return log, lines
end

-- A host whose probe and run execute the command here, by /bin/sh, as the transport would
-- there; run counts writes and refuses them in a dry run as the real Host does.
local function fake_host(name, o)
  o = o or {}
  local log, lines = recorder()
  local h = { name = name, log = log, lines = lines, writes = 0, dry_run = o.dry_run, scripts = {} }
  local function exec(self, cmd)
    self.scripts[#self.scripts + 1] = cmd
    local errf = os.tmpname()
    local p = assert(io.popen("sh -c " .. util.quote(cmd) .. " 2>" .. util.quote(errf)))
    local out = p:read("a")
    local _, _, code = p:close()
    local err = read(errf) or ""
    os.remove(errf)
    return out, err, code
  end
  h.probe = exec
  function h.run(self, cmd, opts)
    if self.dry_run then error(self.name .. ": dry run: refused to run", 0) end
    self.writes = self.writes + 1
    if o.fail_run then return nil, self.name .. ": exec: connection cut", "closed" end
    return exec(self, cmd, opts)
  end
  return h
end

-- Inside the loop: waits until fn() is true or `timeout` seconds have passed (the fake host
-- runs its scripts by a blocking popen, so on a loaded machine beats come late).
local function eventually(fn, timeout)
  local deadline = loop.now() + (timeout or 5)
  while not fn() and loop.now() < deadline do loop.sleep(0.02) end
  return fn()
end

-- Runs fn inside the loop, as every command does; raises its error.
local function run(fn)
  local ok, a, b, c = loop.run(fn)
  if not ok then error(a, 0) end
  return a, b, c
end

local INFO = { holder = "ops@console", pid = 4242, version = "1.2.3", command = "apply lab.yaml", run_id = "run-a" }
local OTHER = { holder = "dev@laptop", pid = 77, version = "1.2.3", command = "apply other.yaml", run_id = "run-b" }

describe("lock", function()
  local dir, base, path
  before_each(function()
    dir = temp_dir()
    base = dir .. "/cargoship"
    path = base .. "/lock"
  end)
  after_each(function()
    os.execute("rm -rf " .. util.quote(dir))
  end)

  local function opts(over)
    local o = { dirs = { dir }, heartbeat = false }
    for k, v in pairs(over or {}) do o[k] = v end
    return o
  end

  -- The acquire script a host would get for info, as a shell would run it there. A stale
  -- window of 8 s: a racing taker that stalls past a short one on a loaded machine (3 s did)
  -- meets a lock judged anew, which is what these specs do not mean to test.
  local function script_of(info)
    local cap = { name = "h1", log = recorder() }
    function cap.run(_, cmd) cap.cmd = cmd return "", "", 1 end
    run(function() lock.acquire(cap, info, opts { stale_after = 8 }) end)
    return cap.cmd
  end

  local function record()
    local r = {}
    for k, v in (read(path .. "/holder") or ""):gmatch("([%w_]+)=([^\n]*)") do r[k] = v end
    return r
  end

  it("records the command that takes the lock, and refuses to take one naming none", function()
    local h = fake_host("h1")
    local info = { holder = "ops@console", pid = 1, command = "reset lab.yaml", run_id = "run-r" }
    local handle = run(function() return assert(lock.acquire(h, info, opts())) end)
    assert.are.equal("reset lab.yaml", record().command)
    local st = run(function() return assert(lock.read(h, opts())) end)
    assert.matches("`reset lab.yaml`", lock.describe(st.record, st.age, st.now, st.owner), 1, true)
    run(function() assert(handle:release()) end)
    local ok, err = pcall(run, function() return lock.acquire(h, { holder = "ops@console", run_id = "x" }, opts()) end)
    assert.is_false(ok)
    assert.matches("info.command must name the command", tostring(err), 1, true)
    assert.is_false(exists(path))
  end)

  it("takes a free lock atomically and writes the holder record", function()
    local h = fake_host("h1")
    local handle = run(function() return assert(lock.acquire(h, INFO, opts())) end)
    assert.are.equal(path, handle.path)
    local r = record()
    assert.are.equal("ops@console", r.holder)
    assert.are.equal("4242", r.pid)
    assert.are.equal("1.2.3", r.version)
    assert.are.equal("apply lab.yaml", r.command)
    assert.are.equal("run-a", r.run_id)
    assert.are.equal(handle.token, r.token)
    assert.matches("^run%-a%.%x+$", handle.token)
    -- started is the host's clock, not ours
    assert.is_true(math.abs(tonumber(r.started) - os.time()) < 5)
    assert.is_nil(handle.took_over)
  end)

  it("fails a second acquire at once with 'locked', naming the holder and its last heartbeat", function()
    local a, b = fake_host("h1"), fake_host("h1")
    local _, err, code = run(function()
      assert(lock.acquire(a, INFO, opts()))
      age(path, 20)
      return lock.acquire(b, OTHER, opts())
    end)
    assert.are.equal("locked", code)
    assert.matches("h1: another cargoship holds the lock at " .. path:gsub("%p", "%%%0"), err)
    assert.matches("ops@console (pid 4242, cargoship 1.2.3, `apply lab.yaml`)", err, 1, true)
    assert.matches("last heartbeat 2%d s ago", err)
    assert.matches("cargoship unlock", err, 1, true)
    -- who the file system says made it, beside what the record claims
    assert.matches("lock directory owned by " .. ME_NAME .. " (uid " .. ME .. ")", err, 1, true)
    assert.are.equal("run-a", record().run_id)
  end)

  -- phase 7's rule (acquire_lock.lua): a lock whose run is still taking its hosts is waited
  -- for (opts.wait); a firm one, and one of the same run, never
  it("waits up to opts.wait for a lock not firm yet, fails 'taking' after it, and never waits on a firm one",
    function()
    local a, b = fake_host("h1"), fake_host("h1")
    run(function()
      local held = assert(lock.acquire(a, INFO, opts()))
      -- not firm: 'taking' after the wait
      local t0 = loop.now()
      local h, err, code = lock.acquire(b, OTHER, opts { wait = 0.3 })
      assert.is_nil(h)
      assert.are.equal("taking", code)
      assert.is_true(loop.now() - t0 >= 0.3)
      assert.matches("h1: another cargoship is still taking its locks, this host's at " .. path:gsub("%p", "%%%0"),
        err)
      assert.matches("ops@console (pid 4242", err, 1, true)
      -- without opts.wait, as before: 'locked'
      assert.are.equal("locked", select(3, lock.acquire(b, OTHER, opts())))
      -- the same run's own lock is never waited for
      assert.are.equal("locked", select(3, lock.acquire(b, INFO, opts { wait = 5 })))
      -- the holder lets go while b waits: b takes it
      loop.spawn(function()
        loop.sleep(0.2)
        assert(held:release())
      end)
      local mine = assert(lock.acquire(b, OTHER, opts { wait = 5 }))
      -- firm: a taker fails at once, whatever its wait
      assert.is_true(mine:firm())
      assert.is_true(exists(path .. "/firm." .. mine.token))
      t0 = loop.now()
      h, err, code = lock.acquire(a, INFO, opts { wait = 5 })
      assert.is_nil(h)
      assert.are.equal("locked", code)
      assert.is_true(loop.now() - t0 < 3)
      assert.matches("another cargoship holds the lock", err, 1, true)
      assert.is_true(mine:release())
      assert.is_false(exists(path))
    end)
  end)

  -- a run killed with -9 leaves its lock until the stale window ends: "free once that run
  -- ends" is then about a process that is gone
  it("says a holder of this machine whose process is gone is gone, and when it stales", function()
    local a, b = fake_host("h1"), fake_host("h1")
    local me = lock.me()
    assert.matches("^%x+%-[%x-]+$", me.boot_id)
    assert.are.equal(lock.proc_start(util.getpid()), me.pid_start)
    local function set(field, value)
      assert(os.execute(string.format("sed -i 's/^%s=.*/%s=%s/' %s", field, field, value,
        util.quote(path .. "/holder"))))
    end
    local function meet()
      local _, err, code = run(function() return lock.acquire(b, OTHER, opts()) end)
      assert.are.equal("locked", code)
      return err
    end
    run(function() assert(lock.acquire(a, { command = "apply lab.yaml", run_id = "run-a" }, opts())) end)
    local r = record()
    assert.are.same({ tostring(util.getpid()), me.boot_id, me.init_start, me.pid_start },
      { r.pid, r.boot_id, r.init_start, r.pid_start })
    age(path, 20)
    -- running: the usual message
    local err = meet()
    assert.matches("h1: another cargoship holds the lock at .*; it is free once that run ends", err)
    assert.are.equal("", lock.gone_note(record()))
    -- gone: its pid names no process any more
    local dead = tonumber((sh("sh -c 'echo $$'")))
    set("pid", dead)
    age(path, 20)
    err = meet()
    assert.matches("h1: the lock at " .. path .. " is held by a run that is gone (pid " .. dead .. ", killed?): "
      .. r.holder .. " (pid " .. dead .. ", ", err, 1, true)
    -- the age and what is left of the window add up to it, however long a loaded machine took
    -- between age() and the read (CI-like, load 12: 23 s ago, 38 s more)
    local ago, more = err:match("last heartbeat (%d+) s ago, .*; stale after (%d+) s more, or `cargoship unlock "
      .. "CLUSTER` breaks it now$")
    assert.is_truthy(ago, err)
    assert.is_true(tonumber(ago) >= 20 and tonumber(ago) + tonumber(more) - 60 <= 1
      and tonumber(ago) + tonumber(more) >= 60, err)
    assert.is_nil(err:find("free once that run ends", 1, true))
    assert.matches("that run is gone (pid " .. dead .. ", killed?)", lock.gone_note(record()), 1, true)
    -- reused: the pid runs, but a program that started later than the holder did
    set("pid", util.getpid())
    set("pid_start", "1")
    err = meet()
    assert.matches("is held by a run that is gone (pid " .. util.getpid() .. " is another program now, killed?)",
      err, 1, true)
    -- another boot (or machine, or user): nothing is claimed
    set("pid", dead)
    set("boot_id", "00000000-0000-0000-0000-000000000000")
    assert.matches("another cargoship holds the lock at", meet(), 1, true)
    set("boot_id", me.boot_id)
    set("holder", "someone@elsewhere")
    assert.matches("another cargoship holds the lock at", meet(), 1, true)
    -- a record of another machine, or of a build that wrote no boot id, the same
    assert.is_nil(lock.holder_gone({ holder = r.holder, pid = tostring(dead) }))
    assert.are.equal("gone", lock.holder_gone({ holder = r.holder, pid = tostring(dead), boot_id = me.boot_id,
      init_start = me.init_start }))
  end)

  it("takes over a lock stale by the host's clock, warning with the old holder's name", function()
    local a, b = fake_host("h1"), fake_host("h1")
    local old, new = run(function()
      -- an 8 s window: a loaded machine may take seconds between age() and the taker's read
      local x = assert(lock.acquire(a, INFO, opts { stale_after = 8 }))
      age(path, 2)
      assert.are.equal("locked", select(3, lock.acquire(b, OTHER, opts { stale_after = 8 })))
      age(path, 20)
      return x, assert(lock.acquire(b, OTHER, opts { stale_after = 8 }))
    end)
    assert.are.equal("run-b", record().run_id)
    assert.are.equal(new.token, record().token)
    assert.are.equal("ops@console", new.took_over.holder)
    assert.are.equal(1, #b.lines.warn)
    assert.matches("took over a stale lock at .* from ops@console %(pid 4242.*last heartbeat 2%d s ago",
      b.lines.warn[1])
    -- the old holder finds out at its next heartbeat, and cannot release the new lock
    local lost
    old.on_lost = function(msg) lost = msg end
    local ok, err, code = run(function() return old:heartbeat() end)
    assert.is_nil(ok)
    assert.are.equal("lost", code)
    assert.matches("taken over by dev@laptop", err, 1, true)
    assert.are.equal(err, lost)
    assert.are.equal(err, old.lost)
    assert.is_nil((run(function() return old:release() end)))
    assert.are.equal(new.token, record().token)
    -- the tombstone of the stale lock outlives the takeover, and goes with the new lock
    assert.is_true(exists(base .. "/old." .. old.token))
    assert.is_true((run(function() return new:release() end)))
    assert.are.equal("", (sh("ls -A " .. util.quote(base))))
  end)

  it("removes the lock on release only while the token matches, and release is idempotent", function()
    local a, b = fake_host("h1"), fake_host("h1")
    run(function()
      local x = assert(lock.acquire(a, INFO, opts()))
      -- someone rewrote the record: a different token, so release must leave it
      local text = read(path .. "/holder"):gsub("token=[^\n]*", "token=someone-else")
      local f = assert(io.open(path .. "/holder", "wb"))
      f:write(text)
      f:close()
      local ok, err, code = x:release()
      assert.is_nil(ok)
      assert.are.equal("lost", code)
      assert.matches("not by this run; left it alone", err, 1, true)
      assert.is_true(exists(path))
      os.execute("rm -rf " .. util.quote(path))
      local y = assert(lock.acquire(b, OTHER, opts()))
      assert.is_true(y:release())
      assert.is_false(exists(path))
      local writes = b.writes
      assert.is_true(y:release())
      assert.are.equal(writes, b.writes, "a second release does not go to the host")
    end)
    assert.are.equal("", (sh("ls -A " .. util.quote(base))), "release leaves nothing behind")
  end)

  it("touches the lock on heartbeat and flags a lock that vanished as lost", function()
    local h = fake_host("h1")
    run(function()
      local x = assert(lock.acquire(h, INFO, opts()))
      age(path, 30)
      assert.is_true(x:heartbeat())
      assert.is_true(os.time() - mtime(path) < 5)
      os.execute("rm -rf " .. util.quote(path))
      local lost
      x.on_lost = function(msg) lost = msg end
      local ok, err, code = x:heartbeat()
      assert.is_nil(ok)
      assert.are.equal("lost", code)
      assert.matches("it is gone", err, 1, true)
      assert.are.equal(err, lost)
      -- reported by the callback's owner, not logged a second time by the lock
      assert.are.equal(0, #h.lines.error)
    end)
  end)

  it("beats, firms and releases with touch, mv and rm alone while the lock is ours, and takes the full way "
    .. "for a record that is not real", function()
    -- a PATH holding only touch, mv and rm: the prelude's id, stat, head, sed, tr and date are
    -- not found, so a beat, a firm and a release that succeed took the fast path (at most two
    -- processes on the host, not a dozen: at 1,000 hosts each goes to every host at once)
    local bin = dir .. "/bin"
    assert(os.execute("mkdir " .. util.quote(bin) .. " && for t in touch mv rm; do ln -s \"$(command -v $t)\" "
      .. util.quote(bin) .. "; done"))
    local h = fake_host("h1")
    local run_full = h.run
    local lean = false
    function h.run(self, cmd, o)
      return run_full(self, (lean and ("PATH=" .. util.quote(bin) .. "\n") or "") .. cmd, o)
    end
    run(function()
      local x = assert(lock.acquire(h, INFO, opts()))
      local before = read(path .. "/holder")
      age(path, 30)
      lean = true
      assert.is_true(x:heartbeat())
      assert.is_true(os.time() - mtime(path) < 5)
      assert.are.equal(before, read(path .. "/holder"))
      assert.is_true(x:firm())
      assert.is_true(exists(path .. "/firm." .. x.token))
      assert.is_true(x:release())
      assert.is_false(exists(path))
      assert.are.equal("", (sh("ls -A " .. util.quote(base))), "no tombstone left")
      lean = false
      x = assert(lock.acquire(h, INFO, opts()))
      before = read(path .. "/holder")
      -- a record that is a symbolic link to a file bearing our token is not ours to believe:
      -- the full script reads no record through it, so the lock counts as taken by another
      lean = false
      write(dir .. "/copy", before)
      assert(os.execute("mv " .. util.quote(path .. "/holder") .. " " .. util.quote(dir .. "/orig") .. " && ln -s "
        .. util.quote(dir .. "/copy") .. " " .. util.quote(path .. "/holder")))
      age(path, 30)
      local ok, err, code = x:heartbeat()
      assert.is_nil(ok)
      assert.are.equal("lost", code, err)
      assert.is_true(os.time() - mtime(path) >= 29, "not touched")
      -- nor released: the run that lost it leaves it to its holder
      ok, err, code = x:release()
      assert.is_nil(ok)
      assert.are.equal("lost", code, err)
      assert.is_true(exists(path .. "/holder"))
    end)
  end)

  it("keeps the lock fresh from a loop task while the caller does other work", function()
    local h = fake_host("h1")
    run(function()
      local x = assert(lock.acquire(h, INFO, opts { heartbeat = true, interval = 0.1, stale_after = 3 }))
      age(path, 100)
      eventually(function() return x.beats >= 2 end)
      assert.is_true(x.beats >= 2, "beats: " .. x.beats)
      assert.is_true(os.time() - mtime(path) < 5)
      assert.is_true(x:release())
      -- the heartbeat task ends at its next turn, or the one after when its timer had already
      -- queued it (seen once beside a loaded machine's lab specs: "ready" after one turn)
      eventually(function() return x.task:status() == "done" end, 2)
      assert.are.equal("done", x.task:status())
      assert.is_false(exists(path))
    end)
  end)

  it("stops the run on the host when the heartbeat finds the lock stolen", function()
    local a, b = fake_host("h1"), fake_host("h1")
    local lost = {}
    run(function()
      local x = assert(lock.acquire(a, INFO, opts {
        -- a window far above the beat: "no heartbeat got through" must not come first on a
        -- loaded machine (a local sh per beat took over 3 s at load 12)
        heartbeat = true, interval = 0.1, stale_after = 30,
        on_lost = function(msg) lost[#lost + 1] = msg end,
      }))
      os.execute("rm -rf " .. util.quote(path))
      local y = assert(lock.acquire(b, OTHER, opts()))
      eventually(function() return #lost > 0 end)
      loop.sleep(0.2)
      assert.are.equal(1, #lost)
      assert.matches("taken over by dev@laptop", lost[1], 1, true)
      assert.are.equal(lost[1], x.lost)
      assert.are.equal("done", x.task:status())
      assert.is_true(exists(path), "the thief's lock stays")
      assert.is_true(y:release())
    end)
  end)

  it("declares the lock lost when the host stays unreachable until the loss deadline", function()
    local h = fake_host("h1")
    local lost
    run(function()
      local x = assert(lock.acquire(h, INFO, opts {
        heartbeat = true, interval = 0.1, stale_after = 3, on_lost = function(msg) lost = msg end,
      }))
      h.run = function() return nil, "h1: exec: connection cut", "closed" end
      eventually(function() return x.lost end)
      assert.matches("no heartbeat got through for", x.lost, 1, true)
      assert.matches("connection cut", lost, 1, true)
      assert.is_true(#h.lines.warn >= 1)
    end)
  end)

  it("releases from the heartbeat task's destructor when the run is cancelled or ends", function()
    local h = fake_host("h1")
    -- the task that acquired ends at once (as a per-host task does); the lock must outlive it
    local ok = loop.run(function()
      local t = loop.spawn(function()
        return assert(lock.acquire(h, INFO, opts { heartbeat = true, interval = 0.1 }))
      end)
      local _, x = t:join()
      loop.sleep(0.15)
      assert.is_true(exists(path))
      assert.is_false(x.released)
      -- the main task ends without releasing: the loop cancels the heartbeat, whose destructor releases
    end)
    assert.is_true(ok)
    assert.is_false(exists(path))
  end)

  it("releases once when the destructor and a release call race", function()
    local h = fake_host("h1")
    run(function()
      local x = assert(lock.acquire(h, INFO, opts { heartbeat = true, interval = 20 }))
      local t = loop.spawn(function() return x:release() end)
      x.task:cancel()
      assert.is_true(x:release())
      assert.is_true(select(2, t:join()))
    end)
    assert.is_false(exists(path))
  end)

  it("lets exactly one of many concurrent takers win, for a free and for a stale lock", function()
    -- the scripts as the hosts would get them (script_of), run as parallel shells
    local files = {}
    -- every acquisition has its own token, so every race gets fresh scripts
    local function race()
      for i = 1, 6 do
        files[i] = dir .. "/s" .. i .. ".sh"
        local f = assert(io.open(files[i], "wb"))
        f:write(script_of { holder = "taker" .. i, command = "apply lab.yaml", run_id = "r" .. i })
        f:close()
      end
      local cmd = {}
      for i = 1, 6 do cmd[i] = "sh " .. util.quote(files[i]) .. " >" .. util.quote(files[i] .. ".out") .. " &" end
      assert(os.execute(table.concat(cmd, " ") .. " wait"))
      local won = 0
      for i = 1, 6 do
        local status = (read(files[i] .. ".out") or ""):match("status=([%w_]+)")
        if status == "acquired" or status == "took_over" then won = won + 1
        else assert.are.equal("locked", status) end
      end
      return won
    end
    for _ = 1, 10 do
      os.execute("rm -rf " .. util.quote(base))
      assert.are.equal(1, race(), "free lock")
      age(path, 30)
      assert.are.equal(1, race(), "stale lock")
    end
  end)

  -- A taker judges a lock stale, then stalls; meanwhile another takes it over and the tombstone
  -- goes (an older build collected tombstones after one stale window). The late taker's rename
  -- found no tombstone in its way and moved the fresh lock aside: two holders.
  it("a taker that stalled after judging a lock stale leaves the lock another took meanwhile", function()
    local function start(name, info, env)
      local f = dir .. "/" .. name .. ".sh"
      write(f, script_of(info))
      os.execute((env or "") .. " sh " .. util.quote(f) .. " >" .. util.quote(f .. ".out") .. " 2>&1 &")
      return f .. ".out"
    end
    local function status(out) return (read(out) or ""):match("status=([%w_]+)") end
    local function wait_for(fn, what)
      for _ = 1, 200 do
        if fn() then return end
        os.execute("sleep 0.05")
      end
      error("timed out waiting for " .. what)
    end
    -- a stale lock
    local first = start("first", INFO)
    wait_for(function() return status(first) end, "the first lock")
    age(path, 30)
    local stale = record().token
    -- the late taker's `date` stalls at its third call (the GC's, the plain take's record, then
    -- the one before its age check): after it read the token and the mtime it judges by
    local bin = dir .. "/bin"
    os.execute("mkdir -p " .. util.quote(bin))
    write(bin .. "/date", "#!/bin/sh\nn=$(cat " .. bin .. "/n 2>/dev/null || echo 0); n=$((n + 1)); echo $n >"
      .. bin .. "/n\n[ $n -eq 3 ] && { touch " .. bin .. "/stalled; while [ ! -e " .. bin .. "/go ]; do sleep 0.05;"
      .. " done; }\nexec /bin/date \"$@\"\n")
    os.execute("chmod 755 " .. util.quote(bin .. "/date"))
    local late = start("late", OTHER, "PATH=" .. util.quote(bin) .. ":$PATH")
    wait_for(function() return exists(bin .. "/stalled") end, "the late taker to stall")
    -- meanwhile another takes the stale lock over, and its tombstone goes
    local quick = start("quick", { holder = "quick@box", pid = 9, command = "apply lab.yaml", run_id = "run-q" })
    wait_for(function() return status(quick) end, "the quick taker")
    assert.are.equal("took_over", status(quick), read(quick))
    local fresh = record().token
    assert.are_not.equal(stale, fresh)
    os.execute("rm -rf " .. util.quote(base .. "/old." .. stale))
    write(bin .. "/go", "")
    wait_for(function() return status(late) end, "the late taker")
    assert.are.equal("locked", status(late), read(late))
    assert.are.equal(fresh, record().token, "the quick taker's lock is where it was")
  end)

  it("removes, when its task ends, a lock an acquire that got no answer may have taken", function()
    local h = fake_host("h1")
    local real = h.run
    -- the script runs on the host, but the answer never comes back
    h.run = function(self, cmd, o)
      h.run = real
      real(self, cmd, o)
      return nil, "h1: exec: timed out", "timeout"
    end
    run(function()
      local t = loop.spawn(function() return lock.acquire(h, INFO, opts()) end)
      local _, x, err, code = t:join()
      assert.is_nil(x)
      assert.are.equal("timeout", code, err)
      assert.is_false(exists(path), "released by the task's destructor")
      -- another run's lock is not ours to remove, however the acquire ended
      assert(lock.acquire(fake_host("h1"), OTHER, opts()))
      local released = 0
      h.run = function(self, cmd, o)
        if cmd:find("cs_take", 1, true) then return nil, "h1: exec: connection cut", "closed" end
        released = released + 1
        return real(self, cmd, o)
      end
      t = loop.spawn(function() return lock.acquire(h, INFO, opts()) end)
      t:join()
      assert.are.equal(1, released, "the release was tried")
      assert.are.equal("run-b", record().run_id)
    end)
  end)

  it("falls back to the next directory when /run is absent", function()
    local h = fake_host("h1")
    local x = run(function()
      return assert(lock.acquire(h, INFO, opts { dirs = { dir .. "/no-such-dir", dir } }))
    end)
    assert.are.equal(path, x.path)
    local _, err, code = run(function()
      return lock.acquire(h, INFO, opts { dirs = { dir .. "/none" } })
    end)
    assert.are.equal("exit", code)
    assert.matches("no directory to keep the lock in", err, 1, true)
  end)

  it("keeps hostile values in the record one line each, and out of the shell", function()
    local h = fake_host("h1")
    run(function()
      assert(lock.acquire(h, { holder = "x'; touch " .. dir .. "/pwned; '", command = "apply\nevil=1 $(id)",
        run_id = "r/../../x" }, opts()))
    end)
    assert.is_false(exists(dir .. "/pwned"))
    local r = record()
    assert.are.equal("apply evil=1 $(id)", r.command)
    assert.is_nil(r.evil)
    assert.matches("^r_.._.._x%.", r.token)
  end)

  it("reads the lock without writing, and breaks only the lock that was shown", function()
    local a, b = fake_host("h1"), fake_host("h1")
    run(function()
      local st = assert(lock.read(a, { dirs = { dir } }))
      assert.is_false(st.held)
      assert.are.equal(path, st.path)
      assert(lock.acquire(a, INFO, opts()))
      age(path, 7)
      st = assert(lock.read(b, { dirs = { dir } }))
      assert.are.equal(0, b.writes)
      assert.is_true(st.held)
      assert.are.equal("ops@console", st.record.holder)
      assert.is_true(st.age == 7 or st.age == 8, "age " .. tostring(st.age))
      -- a run took over between showing and breaking: leave the new holder alone
      os.execute("rm -rf " .. util.quote(path))
      assert(lock.acquire(b, OTHER, opts()))
      local ok, err, code = lock.break_lock(a, { path = st.path, token = st.token })
      assert.is_nil(ok)
      assert.are.equal("changed", code)
      assert.matches("now held by dev@laptop", err, 1, true)
      assert.is_true(exists(path))
      st = assert(lock.read(b, { dirs = { dir } }))
      assert.are.same({ true, "broken" }, { lock.break_lock(a, { path = st.path, token = st.token }) })
      assert.is_false(exists(path))
      assert.are.same({ true, "gone" }, { lock.break_lock(a, { path = st.path, token = st.token }) })
    end)
  end)

  it("keeps the lock in a directory it makes itself, mode 700, under a parent only its owner can write", function()
    local h = fake_host("h1")
    run(function() assert(lock.acquire(h, INFO, opts())) end)
    assert.are.equal("700 " .. ME .. " directory", stat(base, "%a %u %F"))
    assert.are.equal("600 " .. ME, stat(path .. "/holder", "%a %u"))
    -- like /tmp, or /run/lock on Debian (1777): anyone could plant the lock there first
    for _, mode in ipairs { "1777", "0777", "0775" } do
      local ww = dir .. "/ww" .. mode
      assert(os.execute("mkdir -m " .. mode .. " " .. util.quote(ww)))
      local x, err, code = run(function() return lock.acquire(h, INFO, opts { dirs = { ww } }) end)
      assert.is_nil(x)
      assert.are.equal("unsafe", code)
      assert.matches("h1: lock: refusing " .. ww .. ": it can be written by others (owner " .. ME_NAME
        .. " (uid " .. ME .. "), mode " .. mode:gsub("^0", "") .. ")", err, 1, true)
      assert.are.equal("", (sh("ls -A " .. util.quote(ww))), "nothing made in " .. ww)
    end
    -- a sticky world-writable directory further up (the spec's own /tmp) is fine: nobody
    -- else can move what is in it
    assert.matches("^/tmp/", dir)
  end)

  it("refuses a planted lock directory, naming its real owner, and believes no record in it", function()
    local h = fake_host("h1")
    -- a symlink where the private directory goes: never followed, nothing made where it points
    local elsewhere = dir .. "/elsewhere"
    assert(os.execute("mkdir " .. util.quote(elsewhere) .. " && ln -s " .. util.quote(elsewhere) .. " "
      .. util.quote(base)))
    local x, err, code = run(function() return lock.acquire(h, INFO, opts()) end)
    assert.is_nil(x)
    assert.are.equal("unsafe", code)
    assert.matches("refusing " .. base .. ": it is a symbolic link", err, 1, true)
    assert.are.equal("", (sh("ls -A " .. util.quote(elsewhere))))
    os.remove(base)
    -- a directory of the right name but not private (someone made it, or widened it)
    assert(os.execute("mkdir -m 755 " .. util.quote(base)))
    x, err, code = run(function() return lock.acquire(h, INFO, opts()) end)
    assert.is_nil(x)
    assert.are.equal("unsafe", code, err)
    assert.matches("refusing " .. base .. ": it is not private (mode 700) (owner " .. ME_NAME, err, 1, true)
    assert.is_false(exists(path))
    os.execute("rm -rf " .. util.quote(base))
    if not AS_ROOT then
      pending("a lock directory owned by another user: needs root to chown (ran as uid " .. ME .. ")")
      return
    end
    -- another user's directory with a fresh lock claiming root: a spoof, shown with its real owner
    assert(os.execute("mkdir -m 700 " .. util.quote(base) .. " " .. util.quote(path)))
    write(path .. "/holder", "holder=root@ops\npid=1\ntoken=spoof.1\nstarted=" .. os.time() .. "\n")
    assert(os.execute("chown -R 1000:1000 " .. util.quote(base)))
    local before = read(path .. "/holder")
    x, err, code = run(function() return lock.acquire(h, INFO, opts()) end)
    assert.is_nil(x)
    assert.are.equal("unsafe", code)
    assert.matches("(uid 1000)", err, 1, true)
    assert.matches("refusing " .. base .. ": it does not belong to uid 0 (owner ", err, 1, true)
    assert.is_nil(err:find("root@ops", 1, true), "the planted record is not shown as the holder: " .. err)
    local st = run(function() return assert(lock.read(h, { dirs = { dir } })) end)
    assert.is_false(st.held)
    assert.matches("(uid 1000)", st.owner, 1, true)
    assert.matches("(uid 1000)", st.unsafe, 1, true)
    assert.are.same({ nil, "unsafe" }, { (run(function()
      return lock.break_lock(h, { path = path, token = "spoof.1" })
    end)), select(3, run(function() return lock.break_lock(h, { path = path, token = "spoof.1" }) end)) })
    assert.are.equal(before, read(path .. "/holder"), "left as it was")
    -- the lock inside a private directory, but another user's: refused the same way
    assert(os.execute("chown 0:0 " .. util.quote(base)))
    x, err, code = run(function() return lock.acquire(h, INFO, opts()) end)
    assert.is_nil(x)
    assert.are.equal("unsafe", code)
    assert.matches("refusing " .. path .. ": it does not belong to uid 0", err, 1, true)
  end)

  it("takes over a stale lock without writing through what was planted in it, or hanging on a FIFO", function()
    local h = fake_host("h1")
    local target = dir .. "/precious"
    write(target, "keep me\n")
    local before = stat(target, "%s %Y") .. read(target)
    run(function() assert(lock.acquire(fake_host("h1"), OTHER, opts { stale_after = 3 })) end)
    -- what a takeover might touch: the record, a marker, the tombstone's name
    os.remove(path .. "/holder")
    assert(os.execute("ln -s " .. util.quote(target) .. " " .. util.quote(path .. "/holder")
      .. " && ln -s " .. util.quote(target) .. " " .. util.quote(path .. "/gone")
      .. " && mkfifo " .. util.quote(path .. "/fifo")))
    age(path, 10)
    local t0 = util.now()
    local x = run(function() return assert(lock.acquire(h, INFO, opts { stale_after = 3 })) end)
    assert.is_true(util.now() - t0 < 5)
    assert.is_truthy(x.took_over)
    assert.is_nil(x.took_over.holder, "a record behind a symlink is not read")
    assert.are.equal(before, stat(target, "%s %Y") .. read(target))
    assert.are.equal("run-a", record().run_id)
    -- a FIFO where the record goes is not read either (a read would wait for a writer forever)
    run(function() assert(x:release()) end)
    run(function() assert(lock.acquire(fake_host("h1"), OTHER, opts { stale_after = 3 })) end)
    os.remove(path .. "/holder")
    assert(os.execute("mkfifo " .. util.quote(path .. "/holder")))
    age(path, 10)
    t0 = util.now()
    x = run(function() return assert(lock.acquire(h, INFO, opts { stale_after = 3 })) end)
    assert.is_true(util.now() - t0 < 5)
    assert.is_truthy(x.took_over)
    -- a lock that is itself a symlink is refused, and what it names stays as it was
    run(function() assert(x:release()) end)
    assert(os.execute("ln -s " .. util.quote(target) .. " " .. util.quote(path)))
    local _, err, code = run(function() return lock.acquire(h, INFO, opts { stale_after = 3 }) end)
    assert.are.equal("unsafe", code)
    assert.matches("refusing " .. path .. ": it is a symbolic link", err, 1, true)
    assert.are.equal(before, stat(target, "%s %Y") .. read(target))
  end)

  it("lets no taker with a shorter stale window cut short the window the holder wrote in its record", function()
    local a, b = fake_host("h1"), fake_host("h1")
    run(function() assert(lock.acquire(a, INFO, opts { stale_after = 10 })) end)
    assert.are.equal("10", record().stale_after)
    age(path, 6)
    local _, err, code = run(function() return lock.acquire(b, OTHER, opts { stale_after = 3 }) end)
    assert.are.equal("locked", code)
    assert.matches("or 10 s after its last heartbeat", err, 1, true)
    age(path, 12)
    local x = run(function() return assert(lock.acquire(b, OTHER, opts { stale_after = 3 })) end)
    assert.are.equal("ops@console", x.took_over.holder)
    -- and a longer taker's own window still counts
    age(path, 6)
    _, _, code = run(function() return lock.acquire(a, INFO, opts { stale_after = 8 }) end)
    assert.are.equal("locked", code)
  end)

  describe("timing", function()
    it("derives the loss deadline, retry and margin from the stale window", function()
      assert.are.same({ interval = 15, retry = 5, lost_after = 45, stale_after = 60, margin = 15, beat_timeout = 10 },
        lock.timings())
      assert.are.same({ interval = 1, retry = 1 / 3, lost_after = 2, stale_after = 3, margin = 1, beat_timeout = 10 },
        lock.timings { interval = 1, stale_after = 3 })
      -- the margin is a quarter of the window, never under a second
      assert.are.equal(1, lock.timings({ stale_after = 2 }).margin)
      assert.are.equal(30, lock.timings({ stale_after = 120 }).margin)
      -- the default interval leaves room for two retries before the deadline
      assert.are.equal(15, lock.timings({ stale_after = 120 }).interval)
      assert.are.equal(3, lock.timings({ stale_after = 12 }).interval)
    end)

    it("keeps the holder's deadline a margin short of any takeover, for every window", function()
      for s = 2, 600 do
        local t = assert(lock.timings { stale_after = s })
        assert.is_true(t.margin >= 1 and t.margin >= s / 4, s)
        assert.are.equal(s, t.lost_after + t.margin, s)
        assert.is_true(t.interval <= t.lost_after / 2, s)
        assert.is_true(t.retry < t.interval, s)
      end
    end)

    it("refuses timings that would break the invariant", function()
      assert.is_nil(lock.timings { stale_after = 1 })
      assert.is_nil(lock.timings { stale_after = 2.5 })
      assert.is_nil(lock.timings { stale_after = 60, interval = 23 })
      assert.is_nil(lock.timings { stale_after = 60, interval = 0 })
      assert.is_nil(lock.timings { stale_after = 60, margin = 60 })
      assert.is_truthy(lock.timings { stale_after = 60, interval = 22.5 })
      assert.has_error(function()
        run(function() return lock.acquire(fake_host("h1"), INFO, opts { stale_after = 60, interval = 40 }) end)
      end)
      assert.is_false(exists(path), "nothing was sent")
    end)

    it("counts the lock lost at its deadline without waiting for the beat in flight", function()
      local h = fake_host("h1")
      local lost_at, calls = nil, 0
      run(function()
        local x
        x = assert(lock.acquire(h, INFO, opts {
          heartbeat = true, interval = 0.5, stale_after = 3,
          on_lost = function(msg, handle)
            calls = calls + 1
            assert.are.equal(x, handle)
            lost_at = loop.now()
            assert.matches("no heartbeat got through", msg, 1, true)
          end,
        }))
        loop.sleep(0.75)
        assert.are.equal(1, x.beats)
        local good = x.last_ok
        -- a stalled session: the command is sent and never answers
        h.run = function() loop.sleep(60) end
        loop.sleep(2.2)
        assert.are.equal(1, calls)
        -- the deadline: 2 s (3 s window less 1 s margin) after the good beat was sent
        assert.is_true(lost_at - good >= 2 - 0.05 and lost_at - good <= 2 + 0.3, "lost after " .. (lost_at - good))
        assert.matches("the heartbeat in flight had no answer", x.lost, 1, true)
        assert.are.equal("unreachable", x.lost_kind)
        loop.sleep(0.1)
        assert.are.equal("done", x.task:status())
      end)
    end)

    it("retries a failed beat sooner than a full interval, until the deadline", function()
      local h = fake_host("h1")
      local times = {}
      run(function()
        local x = assert(lock.acquire(h, INFO, opts { heartbeat = true, interval = 0.6, stale_after = 4 }))
        local good, returned = x.last_ok, loop.now()
        h.run = function()
          times[#times + 1] = loop.now()
          return nil, "h1: exec: connection cut", "closed"
        end
        loop.sleep(3.3)
        assert.is_truthy(x.lost)
        -- first try one interval after the acquire returned, then every retry (0.2 s, well
        -- under the 0.6 s interval), until 3 s after the acquire was sent
        assert.is_true(math.abs(times[1] - returned - 0.6) < 0.15, times[1] - returned)
        for i = 2, #times do
          local gap = times[i] - times[i - 1]
          assert.is_true(gap >= 0.19 and gap < 0.45, "gap " .. gap)
        end
        assert.is_true(#times >= math.floor((good + 3 - times[1]) / 0.25), #times .. " tries")
        assert.is_true(x.lost_at - good >= 3 - 0.05 and x.lost_at - good <= 3 + 0.2, x.lost_at - good)
      end)
    end)
  end)

  it("sends only scripts that shellcheck finds nothing in (POSIX sh)", function()
    local _, code = sh("command -v shellcheck >/dev/null")
    if code ~= 0 then
      pending("shellcheck is not installed")
      return
    end
    local a, b = fake_host("h1"), fake_host("h1")
    run(function()
      local x = assert(lock.acquire(a, INFO, opts { stale_after = 3 }))
      assert(x:heartbeat())
      age(path, 10)
      local y = assert(lock.acquire(b, OTHER, opts { stale_after = 3 }))
      local st = assert(lock.read(b, { dirs = { dir } }))
      assert(lock.break_lock(b, { path = st.path, token = st.token }))
      assert.is_nil(x:release())
      assert.is_nil((y:release()), "broken, so gone")
    end)
    local n = 0
    for _, h in ipairs { a, b } do
      for _, script in ipairs(h.scripts) do
        n = n + 1
        local file = dir .. "/script" .. n .. ".sh"
        write(file, "#!/bin/sh\n" .. script)
        local out, rc = sh("shellcheck -s sh " .. util.quote(file) .. " 2>&1")
        assert.are.equal(0, rc, out)
      end
    end
    assert.is_true(n >= 6, n .. " scripts")
  end)

  it("is refused by a dry-run host: taking a lock is a write", function()
    local h = fake_host("h1", { dry_run = true })
    assert.has_error(function() run(function() return lock.acquire(h, INFO, opts()) end) end,
      "h1: dry run: refused to run")
    assert.is_false(exists(path))
  end)

  it("reads its timings from the environment, refusing nonsense", function()
    local function env(t) return function(k) return t[k] end end
    assert.are.same({}, lock.options_from_env(env {}))
    assert.are.same({ interval = 1, stale_after = 3 },
      lock.options_from_env(env { CARGOSHIP_LOCK_INTERVAL = "1", CARGOSHIP_LOCK_STALE_AFTER = "3" }))
    assert.is_nil(lock.options_from_env(env { CARGOSHIP_LOCK_STALE_AFTER = "soon" }))
    local _, err = lock.options_from_env(env { CARGOSHIP_LOCK_INTERVAL = "90" })
    assert.matches("at most 22.5 s", err, 1, true)
    -- half the loss deadline is the most: 3 s window, 1 s margin, 2 s deadline
    assert.is_nil(lock.options_from_env(env { CARGOSHIP_LOCK_INTERVAL = "1.5", CARGOSHIP_LOCK_STALE_AFTER = "3" }))
    _, err = lock.options_from_env(env { CARGOSHIP_LOCK_STALE_AFTER = "2.5" })
    assert.matches("whole number of seconds", err, 1, true)
  end)
end)

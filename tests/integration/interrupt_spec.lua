-- Integration specs of the real binary stopped mid-run: signals and --timeout leave no command and no lock; dead links.
--
-- Each run is a separate `cargoship` process started from sh; a host's process table is
-- read through a connection of the spec's own afterwards (never the run's).
local cjson = require "cjson"
local loop = require "cargoship.loop"
local util = require "cargoship.util"
local transport = require "cargoship.transport"
local lab = require "integration.lab"

local q = util.quote
local N = 3

local work
local read, write = lab.read, lab.write

local function run(fn)
  local ok, a, b, c = loop.run(fn)
  if not ok then error(a, 0) end
  return a, b, c
end

-- A number no other run uses, so `sleep <n>` names this test's processes alone.
local serial = 0
local function marker()
  serial = serial + 1
  return string.format("%d%03d", 4000 + (util.getpid() % 1000), serial)
end

-- { [i] = count } of processes running exactly `sleep <n>` on hosts 1..N.
local function sleepers(n)
  return run(function()
    local t = transport.new { known_hosts = lab.known_hosts, timeout = 20 }
    local counts = {}
    for i = 1, N do
      local h = lab.host(i)
      local c = assert(t:connect(lab.conn(h), h.name))
      local out = assert(c:exec("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done"
        .. " | grep -c -x " .. q("sleep " .. n .. " ") .. "; true"))
      counts[i] = tonumber(out:match("%d+"))
    end
    t:close_all()
    return counts
  end)
end

local function none()
  local counts = {}
  for i = 1, N do counts[i] = 0 end
  return counts
end

-- Polls until every host runs `sleep <n>` (the run has reached its slow part).
local function wait_sleeping(n, limit)
  local t0 = util.now()
  while util.now() - t0 < (limit or 60) do
    local c = sleepers(n)
    local all = true
    for i = 1, N do all = all and c[i] > 0 end
    if all then return end
    os.execute("sleep 0.5")
  end
  error("sleep " .. n .. " never ran on every host", 2)
end

-- A cluster of the first N lab hosts, plus `phases` (YAML lines under spec.phases).
local function cluster(name, phases)
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: interrupt",
    "spec:", "  config:", "    loadbalancer: h1.lab.internal", "  hosts:" }
  for i, h in ipairs { table.unpack(lab.hosts(), 1, N) } do
    lines[#lines + 1] = string.format("    - role: %s\n      hostname: h%d\n      ssh:\n        address: %s\n"
      .. "        user: root\n        keyPath: %s\n        options: {UserKnownHostsFile: %s}",
      i == 1 and "controller" or "worker", i, h.address, lab.key, lab.known_hosts)
  end
  if phases then
    lines[#lines + 1] = "  phases:"
    for _, l in ipairs(phases) do lines[#lines + 1] = "    " .. l end
  end
  return write(work .. "/" .. name, table.concat(lines, "\n") .. "\n")
end

-- A custom phase that runs `sleep <n>` on every host: read-only (runs in dry runs) or a
-- changing one (runs only in a real apply, once the lock is held).
local function sleep_phase(n, read_only)
  n = tostring(n)
  local path = work .. "/phases/sleep" .. n .. ".lua"
  write(path, table.concat({
    "return {",
    '  id = "sleep_' .. n .. '", title = "Sleep on every host",',
    read_only and '  dry_run = "read_only",' or "",
    '  reads = { "connection" }, creates = {},',
    read_only and "" or '  assess = function() return { "sleep ' .. n .. '" } end,',
    "  run = function(ctx, hosts)",
    "    return ctx:each(hosts, function(host)",
    "      local how = " .. (read_only and "host.probe" or "host.run"),
    '      local out, err = how(host, "sleep ' .. n .. '; echo slept", { sudo = false, timeout = 600 })',
    "      if not out then return nil, err end",
    "      return true",
    "    end)",
    "  end,",
    "}",
  }, "\n"))
  return path
end

-- Starts `cargoship args` in the background; signal (or nothing) once ready() returns;
-- -> exit code, seconds from the signal (or the start) to the exit, stdout, stderr.
local function run_bin(args, ready, signal, env) return lab.run_bin(work, args, ready, signal, env) end

-- The lines of `cargoship unlock` for the cluster: "hN: not locked" when no lock is left.
local function locks(path)
  local _, out = lab.sh(string.format("env HOME=%s %s unlock %s </dev/null", q(work), q(lab.bin), q(path)))
  return out
end

local function assert_unlocked(path)
  local out = locks(path)
  for i = 1, N do assert.matches("h" .. i .. ": not locked", out, 1, true) end
end

setup(function()
  work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. q(work .. "/phases")))
end)

teardown(function()
  os.execute("rm -rf " .. q(work))
end)

describe("cargoship exec stopped", function()
  local path
  setup(function() path = cluster("exec.yaml") end)

  for _, sig in ipairs { "INT", "TERM", "HUP", "QUIT" } do
    it("by SIG" .. sig .. " ends the command on every host and exits 130", function()
      local n = marker()
      local r = run_bin("exec " .. q(path) .. " -- sleep " .. n, function() wait_sleeping(n) end, sig)
      assert.are.equal(130, r.code, r.stdout .. r.stderr)
      assert.is_true(r.secs < 10, "took " .. r.secs .. " s after the signal")
      assert.are.same(none(), sleepers(n))
    end)
  end

  it("by --timeout ends the command on every host, naming the timeout", function()
    local n = marker()
    local r = run_bin("exec --timeout 3 " .. q(path) .. " -- sleep " .. n)
    assert.are.equal(1, r.code, r.stdout .. r.stderr)
    assert.matches("timed out after 3 s; its processes on the host were ended", r.stderr, 1, true)
    assert.matches("3 hosts: 0 ok, 3 failed", r.stderr, 1, true)
    assert.are.same(none(), sleepers(n))
  end)

  it("by SIGINT with --sudo for a non-root login ends root's command too", function()
    local n = marker()
    local p = write(work .. "/exec-tb.yaml", (read(path):gsub("user: root", "user: tb")))
    local r = run_bin("exec --sudo " .. q(p) .. " -- sleep " .. n, function() wait_sleeping(n) end, "INT")
    assert.are.equal(130, r.code, r.stdout .. r.stderr)
    assert.are.same(none(), sleepers(n))
  end)
end)

describe("cargoship exec output into a pipe", function()
  local path
  setup(function() path = cluster("pipe.yaml") end)

  it("comes line by line: a healthy host's lines do not wait for the slowest", function()
    local stamped = os.tmpname()
    local cmd = q("echo first; [ $(hostname) != h3 ] || sleep 6; echo second")
    lab.sh(string.format("env HOME=%s %s exec %s -- %s | while IFS= read -r l; do echo \"$(date +%%s.%%N) $l\"; "
      .. "done > %s", q(work), q(lab.bin), q(path), cmd, stamped))
    local at = {}
    for l in io.lines(stamped) do
      local t, line = l:match("^(%S+) (.*)$")
      at[line] = tonumber(t)
    end
    os.remove(stamped)
    for i = 1, N do
      assert.is_truthy(at["h" .. i .. " | first"], "no first line of h" .. i)
      assert.is_truthy(at["h" .. i .. " | second"], "no second line of h" .. i)
    end
    assert.is_true(at["h3 | second"] - at["h1 | second"] > 4, "h1's lines waited for h3")
  end)

  it("ends every host's command when the reader goes away (EPIPE), exit 1", function()
    local n = marker()
    local rcf = os.tmpname()
    local cmd = q("(while :; do echo x; sleep 0.3; done) & sleep " .. n)
    local t0 = util.now()
    lab.sh(string.format("{ env HOME=%s %s exec %s -- %s 2>/dev/null; echo $? > %s; } | head -n 2 >/dev/null",
      q(work), q(lab.bin), q(path), cmd, rcf))
    local took = util.now() - t0
    local rc = tonumber(read(rcf):match("%d+"))
    os.remove(rcf)
    assert.are.equal(1, rc)
    assert.is_true(took < 20, "took " .. took .. " s")
    assert.are.same(none(), sleepers(n))
  end)

  it("keeps what was printed when cargoship is killed with SIGKILL", function()
    local n = marker()
    local got, pidf = os.tmpname(), os.tmpname()
    local inner = string.format("echo $$ > %s; exec %s exec %s -- %s", pidf, q(lab.bin), q(path),
      q("echo early; sleep " .. n))
    local p = io.popen(string.format("env HOME=%s sh -c %s 2>/dev/null | cat > %s", q(work), q(inner), got))
    wait_sleeping(n)
    os.execute("sleep 1; kill -KILL " .. read(pidf):match("%d+"))
    p:close()
    local text = read(got)
    os.remove(got); os.remove(pidf)
    for i = 1, N do assert.matches("h" .. i .. " | early\n", text, 1, true) end
    -- nothing could end them: SIGKILL leaves no time; clean up by hand
    run(function()
      local t = transport.new { known_hosts = lab.known_hosts, timeout = 20 }
      for i = 1, N do
        local c = assert(t:connect(lab.conn(lab.host(i)), "h" .. i))
        c:exec("pkill -x -f " .. q("sleep " .. n) .. "; true")
      end
      t:close_all()
    end)
  end)
end)

describe("cargoship apply --confirm stopped while it holds the locks", function()
  for _, how in ipairs { "TERM", "INT", "HUP", "timeout" } do
    it((how == "timeout" and "by --timeout" or ("by SIG" .. how))
      .. " ends the phase's commands, then releases every lock", function()
      local n = marker()
      local path = cluster("apply-" .. n .. ".yaml", { "- file: " .. sleep_phase(n, false), "  after: acquire_lock" })
      local r
      if how == "timeout" then
        r = run_bin("apply --confirm --timeout 25s " .. q(path))
        assert.are_not.equal(0, r.code, r.stdout .. r.stderr)
        assert.matches("longer than --timeout", r.stdout .. r.stderr, 1, true)
      else
        r = run_bin("apply --confirm " .. q(path), function() wait_sleeping(n) end, how)
        assert.are.equal(130, r.code, r.stdout .. r.stderr)
        assert.is_true(r.secs < 20, "took " .. r.secs .. " s after the signal")
      end
      assert.are.same(none(), sleepers(n))
      assert_unlocked(path)
    end)
  end
end)

describe("a dry run with one host's link pulled", function()
  it("finishes for the other hosts within a minute, every phase assessed for them, the silent host failed", function()
    local n = 21   -- the healthy hosts' part ends on its own; no other spec sleeps 21 s
    local path = cluster("dry-" .. n .. ".yaml", { "- file: " .. sleep_phase(n, true), "  after: validate_hosts" })
    local r = run_bin("apply --dry-run --output json " .. q(path), function()
      wait_sleeping(n)
      lab.lab("link 2 down")
    end)
    lab.lab("link 2 up")
    assert.is_true(r.secs < 60, "took " .. r.secs .. " s after the link went down")
    assert.are.equal(1, r.code, r.stdout .. r.stderr)
    local doc = cjson.decode(r.stdout)
    assert.are.same({ "failed", false }, { doc.outcome, doc.ok })
    assert.matches("%(Sleep on every host%) failed", doc.error)
    assert.matches("h2[^\n]*no answer from the host for 30 s", r.stderr)
    local at
    for k, p in ipairs(doc.phases) do
      local by = {}
      for _, h in ipairs(p.hosts) do by[h.host] = h end
      if p.id == "sleep_" .. n then
        at = k
        assert.are.equal("failed", p.verdict)
        assert.matches("no answer from the host for 30 s", by.h2.error, 1, true)
        -- the healthy hosts finished their 21 s: not cut short by h2's failure
        for _, name in ipairs { "h1", "h3" } do assert.are.equal(cjson.null, by[name].error, name) end
      elseif at then
        -- after it: h2 left out, h1 and h3 assessed as in any dry run
        assert.is_nil(({ skipped = true, failed = true, interrupted = true })[p.verdict], p.id .. ": " .. p.verdict)
        if by.h2 then
          assert.matches("^failed in phase %d+ %(Sleep on every host%)$", by.h2.not_reached)
          assert.are.same({}, by.h2.actions)
          assert.are.equal(0, by.h2.probes + by.h2.writes, p.id .. ": nothing more was sent to h2")
        end
        for _, name in ipairs { "h1", "h3" } do
          local h = by[name]
          if h then assert.is_true(h.error == cjson.null and h.not_reached == cjson.null, p.id .. " " .. name) end
        end
      else
        assert.are.equal("ran", p.verdict, p.id)
      end
    end
    assert.is_truthy(at, "no sleep phase in the report")
    assert.is_true(at < #doc.phases - 3, "phases after the sleep: " .. (#doc.phases - at))
    assert.are.equal("disconnect", doc.phases[#doc.phases].id)
    assert.are.equal("own", doc.phases[#doc.phases].verdict, "the last phase was reached")
  end)
end)

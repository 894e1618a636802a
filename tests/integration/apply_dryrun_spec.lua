-- Integration spec of the real `cargoship apply --dry-run` and of an unconfirmed apply on 5 lab hosts: nothing written.
--
-- Issue "Done when": on a 5-host lab, `apply --dry-run` prints every phase with its verdict;
-- the JSON plan parses; every host's overlay upper dir is byte-identical before and after.
-- The binary ($CARGOSHIP_BIN) runs as an operator runs it: its own process, stdin not a
-- terminal, the report on stdout, progress on stderr.
--
-- "Wrote nothing" is proven twice per host (tests/integration/lab.lua):
--   upper_tree  the overlay upper dir (every write to the host's disk): each entry's type,
--               mode, owner, mtime, sha256 (files) and target (symlinks), so deletions
--               (whiteouts), new empty dirs and chmods count as writes too;
--   tmpfs_tree  /run, /tmp and /dev/shm, which are RAM filesystems the upper dir never sees;
--               the host lock would be taken there (/run/cargoship), so a dry run that
--               took it would pass the upper-dir check alone.
local cjson = require "cjson"
local util = require "cargoship.util"
local contract = require "cargoship.pipeline.contract"
local pipeline = require "cargoship.pipelines.apply"
local lab = require "integration.lab"

local q = util.quote
local N = 5
-- --ssh-timeout of the unreachable-host case: the connect must give up after this, not later.
local CONNECT_TIMEOUT = 5

-- What logging in writes, measured by diffing snapshots around a plain `ssh hN true` and
-- around a dry run on this lab (debian/rocky x systemd/runit):
-- UPPER_IGNORE is empty on purpose. The lab keeps the login records (/var/log/wtmp, btmp,
-- lastlog: bind mounts of RAM files), the journal (Storage=volatile) and runit's logs in RAM,
-- and sshd, PAM and sudo touch nothing else on disk, so no entry of an upper dir may change.
local UPPER_IGNORE = {}
-- TMPFS_IGNORE: on the RAM filesystems only journald's volatile journal changes, because
-- sshd logs every login ("Accepted publickey ...") to it on the systemd hosts. Nothing else:
-- /run/utmp and the lab's wtmp/lastlog only change for sessions with a pty, which cargoship
-- never asks for. pam_motd writes /run/motd.dynamic at every login: the same bytes each
-- time (mtimes are not compared here for that reason), but the very first login to a fresh
-- host creates it, so it is ignored too; cargoship never writes it.
local TMPFS_IGNORE = { "^/run/log/journal/", "^/run/motd%.dynamic$" }

local VERDICTS = { ran = true, own = true, would_act = true, nothing_to_do = true, unassessed = true,
  failed = true, skipped = true, interrupted = true }
local TOP_KEYS = { "cleanup", "cluster", "dry_run", "elapsed", "error", "hosts", "interrupted", "not_in_build",
  "ok", "outcome", "pending", "phases", "pipeline", "plan", "predicted", "run_id", "schema", "skipped_phases" }
local PHASE_KEYS = { "dry_run_policy", "elapsed", "error", "hosts", "id", "index", "number", "probes", "round_trips",
  "summary", "title", "verdict", "writes" }
local HOST_KEYS = { "actions", "error", "host", "left_alone", "not_reached", "predicted", "probes", "reason",
  "round_trips", "writes" }
-- Issue 24: the reads of phases 1-7 (and 30) reach a host in at most this many round trips
-- after connecting, as root (facts/prefetch.lua: one batch before phase 2, one before phase 5).
local MAX_ROUND_TRIPS = 2

local function read(path)
  local f = io.open(path, "rb")
  if not f then return "" end
  local s = f:read("a")
  f:close()
  return s
end

-- Runs the real binary with stdin from /dev/null -> {code, stdout, stderr, elapsed}
local function cargoship(args)
  local out, err = os.tmpname(), os.tmpname()
  local t0 = util.now()
  local _, how, code = os.execute(string.format("%s %s </dev/null >%s 2>%s", q(lab.bin), args, q(out), q(err)))
  local r = { code = how == "exit" and code or (128 + code), stdout = read(out), stderr = read(err),
    elapsed = util.now() - t0 }
  os.remove(out)
  os.remove(err)
  return r
end

local function keys_of(t)
  local list = {}
  for k in pairs(t) do list[#list + 1] = k end
  table.sort(list)
  return list
end

local function is_null(v) return v == cjson.null end

-- lua-cjson may hand integers back as floats (2.0): a count is a whole number, not a Lua integer
local function is_count(v) return type(v) == "number" and v >= 0 and v == math.floor(v) end

-- The phase modules of the pipeline, in order, with what the report must say of them.
local function expected_phases()
  local list = {}
  for i, entry in ipairs(pipeline.phases) do
    local m = require(entry[2])
    list[i] = { id = m.id, title = m.title, number = entry[1], policy = contract.policy(m) }
  end
  return list
end

local function decode(r)
  assert.matches("^[^\n]+\n$", r.stdout, 1, false, "the JSON report is one line followed by a newline")
  local ok, doc = pcall(cjson.decode, r.stdout)
  assert.is_true(ok, "stdout is not JSON: " .. tostring(doc) .. "\n" .. r.stdout:sub(1, 400))
  return doc
end

-- Every key docs/dry-run.md lists, always present, with the documented types.
local function check_schema(doc, names)
  assert.are.same(TOP_KEYS, keys_of(doc))
  assert.are.equal("cargoship.report/v2", doc.schema)
  assert.are.equal("apply", doc.pipeline)
  assert.are.equal("dryrun", doc.cluster)
  assert.are.same(names, doc.hosts)
  assert.is_number(doc.elapsed)
  -- apply has every phase of its spec: no gap to name
  assert.is_true(is_null(doc.not_in_build))
  local want = expected_phases()
  assert.are.equal(#want, #doc.phases, "one entry per phase of pipelines/apply.lua")
  for i, p in ipairs(doc.phases) do
    local w = want[i]
    assert.are.same(PHASE_KEYS, keys_of(p), "keys of phase " .. i)
    assert.are.same({ i, w.number, w.id, w.title, w.policy }, { p.index, p.number, p.id, p.title, p.dry_run_policy })
    assert.is_true(VERDICTS[p.verdict] == true, "phase " .. w.id .. ": unknown verdict " .. tostring(p.verdict))
    assert.is_number(p.elapsed)
    assert.is_true(is_count(p.probes) and is_count(p.writes), w.id .. ": probes and writes are counts")
    assert.is_true(is_null(p.error) or type(p.error) == "string")
    assert.is_true(is_null(p.summary) or type(p.summary) == "string")
    local probes, writes, pos = 0, 0, 0
    for _, h in ipairs(p.hosts) do
      assert.are.same(HOST_KEYS, keys_of(h), w.id .. ": keys of a host entry")
      local at
      for k, n in ipairs(names) do if n == h.host then at = k end end
      assert.is_truthy(at, w.id .. ": unknown host " .. tostring(h.host))
      assert.is_true(at > pos, w.id .. ": hosts in config order")
      pos = at
      assert.are.equal("table", type(h.actions))
      for _, a in ipairs(h.actions) do
        assert.are.equal("string", type(a.kind), w.id .. ": an action's kind")
        assert.are.equal("string", type(a.say), w.id .. ": an action's sentence")
        assert.is_true(is_null(a.outcome) and is_null(a.error), w.id .. ": a dry run's action has no outcome")
        assert.is_nil(a.content, w.id .. ": no file content in the report")
      end
      assert.is_true(is_null(h.reason) or type(h.reason) == "string")
      assert.is_true(is_null(h.error) or type(h.error) == "string")
      assert.is_true(is_count(h.probes) and is_count(h.writes))
      probes, writes = probes + h.probes, writes + h.writes
    end
    assert.are.same({ p.probes, p.writes }, { probes, writes }, w.id .. ": phase totals are the hosts' sums")
  end
  for _, c in ipairs(doc.cleanup) do
    assert.are.same({ "error", "id", "index", "ok", "title" }, keys_of(c))
  end
end

local function snapshots(hosts)
  local s = {}
  for i = 1, #hosts do s[i] = { upper = lab.upper_tree(i, UPPER_IGNORE), tmpfs = lab.tmpfs_tree(i, TMPFS_IGNORE) } end
  return s
end

local function assert_untouched(hosts, before, after, what)
  for i, h in ipairs(hosts) do
    for _, kind in ipairs { "upper", "tmpfs" } do
      assert.is_true(next(before[i][kind]) ~= nil, h.name .. ": empty " .. kind .. " snapshot")
      local diff = lab.snapshot_diff(before[i][kind], after[i][kind])
      local where = kind == "upper" and "overlay upper dir" or "/run, /tmp, /dev/shm"
      assert.are.equal(0, #diff, string.format("%s changed %s's %s:\n  %s", what, h.name, where,
        table.concat(diff, "\n  ")))
    end
  end
end

describe("cargoship apply on " .. N .. " lab hosts", function()
  local hosts, names, dir, cluster

  lazy_setup(function()
    assert.is_truthy(lab.bin, "CARGOSHIP_BIN is not set")
    local all = lab.hosts()
    assert.is_true(#all >= N, "the lab must have at least " .. N .. " hosts, has " .. #all)
    hosts, names = {}, {}
    for i = 1, N do
      hosts[i] = all[i]
      names[i] = all[i].name
    end
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. q(dir)))
    cluster = dir .. "/cluster.yaml"
    -- only the first N hosts; host keys checked against the lab's known_hosts, per host
    local y = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: dryrun", "spec:",
      "  config:", "    loadbalancer: h1.lab.internal", "  hosts:" }
    for i, h in ipairs(hosts) do
      for _, line in ipairs {
        "    - role: " .. (i == 1 and "controller" or "worker"),
        "      hostname: " .. h.name,
        "      ssh:",
        "        address: " .. h.address,
        "        user: root",
        "        keyPath: " .. lab.key,
        "        options:",
        "          UserKnownHostsFile: " .. lab.known_hosts,
      } do y[#y + 1] = line end
    end
    local f = assert(io.open(cluster, "w"))
    f:write(table.concat(y, "\n"), "\n")
    f:close()
  end)

  lazy_teardown(function()
    if dir then os.execute("rm -rf " .. q(dir)) end
  end)

  describe("--dry-run", function()
    local before, after, text, text2, json, bare

    lazy_setup(function()
      before = snapshots(hosts)
      -- -H: every host's /etc/hosts block is still to write, so work is pending
      text = cargoship("apply --dry-run -H " .. q(cluster))
      text2 = cargoship("apply --dry-run -H " .. q(cluster))
      json = cargoship("apply --dry-run -H --output json " .. q(cluster))
      bare = cargoship("apply --dry-run " .. q(cluster))
      after = snapshots(hosts)
    end)

    it("exits 3, work pending: the /etc/hosts blocks (-H) are still to write", function()
      assert.are.equal(3, text.code, text.stdout .. text.stderr)
      assert.are.equal(3, json.code, json.stderr)
      assert.matches("\nWork is pending: [^\n]*Nothing was changed%.\n", text.stdout)
    end)

    it("exits 0 when only the host lock would be taken: a real run would take none", function()
      assert.are.equal(0, bare.code, bare.stdout .. bare.stderr)
      assert.matches("\n  7%. Acquire exclusive host lock: would act on " .. N .. " of " .. N .. " hosts\n",
        bare.stdout)
      assert.matches("\nNothing to do %(no phase needs the host lock, so a real run takes none%)%. Nothing was "
        .. "changed%.\n", bare.stdout)
    end)

    it("prints every phase in pipeline order with its verdict; read-only phases ran", function()
      local out = text.stdout
      assert.matches('^Dry run of cluster "dryrun" on ' .. N .. ' hosts %(apply pipeline, '
        .. #pipeline.phases .. ' phases%)\n', out)
      local pos = 1
      for i, w in ipairs(expected_phases()) do
        local head = string.format("\n%3d. %s: ", w.number, w.title)
        local at = out:find(head, pos, true)
        assert.is_truthy(at, "phase " .. w.number .. " (" .. w.title .. ") missing or out of order in:\n" .. out)
        local verdict = out:sub(at + #head):match("^[^\n]*")
        if w.policy == contract.READ_ONLY then
          assert.are.equal("ran, reads only", verdict, w.title)
        elseif w.policy == contract.OWN then
          assert.are.equal("own dry run", verdict, w.title)
        else
          assert.is_truthy(verdict:match("^would act on %d+ of %d+ hosts?$") or verdict:match("^nothing to do")
            or verdict:match("^unassessed on %d+ of %d+ hosts?$"), w.title .. ": " .. verdict)
        end
        -- progress, one plain line per phase on stderr (not a terminal)
        assert.is_truthy(text.stderr:find(string.format("phase %d/%d %s: ", i, #pipeline.phases, w.title), 1, true),
          "no progress line for " .. w.title .. " in:\n" .. text.stderr)
        pos = at + #head
      end
      -- every host is named on a lock line, alone or in a group of hosts doing the same
      local lock_lines = {}
      for line in out:gmatch("\n       ([^\n]-take the lock at /[^\n]*)") do lock_lines[#lock_lines + 1] = line end
      for _, n in ipairs(names) do
        local found = false
        for _, l in ipairs(lock_lines) do
          local who = l:match("^(.-)%s%s+take the lock")
          -- every host alike (one lock path on all of them) is said once as "all N hosts"
          if who == "all " .. #names .. " hosts" then found = true end
          for name in (who or ""):gmatch("[^,%s]+") do if name == n then found = true end end
        end
        assert.is_true(found, n .. " is on no lock line:\n" .. out)
      end
      assert.are.equal(text.stdout, text2.stdout, "two dry runs over the same hosts print the same bytes")
    end)

    it("prints one JSON document of the documented schema, matching the text", function()
      local doc = decode(json)
      check_schema(doc, names)
      assert.is_true(doc.dry_run)
      assert.are.same({ "pending", true, true, false }, { doc.outcome, doc.ok, doc.pending, doc.interrupted })
      assert.is_true(is_null(doc.error) and is_null(doc.plan))
      assert.are.equal("string", type(doc.run_id))
      assert.are.same({}, doc.cleanup)
      local by_id = {}
      for _, p in ipairs(doc.phases) do
        by_id[p.id] = p
        assert.are.equal(0, p.writes, p.id .. ": a dry run spends no round trip on writes")
        assert.is_true(is_null(p.error), p.id .. ": " .. tostring(p.error))
        for _, h in ipairs(p.hosts) do
          assert.is_true(is_null(h.error), p.id .. " on " .. h.host .. ": " .. tostring(h.error))
        end
        if p.dry_run_policy == contract.READ_ONLY then assert.are.equal("ran", p.verdict, p.id) end
        if p.dry_run_policy == contract.OWN then assert.are.equal("own", p.verdict, p.id) end
        if p.dry_run_policy == contract.REPORTED then
          assert.is_truthy(({ would_act = 1, nothing_to_do = 1, unassessed = 1 })[p.verdict], p.id .. ": " .. p.verdict)
        end
        -- the same verdict in the text run
        local words = text.stdout:match(string.format("\n%%s*%d%%. [^\n]-: ([^\n]*)", p.number))
        local want = ({ ran = "^ran, reads only$", own = "^own dry run$", nothing_to_do = "^nothing to do",
          would_act = "^would act on ", unassessed = "^unassessed on " })[p.verdict]
        assert.matches(want, words or "(phase missing from the text)", 1, false, p.id)
      end
      -- the phases that run on every host reached every host, and read something there
      for _, id in ipairs { "connect", "detect_os", "gather_facts", "validate_hosts", "distro_facts" } do
        local hs = {}
        for _, h in ipairs(by_id[id].hosts) do hs[#hs + 1] = h.host end
        assert.are.same(names, hs, id)
      end
      -- detect_os sends the batch that answers gather_facts' reads too (facts/prefetch.lua)
      for _, h in ipairs(by_id.detect_os.hosts) do assert.is_true(h.probes >= 1, "detect_os on " .. h.host) end
      -- every command and file the transport sent after connecting, per host, whatever phase sent it
      local trips, where = {}, {}
      for _, p in ipairs(doc.phases) do
        assert.is_true(is_count(p.round_trips), p.id .. ": round_trips is a count")
        for _, h in ipairs(p.hosts) do
          if p.id ~= "connect" and h.round_trips > 0 then
            trips[h.host] = (trips[h.host] or 0) + h.round_trips
            where[h.host] = (where[h.host] or "") .. string.format(" %s=%d", p.id, h.round_trips)
          end
        end
      end
      for _, n in ipairs(names) do
        assert.is_true((trips[n] or 0) >= 1 and trips[n] <= MAX_ROUND_TRIPS, string.format(
          "%s: %s round trips after connecting (%s), at most %d allowed", n, tostring(trips[n]),
          where[n] or "", MAX_ROUND_TRIPS))
      end
      local lock = by_id.acquire_lock
      assert.are.equal("would_act", lock.verdict)
      assert.are.equal(N, #lock.hosts)
      for _, h in ipairs(lock.hosts) do
        assert.are.same({ "step", "take_lock" }, { h.actions[1].kind, h.actions[1].name })
        assert.matches("^take the lock at /", h.actions[1].say)
      end
    end)

    it("leaves every host's upper dir (and /run, /tmp, /dev/shm) as it was", function()
      assert_untouched(hosts, before, after, "apply --dry-run")
    end)
  end)

  describe("without --dry-run or --confirm, stdin not a terminal", function()
    local before, after, text, json

    lazy_setup(function()
      before = snapshots(hosts)
      text = cargoship("apply -H " .. q(cluster))
      json = cargoship("apply -H --output json " .. q(cluster))
      after = snapshots(hosts)
    end)

    it("shows the plan and stops before any change, exit 1, with the documented message", function()
      assert.are.equal(1, text.code, text.stdout .. text.stderr)
      assert.matches('^Plan of cluster "dryrun" on ' .. N .. ' hosts', text.stdout)
      assert.is_nil(text.stdout:find("\nApply of cluster", 1, true), "no real run may start")
      assert.is_truthy(text.stderr:find(
        "cargoship: not a terminal: re-run with --confirm to apply the plan above\n", 1, true), text.stderr)
      assert.are.equal(1, json.code, json.stderr)
      local doc = decode(json)
      check_schema(doc, names)
      assert.is_false(doc.dry_run)
      assert.are.same({ "not_confirmed", false }, { doc.outcome, doc.ok })
      assert.matches("not a terminal", doc.error, 1, true)
      for _, p in ipairs(doc.phases) do assert.are.equal("skipped", p.verdict, p.id) end
      assert.are.equal("table", type(doc.plan), "the plan rides along")
      assert.is_true(doc.plan.dry_run)
      assert.are.equal("pending", doc.plan.outcome)
    end)

    it("leaves every host's upper dir (and /run, /tmp, /dev/shm) as it was", function()
      assert_untouched(hosts, before, after, "an unconfirmed apply")
    end)
  end)

  it("fails an unreachable host in 'Connect to hosts', naming it, and reports the others in every phase", function()
    local i = 3
    local victim = hosts[i].name
    local before = snapshots(hosts)
    local code, out = lab.lab("link " .. i .. " down")
    assert.are.equal(0, code, out)
    local text, json
    finally(function() lab.lab("link " .. i .. " up") end)
    local args = string.format("apply --dry-run --ssh-timeout %ds %s", CONNECT_TIMEOUT, q(cluster))
    text = cargoship(args)
    json = cargoship(args .. " --output json")
    lab.lab("link " .. i .. " up")
    for _, r in ipairs { text, json } do
      assert.are.equal(1, r.code, r.stdout .. r.stderr)
      -- the whole dry run, the other hosts' phases included: within --ssh-timeout and margin for a
      -- loaded machine (a CI-like run at load 10 took 9.0 s), well below the default 30 s timeout
      assert.is_true(r.elapsed < CONNECT_TIMEOUT + 20, string.format("took %.1f s", r.elapsed))
    end
    -- text: the failure sits under phase 1 and names the host
    local connect = text.stdout:match("\n  1%. Connect to hosts: ([^\n]*\n.-)\n  2%. ")
    assert.is_truthy(connect, text.stdout)
    assert.matches("^FAILED on 1 of " .. N .. " hosts", connect)
    assert.matches("\n +" .. victim .. " +error: ", connect)
    assert.matches("Dry run failed: phase 1 %(Connect to hosts%) failed%.", text.stdout)
    -- JSON: only that host failed; every later phase left it out and assessed the others
    local doc = decode(json)
    check_schema(doc, names)
    assert.are.same({ "failed", false }, { doc.outcome, doc.ok })
    local p1 = doc.phases[1]
    assert.are.same({ "connect", "failed" }, { p1.id, p1.verdict })
    for _, h in ipairs(p1.hosts) do
      if h.host == victim then
        assert.are.equal("string", type(h.error))
        assert.matches("time", h.error, 1, true)
      else
        assert.is_true(is_null(h.error), h.host .. ": " .. tostring(h.error))
      end
    end
    for k = 2, #doc.phases do
      local p = doc.phases[k]
      assert.are_not.equal("skipped", p.verdict, p.id)
      assert.are_not.equal("failed", p.verdict, p.id)
      for _, h in ipairs(p.hosts) do
        if h.host == victim then
          assert.are.equal("failed in phase 1 (Connect to hosts)", h.not_reached, p.id)
          assert.are.same({}, h.actions, p.id)
        else
          assert.is_true(is_null(h.not_reached) and is_null(h.error), p.id .. " " .. h.host)
        end
      end
    end
    assert.matches("\n +" .. victim .. " +not reached: failed in phase 1 %(Connect to hosts%)\n", text.stdout)
    assert.matches(victim .. " was left out of the phases after it failed.", text.stdout, 1, true)
    assert_untouched(hosts, before, snapshots(hosts), "a dry run with " .. victim .. " unreachable")
  end)
end)

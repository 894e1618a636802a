-- Integration spec on the lab: a dry run's JSON plan is what the real apply then does, action by action, every phase.
--
-- Issue 9 "Done when": a custom phase that writes a file is planned by a dry run, then a
-- real apply (--confirm) executes exactly the planned actions: the JSON plan and the JSON
-- run are compared phase by phase, host by host, action by action (kind, sentence and every
-- public field), disconnect included. A second apply reports the write as already in place
-- (outcome "skipped") and changes no byte of any host's disk (overlay upper dir), the lock's
-- own files aside (they live in /run, /var/lock or /tmp, outside the upper dir, anyway).
local cjson = require "cjson"
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"

local q = util.quote
local N = math.min(4, #lab.hosts())
local FILE = "/etc/cargoship-plan-run.conf"

local work, nonce
local read, write = lab.read, lab.write

-- The phase under test: always plans the write and leaves "already there" to host:apply,
-- so the second run shows the skip rather than filtering the action out.
local PHASE = [[
-- luacheck: read globals action
return {
  id = "write_marker",
  title = "Write the plan-run marker",
  after = "acquire_lock",
  reads = { "connection" },
  creates = { "marker" },
  assess = function(ctx, host)
    return { action.write { path = %q, mode = "0644",
      content = string.format("cluster=%%s\nhost=%%s\nnonce=%s\n", ctx.cluster.name, host.name) } }
  end,
}
]]

local function cluster()
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: planrun",
    "spec:", "  config:", "    loadbalancer: h1.lab.internal", "  hosts:" }
  for i, h in ipairs { table.unpack(lab.hosts(), 1, N) } do
    lines[#lines + 1] = string.format("    - role: %s\n      hostname: h%d\n      ssh:\n        address: %s\n"
      .. "        user: root\n        keyPath: %s\n        options: {UserKnownHostsFile: %s}",
      i == 1 and "controller" or "worker", i, h.address, lab.key, lab.known_hosts)
  end
  return write(work .. "/cluster.yaml", table.concat(lines, "\n") .. "\n")
end

local function apply(args)
  local out, err = os.tmpname(), os.tmpname()
  local _, how, code = os.execute(string.format("env HOME=%s %s apply --output json --phases %s %s %s"
    .. " </dev/null >%s 2>%s", q(work), q(lab.bin), q(work .. "/phases"), args, q(work .. "/cluster.yaml"),
    q(out), q(err)))
  local r = { code = how == "exit" and code or (128 + code), stdout = read(out), stderr = read(err) }
  os.remove(out)
  os.remove(err)
  local ok, doc = pcall(cjson.decode, r.stdout)
  assert(ok, "stdout is not JSON (exit " .. r.code .. "): " .. r.stdout:sub(1, 300) .. "\n" .. r.stderr)
  r.doc = doc
  return r
end

local ssh = run.ssh
-- plan and run, phase by phase, host by host, action by action (integration.apply_run)
local compare = run.compare

local function outcomes(all, phase)
  local out = {}
  for _, x in ipairs(all) do
    if x.phase == phase then out[#out + 1] = x.action.outcome end
  end
  return out
end

local function rep(value, n)
  local out = {}
  for i = 1, n do out[i] = value end
  return out
end

-- Every host's upper dir, the lock's files aside.
local LOCK = { "cargoship%.lock" }
local function uppers()
  local s = {}
  for i = 1, N do s[i] = lab.upper_tree(i, LOCK) end
  return s
end

setup(function()
  work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. q(work .. "/phases")))
  nonce = string.format("%d-%d", os.time(), util.getpid())
  write(work .. "/phases/marker.lua", string.format(PHASE, FILE, nonce))
  cluster()
  for i = 1, N do ssh(i, "rm -f " .. FILE) end
end)

teardown(function()
  for i = 1, N do ssh(i, "rm -f " .. FILE) end
  if work then os.execute("rm -rf " .. q(work)) end
end)

describe("apply: the plan is what runs", function()
  local plan, first, second, before, after

  setup(function()
    plan = apply("--dry-run")
    first = apply("--confirm")
    before = uppers()
    second = apply("--confirm")
    after = uppers()
  end)

  it("plans the write on every host in a dry run (exit 3), with no outcome", function()
    assert.are.equal(3, plan.code, plan.stderr)
    assert.is_true(plan.doc.dry_run)
    local marker
    for _, p in ipairs(plan.doc.phases) do if p.id == "write_marker" then marker = p end end
    assert.are.equal("would_act", marker.verdict)
    assert.are.equal(N, #marker.hosts)
    for _, h in ipairs(marker.hosts) do
      assert.are.same({ "write", FILE, "0644", cjson.null }, { h.actions[1].kind, h.actions[1].path,
        h.actions[1].mode, h.actions[1].outcome })
      assert.is_nil(h.actions[1].content, "never the file's content")
    end
  end)

  it("executes exactly the planned actions, every phase included, each done", function()
    assert.are.equal(0, first.code, first.stderr)
    assert.is_false(first.doc.dry_run)
    assert.are.equal("cargoship.report/v2", first.doc.schema)
    assert.are.equal(plan.doc.schema, first.doc.schema, "one schema for dry and real runs")
    local all = compare(plan.doc, first.doc)
    -- the plan the real run showed first is that dry run, too
    compare(first.doc.plan, first.doc)
    for _, id in ipairs { "acquire_lock", "write_marker", "release_lock", "disconnect" } do
      assert.are.same(rep("done", N), outcomes(all, id), id)
    end
    for _, x in ipairs(all) do assert.are.equal("done", x.action.outcome, x.phase .. " on " .. x.host) end
    for i = 1, N do
      local code, out = ssh(i, "cat " .. FILE .. "; stat -c %a " .. FILE)
      assert.are.equal(0, code, out)
      assert.are.equal(string.format("cluster=planrun\nhost=h%d\nnonce=%s\n644\n", i, nonce), out)
    end
  end)

  it("reports the write already in place on a second apply, as planned", function()
    assert.are.equal(0, second.code, second.stderr)
    local all = compare(second.doc.plan, second.doc)
    assert.are.same(rep("skipped", N), outcomes(all, "write_marker"))
    assert.are.same(rep("done", N), outcomes(all, "acquire_lock"))
  end)

  it("changes no byte on any host's disk the second time", function()
    for i = 1, N do
      assert.are.same({}, lab.snapshot_diff(before[i], after[i]), "h" .. i .. "'s upper dir")
    end
  end)
end)

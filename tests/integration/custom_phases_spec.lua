-- Integration specs of custom phases in the real `cargoship apply` on the lab: placement, dry-run rule, load errors.
--
-- The phases are contrib/phases' two examples (copied, their settings edited as an operator
-- would): motd.lua writes /etc/motd and is reported, not run, in a dry run; disk_space.lua
-- declares itself read-only and runs in dry runs too. A phase file with a syntax error must
-- stop apply before any host is touched: no "Connect to hosts" and no byte written.
local util = require "cargoship.util"
local lab = require "integration.lab"

local q = util.quote
local N = 3

local work, nonce

local read, write = lab.read, lab.write

-- A cluster of the first N lab hosts, plus `phases` (YAML lines under spec.phases).
local function cluster(name, phases)
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: custom",
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

-- A contrib phase copied into work/phases with its settings replaced (Lua patterns).
local function contrib(file, edits, as)
  local text = read(lab.src .. "/contrib/phases/" .. file)
  for pat, rep in pairs(edits or {}) do
    local n
    text, n = text:gsub(pat, rep)
    assert(n == 1, "contrib/phases/" .. file .. ": no " .. pat)
  end
  return write(work .. "/phases/" .. (as or file), text)
end

local function apply(args)
  local out, err = os.tmpname(), os.tmpname()
  local _, how, code = os.execute(string.format("env HOME=%s %s apply %s </dev/null >%s 2>%s", q(work),
    q(lab.bin), args, q(out), q(err)))
  local r = { code = how == "exit" and code or (128 + code), stdout = read(out), stderr = read(err) }
  os.remove(out)
  os.remove(err)
  return r
end

local function ssh(i, cmd)
  return lab.sh("ssh -F " .. q(lab.state .. "/ssh_config") .. " h" .. i .. " " .. q(cmd))
end

local function uppers()
  local snaps = {}
  for i = 1, N do snaps[i] = lab.upper_snapshot(i) end
  return snaps
end

-- The report's line for a phase title, e.g. "  4. Write the message of the day: ran".
local function line_of(report, title)
  return report:match("\n%s*%d+%. " .. title:gsub("%p", "%%%0") .. ": [^\n]*")
end

local function position(text, s)
  return assert(text:find(s, 1, true), "no " .. s .. " in:\n" .. text)
end

setup(function()
  work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. q(work .. "/phases") .. " " .. q(work .. "/dir")))
  nonce = string.format("%d-%d", os.time(), util.getpid())
  -- the message names this run, so the first dry run always finds work
  contrib("motd.lua", { ["(Changes made here by hand[^\n]*)\n"] = "%1\nrun " .. nonce .. "\n" })
  contrib("disk_space.lua", { ["local MIN_FREE_MB = %d+"] = "local MIN_FREE_MB = 1" })
  cluster("cluster.yaml", { "- file: phases/motd.lua", "  after: validate_hosts",
    "- file: phases/disk_space.lua", "  after: validate_hosts" })
end)

teardown(function()
  os.execute("rm -rf " .. q(work))
end)

describe("custom phases in cargoship apply", function()
  it("are reported, not run, in a dry run; one declared read-only runs; nothing is written", function()
    local before = uppers()
    local r = apply("--dry-run " .. q(work .. "/cluster.yaml"))
    assert.are.equal(3, r.code, r.stderr)
    local report = r.stdout
    local motd = line_of(report, "Write the message of the day")
    assert.matches("would act on 3 of 3 hosts", motd, 1, true)
    assert.matches("all 3 hosts  [a-z]+ /etc/motd", report)
    assert.matches("ran, reads only", line_of(report, "Check free disk space"), 1, true)
    assert.is_true(position(report, "Validate hosts: ran") < position(report, "Write the message of the day")
      and position(report, "Write the message of the day") < position(report, "Check free disk space")
      and position(report, "Check free disk space") < position(report, "Gathering facts about the distro"))
    -- the read-only phase really ran on every host: its print went to the log
    for i = 1, N do assert.matches("disk_space.lua: h" .. i .. ": %d+ MiB free under /var/lib", r.stderr) end
    assert.are.same(before, uppers())
  end)

  it("run in apply --confirm, and an idempotent one has nothing to do afterwards", function()
    local r = apply("--confirm " .. q(work .. "/cluster.yaml"))
    assert.are.equal(0, r.code, r.stdout .. r.stderr)
    local real = r.stdout:match("\nApply of cluster.*$")
    assert.is_truthy(real, r.stdout)
    assert.matches(": ran$", line_of(real, "Write the message of the day"))
    assert.matches(": ran$", line_of(real, "Check free disk space"))
    for i = 1, N do
      local code, motd = ssh(i, "cat /etc/motd")
      assert.are.equal(0, code, motd)
      assert.matches("This host belongs to the cluster custom", motd, 1, true)
      assert.matches("run " .. nonce, motd, 1, true)
    end
    r = apply("--dry-run " .. q(work .. "/cluster.yaml"))
    assert.matches(": nothing to do", line_of(r.stdout, "Write the message of the day"))
  end)

  it("come from --phases DIR, each placed where its file says; a failing check stops the run", function()
    contrib("disk_space.lua", { ["local MIN_FREE_MB = %d+"] = "local MIN_FREE_MB = 1" }, "../dir/disk_space.lua")
    local plain = cluster("plain.yaml")
    local r = apply("--dry-run --phases " .. q(work .. "/dir") .. " " .. q(plain))
    -- a read-only check passing leaves nothing pending (the lock alone is no work)
    assert.are.equal(0, r.code, r.stderr)
    assert.matches("ran, reads only", line_of(r.stdout, "Check free disk space"), 1, true)
    contrib("disk_space.lua", { ["local MIN_FREE_MB = %d+"] = "local MIN_FREE_MB = 1000000000" },
      "../dir/disk_space.lua")
    r = apply("--dry-run --phases " .. q(work .. "/dir") .. " " .. q(plain))
    assert.are.equal(1, r.code, r.stdout .. r.stderr)
    assert.matches("FAILED on 3 of 3 hosts", line_of(r.stdout, "Check free disk space"), 1, true)
    assert.matches("MiB free under /var/lib, 1000000000 MiB needed", r.stdout, 1, true)
    assert.matches("skipped", line_of(r.stdout, "Gathering facts about the distro installed"), 1, true)
  end)

  it("with a syntax error stop the run before any host is touched, naming file and line", function()
    write(work .. "/phases/broken.lua", 'return {\n  id = "broken",\n  title = "Broken"\n  run = function() end,\n}\n')
    local path = cluster("broken.yaml", { "- file: phases/motd.lua", "  after: validate_hosts",
      "- file: phases/broken.lua", "  before: acquire_lock" })
    local before = uppers()
    local r = apply("--confirm " .. q(path))
    assert.are.equal(1, r.code)
    assert.matches(work .. "/phases/broken.lua:4: '}' expected", r.stderr, 1, true)
    local all = r.stdout .. r.stderr
    assert.is_nil(all:find("Connect to hosts", 1, true), all)
    assert.is_nil(all:find("connected", 1, true), all)
    assert.are.same(before, uppers())
  end)

  it("naming an unknown phase fail with the cluster file's line, before any host is touched", function()
    local path = cluster("unknown.yaml", { "- file: phases/motd.lua", "  after: validate_host" })
    local line = 0
    for l in io.lines(path) do
      line = line + 1
      if l:find("after: validate_host", 1, true) then break end
    end
    local r = apply("--dry-run " .. q(path))
    assert.are.equal(1, r.code)
    assert.matches(path .. ":" .. line .. ":14: spec.phases[0].after: unknown phase \"validate_host\" (did you mean "
      .. "\"validate_hosts\"?)", r.stderr, 1, true)
    assert.is_nil(r.stderr:find("Connect to hosts", 1, true))
  end)
end)

-- Integration spec on the lab: phase 10 (apply -f) with Debian's real fapolicyd (permissive) on a rocky/systemd host.
--
-- Issue 12: the package's rules go to 31-cargoship.rules and 32-cargoship-executable.rules
-- only where fapolicyd runs, the daemon reloads them (fapolicyd-cli lists them), nothing
-- happens when they are unchanged, and a stopped fapolicyd is left alone (never started), the
-- report saying why. The dry run equals the run and writes nothing.
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"

local q = util.quote
local EL = lab.find("rocky", "systemd")
local I
for i, h in ipairs(lab.hosts()) do if h.address == EL.address then I = i end end
local ALL = #lab.hosts()
local RULES = "allow perm=any all : dir=/var/lib/rancher/"
local EXEC = "allow perm=execute all : path=/usr/local/bin/cargoship-lab-tool"

local work

local function sh_ok(cmd)
  local code, out = run.ssh(I, cmd)
  assert(code == 0, cmd .. ": " .. out)
  return out
end

setup(function()
  work = run.work()
  run.cluster(work, { EL })
  lab.write(work .. "/distro.yaml", table.concat({ "kind: ZarfDistro", "metadata: {name: fa}", "spec:",
    "  type: rke2", "  version: 1.35.4-rke2r1", "  config:", "    os:",
    '      fapolicyd: "' .. RULES .. '\\n"',
    '      fapolicydExecutable: "' .. EXEC .. '\\n"',
    "      files: " .. run.container_selinux(work, work), "" }, "\n"))
  sh_ok("rm -f /etc/fapolicyd/rules.d/3[12]-cargoship*.rules; systemctl start fapolicyd")
end)

teardown(function()
  pcall(sh_ok, "systemctl stop fapolicyd; rm -f /etc/fapolicyd/rules.d/3[12]-cargoship*.rules")
  if work then os.execute("rm -rf " .. q(work)) end
end)

local function apply(args)
  return run.apply(work, args .. run.NO_ENGINE .. " --distro " .. q(run.built(work .. "/distro.yaml")))
end

describe("apply -f where fapolicyd runs", function()
  it("writes both rule files and reloads, as planned, then has nothing to do", function()
    local up0 = run.uppers(ALL)
    local plan = apply("--dry-run -f")
    run.assert_unchanged(up0, run.uppers(ALL), ALL)
    assert.are.equal(3, plan.code, plan.stderr)
    local r = apply("--confirm -f")
    assert.are.equal(0, r.code, r.stderr)
    local all = run.compare(plan.doc, r.doc, nil, { selinux_policy = true })
    local said = {}
    for _, x in ipairs(all) do
      if x.phase == "fapolicyd" then said[#said + 1] = x.action.say .. ": " .. x.action.outcome end
    end
    assert.are.equal(3, #said, table.concat(said, "\n"))
    assert.matches("31%-cargoship%.rules.*: done", said[1])
    assert.matches("32%-cargoship%-executable%.rules.*: done", said[2])
    local out = sh_ok("cat /etc/fapolicyd/rules.d/31-cargoship.rules"
      .. " /etc/fapolicyd/rules.d/32-cargoship-executable.rules; stat -c %a /etc/fapolicyd/rules.d/31-cargoship.rules;"
      .. " fapolicyd-cli --list")
    assert.matches(RULES .. "\n" .. EXEC .. "\n644\n", out, 1, true)
    assert.matches(RULES, out:match("644\n(.*)$"), 1, true)
    local up1 = run.uppers(ALL)
    local again = apply("--confirm -f")
    assert.are.equal(0, again.code, again.stderr)
    assert.are.equal("nothing_to_do", run.verdict(again.doc, "fapolicyd"))
    run.assert_unchanged(up1, run.uppers(ALL), ALL)
  end)

  it("without -f, touches nothing", function()
    local r = apply("--dry-run")
    assert.are.equal("nothing_to_do", run.phase(r.doc, "fapolicyd").verdict)
    assert.are.same({}, run.phase(r.doc, "fapolicyd").hosts)
  end)
end)

describe("a stopped fapolicyd", function()
  it("is left alone, never started, and the report says why", function()
    sh_ok("systemctl stop fapolicyd; rm -f /etc/fapolicyd/rules.d/3[12]-cargoship*.rules")
    local r = apply("--confirm -f")
    assert.is_true(r.code == 0 or r.code == 3, r.stderr)
    local p = run.phase(r.doc.plan or r.doc, "fapolicyd")
    assert.are.equal("nothing_to_do", p.verdict)
    assert.matches("fapolicyd is installed but not running", p.hosts[1].left_alone, 1, true)
    assert.are.equal("inactive\n", select(2, run.ssh(I, "systemctl is-active fapolicyd")))
    sh_ok("! test -e /etc/fapolicyd/rules.d/31-cargoship.rules")
  end)
end)

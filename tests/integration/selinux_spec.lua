-- Integration spec on the lab: phases 9 and 11 on the rocky hosts' SELinux stand-in (container-selinux, policy).
--
-- Issue 12 "Done when": container-selinux comes from the distro package's own rpm (built
-- here with rpmbuild; the lab is air-gapped) through dnf; modules, booleans and file contexts
-- are applied in the documented order (the stand-in logs each state change in order); the
-- state record holds each boolean's value from before cargoship; the dry run equals the run
-- and writes nothing; a second run writes nothing; a failed step (a CIL module the policy
-- compiler refuses) stops that host with the step named, and the steps after it are not run.
local cjson = require "cjson"
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"

local q = util.quote

local EL = {}
for _, h in ipairs(lab.hosts()) do if h.os == "rocky" then EL[#EL + 1] = h end end
local ALL = #lab.hosts()

local work
local GOOD_CIL = "(type cargoship_data_t)\\n(typeattributeset file_type (cargoship_data_t))\\n"

local function el_index(k)
  for i, h in ipairs(lab.hosts()) do if h.address == EL[k].address then return i end end
end

local function each(cmd)
  for k = 1, #EL do
    local code, out = run.ssh(el_index(k), cmd)
    assert(code == 0, EL[k].address .. ": " .. out)
  end
end

local function distro(name, modules, booleans)
  local dir = work .. "/" .. name
  assert(os.execute("mkdir -p " .. q(dir)))
  local files = run.container_selinux(work, dir)
  lab.write(dir .. "/distro.yaml", table.concat({
    "kind: ZarfDistro", "metadata: {name: se}", "spec:", "  type: rke2", "  version: 1.35.4-rke2r1",
    "  config:", "    os:",
    "      files: " .. files,
    "      selinux:", "        modules: [" .. modules .. "]", "        booleans: {" .. booleans .. "}",
    "        fileContexts: [{path: '/srv/cargoship-data(/.*)?', type: container_file_t}]", "" }, "\n"))
  return dir
end

setup(function()
  work = run.work()
  run.cluster(work, EL)
  distro("good", '{name: cargoship-lab, cil: "' .. GOOD_CIL .. '"}',
    "container_manage_cgroup: true, virt_use_nfs: false")
  distro("broken", '{name: cargoship-lab, cil: "' .. GOOD_CIL .. '"}, {name: broken, cil: "(allow a b"}',
    "container_manage_cgroup: true, virt_use_nfs: false, container_use_devices: true")
  -- the hosts as booted: no container-selinux, no cargoship policy (an earlier spec may have left them)
  each("rpm -e container-selinux >/dev/null 2>&1; semodule -r cargoship-lab >/dev/null 2>&1;"
    .. " semodule -r broken >/dev/null 2>&1; setsebool -P container_manage_cgroup=off virt_use_nfs=off"
    .. " container_use_devices=off; semanage fcontext -d -f a '/srv/cargoship-data(/.*)?' >/dev/null 2>&1;"
    .. " rm -rf /var/lib/cargoship/selinux; mkdir -p /srv/cargoship-data; : > /var/lib/selinux-standin/log")
end)

teardown(function()
  if work then os.execute("rm -rf " .. q(work)) end
end)

describe("phases 9 and 11 on Enforcing hosts", function()
  local plan, first, second, up0, up1, up2, up3
  local function args(name)
    return run.NO_ENGINE .. " --distro " .. q(run.built(work .. "/" .. name .. "/distro.yaml"))
  end

  setup(function()
    up0 = run.uppers(ALL)
    plan = run.apply(work, "--dry-run " .. args("good"))
    up1 = run.uppers(ALL)
    first = run.apply(work, "--confirm " .. args("good"))
    up2 = run.uppers(ALL)
    second = run.apply(work, "--confirm " .. args("good"))
    up3 = run.uppers(ALL)
  end)

  it("plans container-selinux from the package and the policy, writing no byte", function()
    assert.are.equal(3, plan.code, plan.stderr)
    run.assert_unchanged(up0, up1, ALL)
    assert.are.equal("would_act", run.phase(plan.doc, "enterprise_linux").verdict)
    -- it reads container_selinux, which phase 9 would create first
    local pol = run.phase(plan.doc, "selinux_policy")
    for _, h in ipairs(pol.hosts) do assert.matches("reads container_selinux", h.reason, 1, true) end
  end)

  it("does what the plan said: container-selinux installed through dnf from the package's rpm", function()
    assert.are.equal(0, first.code, first.stderr)
    local all = run.compare(plan.doc, first.doc, nil, { selinux_policy = true })
    for _, x in ipairs(all) do assert.are.equal("done", x.action.outcome, x.phase .. " on " .. x.host) end
    each("rpm -q container-selinux >/dev/null && ! test -e /var/lib/cargoship/container-selinux.rpm")
  end)

  it("applies modules, then booleans, then contexts, and records the booleans from before", function()
    for k = 1, #EL do
      local i = el_index(k)
      local _, log = run.ssh(i, "cat /var/lib/selinux-standin/log")
      local order = {}
      for tool in log:gmatch("([%w]+)[^\n]*\n") do
        if tool ~= order[#order] then order[#order + 1] = tool end
      end
      assert.are.same({ "semodule", "setsebool", "semanage", "restorecon" }, order, log)
      assert.matches("semodule %-X 400 %-i /var/lib/cargoship/selinux/cargoship%-lab%.cil", log)
      local _, state = run.ssh(i, "cat /var/lib/cargoship/selinux/cargoship-state.json; stat -c %a"
        .. " /var/lib/cargoship/selinux /var/lib/cargoship/selinux/cargoship-state.json")
      local text, modes = state:match("^(.-\n)(%d+\n%d+\n)$")
      assert.are.equal("700\n600\n", modes)
      local rec = cjson.decode(text)
      assert.are.same({ container_manage_cgroup = false, virt_use_nfs = false }, rec.booleans)
      assert.are.same({ { name = "cargoship-lab", priority = 400 } }, rec.modules)
      local _, now = run.ssh(i, "getsebool container_manage_cgroup; semanage fcontext -l -C | grep -c cargoship-data")
      assert.are.equal("container_manage_cgroup --> on\n1\n", now)
    end
  end)

  it("writes nothing the second time", function()
    assert.are.equal(0, second.code, second.stderr)
    run.compare(second.doc.plan, second.doc)
    for _, id in ipairs { "enterprise_linux", "selinux_policy" } do
      assert.are.equal("nothing_to_do", run.verdict(second.doc, id), id)
    end
    run.assert_unchanged(up2, up3, ALL)
  end)
end)

describe("a failed SELinux step", function()
  it("stops the host there, naming the step; the steps after it are not run", function()
    local pkg = q(run.built(work .. "/broken/distro.yaml"))
    local r = run.apply(work, "--confirm" .. run.NO_ENGINE .. " --distro " .. pkg)
    assert.are.equal(1, r.code, r.stderr)
    local pol = run.phase(r.doc, "selinux_policy")
    assert.are.equal("failed", pol.verdict)
    for _, h in ipairs(pol.hosts) do
      assert.matches('SELinux step "install SELinux module broken at priority 400" failed', h.error, 1, true)
      local outcomes = {}
      for _, a in ipairs(h.actions) do outcomes[a.say] = a.outcome end
      assert.are.equal("failed", outcomes["install SELinux module broken at priority 400"])
      assert.are.equal("not_run", outcomes["set SELinux boolean container_use_devices on"])
      -- the record of the boolean's value before cargoship was written first, and kept
      assert.are.equal("done", outcomes["record the SELinux state in /var/lib/cargoship/selinux/cargoship-state.json"])
    end
    each("getsebool container_use_devices | grep -q -- '--> off'")
  end)
end)

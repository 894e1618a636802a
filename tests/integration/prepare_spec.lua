-- Integration spec on the lab: phases 8 and 12 (environment, sysctl, kernel modules, /etc/hosts) on every lab host.
--
-- Issue 12 "Done when": after apply, the sysctl values are live (`sysctl -n`), a new SSH
-- login has the environment, every host resolves every other by FQDN and short name
-- (`getent hosts`), lines outside the managed block are untouched, the dry run before the run
-- is what the run did (JSON compared) and wrote no byte, and a second run writes nothing. A
-- kernel module the lab cannot load (no modprobe in a namespace host) is foretold by the
-- dry run on every host, the module named, and the real run refuses at the plan, writing
-- nothing (issue 23). Uses every host of the lab it runs in.
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"

local q = util.quote
local HOSTS = lab.hosts()
local N = #HOSTS
local OPERATOR_LINE = "192.0.2.77 operator-line.example operator-line"

local work

-- the package's files and the engine phases left out: these packages carry no engine
local function pkg_args(name)
  return run.NO_ENGINE .. " --distro " .. q(run.built(work .. "/" .. name .. "/distro.yaml"))
end

local function distro(name, kernel)
  local dir = work .. "/" .. name
  assert(os.execute("mkdir -p " .. q(dir)))
  return lab.write(dir .. "/distro.yaml", table.concat({
    "kind: ZarfDistro", "metadata: {name: prep}", "spec:", "  type: rke2", "  version: 1.35.4-rke2r1",
    "  config:", "    os:",
    "      sysctl: {net.ipv4.ip_forward: 1, net.ipv4.tcp_keepalive_time: 600}",
    "      env: {CS_PREP_PROXY: 'http://proxy.internal:3128', CS_PREP_NOTE: two words}",
    "      kernel: [" .. table.concat(kernel, ", ") .. "]",
    "      files: " .. run.container_selinux(work, dir), "" }, "\n"))
end

local function each_host(cmd)
  for i = 1, N do
    local code, out = run.ssh(i, cmd)
    assert(code == 0, "h" .. i .. ": " .. out)
  end
end

local function reset()
  each_host("sysctl -qw net.ipv4.ip_forward=0 net.ipv4.tcp_keepalive_time=7200;"
    .. " rm -f /etc/sysctl.d/99-cargoship.conf /etc/modules-load.d/overlay.conf /etc/modules-load.d/br_netfilter.conf;"
    .. " sed -i '/^CS_PREP_/d' /etc/environment; rm -rf /var/lib/cargoship/prepare;"
    .. " sed -i '/^# BEGIN cargoship/,/^# END cargoship/d; /operator-line/d' /etc/hosts; echo "
    .. q(OPERATOR_LINE) .. " >> /etc/hosts")
end

setup(function()
  work = run.work()
  run.cluster(work, HOSTS, function(i)
    if i == 1 then return "      environment: {CS_PREP_ROLE: controller}" end
  end)
  distro("good", { "overlay" })
  distro("badmod", { "overlay", "br_netfilter" })
  reset()
end)

teardown(function()
  pcall(reset)
  if work then os.execute("rm -rf " .. q(work)) end
end)

describe("apply -H with a package's env, sysctl and modules", function()
  local plan, first, second, hosts_before, up0, up1, up2, up3

  setup(function()
    hosts_before = {}
    for i = 1, N do hosts_before[i] = select(2, run.ssh(i, "cat /etc/hosts")) end
    up0 = run.uppers(N)
    plan = run.apply(work, "--dry-run -H" .. pkg_args("good"))
    up1 = run.uppers(N)
    first = run.apply(work, "--confirm -H" .. pkg_args("good"))
    up2 = run.uppers(N)
    second = run.apply(work, "--confirm -H" .. pkg_args("good"))
    up3 = run.uppers(N)
  end)

  it("plans the environment, the drop-in and the hosts block in a dry run that writes no byte", function()
    assert.are.equal(3, plan.code, plan.stderr)
    run.assert_unchanged(up0, up1, N)
    local prep, hosts = run.phase(plan.doc, "prepare_hosts"), run.phase(plan.doc, "update_hosts")
    assert.are.equal("would_act", prep.verdict)
    assert.are.equal(N, #prep.hosts)
    local kinds = {}
    for i, a in ipairs(prep.hosts[1].actions) do kinds[i] = a.kind .. " " .. (a.path or a.name or a.cmd) end
    assert.are.same({ "write /var/lib/cargoship/prepare/environment", "write /etc/environment", "step reconnect",
      "write /etc/sysctl.d/99-cargoship.conf", "run sysctl -p '/etc/sysctl.d/99-cargoship.conf'",
      "write /var/lib/cargoship/prepare/modules", "write /etc/modules-load.d/overlay.conf" }, kinds,
      "overlay is built into the lab's kernel: its file is written, nothing is loaded")
    assert.are.equal("would_act", hosts.verdict)
    for _, h in ipairs(hosts.hosts) do assert.are.same({ "write", "/etc/hosts" }, { h.actions[1].kind,
      h.actions[1].path }) end
  end)

  it("does what the plan said, on every host", function()
    assert.are.equal(0, first.code, first.stderr)
    local all = run.compare(plan.doc, first.doc)
    for _, x in ipairs(all) do assert.are.equal("done", x.action.outcome, x.phase .. " on " .. x.host) end
  end)

  it("leaves the sysctl values live and the environment in a new login", function()
    for i = 1, N do
      local code, out = run.ssh(i, "sysctl -n net.ipv4.ip_forward net.ipv4.tcp_keepalive_time;"
        .. " printf '%s|%s|%s\\n' \"$CS_PREP_PROXY\" \"$CS_PREP_NOTE\" \"$CS_PREP_ROLE\"")
      assert.are.equal(0, code, out)
      assert.are.equal("1\n600\nhttp://proxy.internal:3128|two words|" .. (i == 1 and "controller" or "") .. "\n", out,
        "h" .. i)
    end
  end)

  it("makes every host resolve every other by FQDN and short name, and keeps the other lines", function()
    for i = 1, N do
      local names = {}
      for j = 1, N do names[#names + 1] = "h" .. j .. ".lab.internal h" .. j end
      local code, out = run.ssh(i, "for n in " .. table.concat(names, " ") .. "; do getent hosts $n || echo MISSING $n;"
        .. " done")
      assert.are.equal(0, code, out)
      assert.is_nil(out:find("MISSING", 1, true), "h" .. i .. ": " .. out)
      for j, h in ipairs(HOSTS) do
        assert.matches("\n?" .. h.address:gsub("%.", "%%.") .. "%s+h" .. j .. "%.lab%.internal", out)
      end
      local _, now = run.ssh(i, "cat /etc/hosts")
      local outside = now:gsub("# BEGIN cargoship[^\n]*\n.-# END cargoship\n", "")
      assert.are.equal(hosts_before[i], outside, "h" .. i .. ": lines outside the block")
      assert.matches(OPERATOR_LINE, now, 1, true)
    end
  end)

  it("has nothing to do the second time, and writes nothing", function()
    assert.are.equal(0, second.code, second.stderr)
    run.compare(second.doc.plan, second.doc)
    for _, id in ipairs { "prepare_hosts", "update_hosts" } do
      assert.are.equal("nothing_to_do", run.phase(second.doc.plan, id).verdict, id)
      assert.are.equal("nothing_to_do", run.verdict(second.doc, id), id)
    end
    run.assert_unchanged(up2, up3, N)
  end)
end)

describe("a kernel module the host cannot load", function()
  it("is foretold by the dry run on every host, naming the module; the real run refuses at the plan", function()
    local plan = run.apply(work, "--dry-run" .. pkg_args("badmod"))
    assert.are.equal(3, plan.code, plan.stderr)
    assert.are.equal(N, plan.doc.predicted)
    for _, h in ipairs(run.phase(plan.doc, "validate_hosts").hosts) do
      assert.are.same({ "kernel module br_netfilter cannot be loaded: not loaded, not built in, and modprobe does not"
        .. " find it" }, h.predicted)
    end
    local r = run.apply(work, "--confirm" .. pkg_args("badmod"))
    assert.are.equal(1, r.code, r.stderr)
    assert.are.equal("refused", r.doc.outcome)
    each_host("test ! -e /etc/modules-load.d/br_netfilter.conf")
  end)
end)

-- `cargoship prepare` (issue 21): on fresh hosts it makes the changes apply's phases 8-11 make, byte for byte.
-- Two hosts (the lab's second and third: rocky/systemd and debian/runit, so phase 9 installs
-- container-selinux on one), each reset to new by `lab.sh reset` before each command; their
-- upper dirs (every file written, with type, mode, owner and sha256; no mtimes) are compared.
-- About 30 s on a quiet machine.
describe("cargoship prepare on fresh hosts", function()
  local PAIR = { 2, 3 }
  local pwork

  local function fresh()
    local code, out = lab.lab("reset " .. table.concat(PAIR, " "))
    assert(code == 0, "lab.sh reset: " .. out)
  end

  -- The package manager's own books (dnf's logs, history and cache, the rpm database) hold
  -- the time of the install: for those the paths and modes are compared, not the bytes.
  local BOOKS = { "^/var/log/", "^/var/lib/dnf/history", "^/var/cache/dnf/", "^/var/lib/rpm/rpmdb%.sqlite$" }
  local function trees()
    local s = {}
    for _, i in ipairs(PAIR) do
      local _, dir = lab.lab("upper " .. i)
      s[i] = lab.tree_snapshot(dir:gsub("%s+$", ""), run.IGNORE, { xdev = true })
      for path, line in pairs(s[i]) do
        for _, b in ipairs(BOOKS) do
          if path:match(b) then s[i][path] = line:gsub(" sha256:%x+", "") end
        end
      end
    end
    return s
  end

  local function changes(cmd, args)
    fresh()
    local before = trees()
    local r = run.command(pwork, cmd, args)
    assert.are.equal(0, r.code, r.stderr .. r.stdout:sub(1, 1500))
    local after, out = trees(), {}
    for _, i in ipairs(PAIR) do out[i] = lab.snapshot_diff(before[i], after[i]) end
    return out, r
  end

  setup(function()
    pwork = run.work()
    run.cluster(pwork, { HOSTS[PAIR[1]], HOSTS[PAIR[2]] }, function(i)
      if i == 1 then return "      environment: {CS_PREP_ROLE: controller}" end
    end)
  end)
  teardown(function()
    pcall(fresh)
    if pwork then os.execute("rm -rf " .. q(pwork)) end
  end)

  it("writes the same bytes as apply's phases 8-11; kernel modules only with --enable-kernel-modules", function()
    local pkg = " --distro " .. q(run.built(work .. "/good/distro.yaml"))
    local by_prepare, r = changes("prepare", "--confirm --enable-kernel-modules" .. pkg)
    local ids = {}
    for _, p in ipairs(r.doc.phases) do ids[#ids + 1] = math.tointeger(p.number) .. " " .. p.id end
    assert.are.same({ "1 connect", "2 detect_os", "3 acquire_lock", "4 prepare_hosts", "5 enterprise_linux",
      "6 fapolicyd", "7 selinux_policy", "8 kernel_modules", "9 release_lock", "10 disconnect" }, ids)
    local by_apply = changes("apply", "--confirm --skip-phases 12-29" .. pkg)
    for _, i in ipairs(PAIR) do
      assert.is_true(#by_apply[i] > 3, "h" .. i .. ": apply changed little: " .. table.concat(by_apply[i], "\n"))
      assert.are.same(by_apply[i], by_prepare[i], "h" .. i)
    end
    local joined = table.concat(by_prepare[PAIR[1]], "\n")
    assert.matches("/etc/modules-load.d/overlay.conf", joined, 1, true)
    assert.matches("/etc/sysctl.d/99-cargoship.conf", joined, 1, true)
    local without = changes("prepare", "--confirm" .. pkg)
    for _, i in ipairs(PAIR) do
      assert.is_nil(table.concat(without[i], "\n"):find("modules-load.d/overlay", 1, true), "h" .. i)
    end
  end)
end)

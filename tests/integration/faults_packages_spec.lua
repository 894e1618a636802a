-- Integration spec on the lab: package-manager and engine faults mid-install (issue 23), each failing the host.
--
-- Takes ~3 min on a quiet machine (one k3s cluster of 2 hosts, installed once and shared).
-- Two lab hosts (lab.hosts(): the first Debian/runit as controller A, the first Debian/systemd
-- as worker B), reset (recreated as new) before and after; nothing else of the lab is touched.
-- On B a systemd generator sleeps 4 s while dpkg runs, so the postinst's `systemctl
-- daemon-reload` holds dpkg mid-configure: the moment a fault hits (/run/cs-dpkg-slow marks it).
-- 1. Ctrl-C while dpkg configures on B: the run stops (exit 130) with dpkg whole (no journal,
--    `dpkg --audit` silent); the re-run converges with the engine packages held (apt-mark
--    showhold) on both hosts, their files as packaged (dpkg --verify), and a dry run after it
--    has nothing pending.
-- 2. An rke2 package on the running k3s cluster: the dry run and the real run refuse at
--    phase 5, naming each host and both engines; nothing of rke2 is written.
-- 3. B rebooted (PID 1 killed and started again, disk kept) while dpkg configures in
--    Initialize Worker: B fails naming itself and the cause within its deadline, dpkg left
--    interrupted; the dry run plans the repair, and the re-run repairs it and converges.
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"

local q = util.quote

local pick = lab.pick
local A, HA = pick("debian", "runit")
local B, HB = pick("debian", "systemd")

local package_of = run.package
local lab_cmd = lab.must
local function ssh(i, cmd)
  local code, out = run.ssh(i, cmd)
  return out, code
end

local function cluster(work)
  local lines = { "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster", "metadata:", "  name: faults-pkg",
    "spec:", "  config:", "    loadbalancer: " .. HA.address, "  hosts:" }
  for n, h in ipairs { HA, HB } do
    lines[#lines + 1] = string.format("    - role: %s\n      ssh:\n        address: %s\n        user: root\n"
      .. "        keyPath: %s\n        options: {UserKnownHostsFile: %s}", n == 1 and "controller" or "worker",
      h.address, lab.key, lab.known_hosts)
  end
  lab.write(work .. "/cluster.yaml", table.concat(lines, "\n") .. "\n")
end

-- Starts `cargoship apply args` in the background; once ready() returns, signal (or not);
-- -> {code, secs (from the signal, or ready(), to the exit), stdout, stderr}.
local function apply_bg(work, args, ready, signal)
  local out, err, pidf = os.tmpname(), os.tmpname(), os.tmpname()
  local inner = string.format("echo $$ > %s; exec %s apply %s %s", pidf, q(lab.bin), args, q(work .. "/cluster.yaml"))
  local p = io.popen(string.format("env HOME=%s sh -c %s </dev/null >%s 2>%s & wait $!; echo $?", q(work),
    q(inner), q(out), q(err)))
  ready()
  local t0 = util.now()
  if signal then os.execute("kill -" .. signal .. " " .. lab.read(pidf):match("%d+")) end
  local code = tonumber(p:read("a"):match("%d+"))
  p:close()
  local r = { code = code, secs = util.now() - t0, stdout = lab.read(out), stderr = lab.read(err) }
  os.remove(out); os.remove(err); os.remove(pidf)
  return r
end

-- Polls host i until cmd succeeds; raises after limit seconds.
local function wait_for(i, cmd, limit, what)
  local t0 = util.now()
  while util.now() - t0 < limit do
    local _, code = ssh(i, cmd)
    if code == 0 then return end
    os.execute("sleep 0.2")
  end
  error("never happened within " .. limit .. " s: " .. what, 2)
end

local function holds(i)
  local out = ssh(i, "apt-mark showhold")
  local set = {}
  for name in out:gmatch("%S+") do set[name] = true end
  return set
end

-- systemd runs generators on every daemon-reload; this one sleeps while dpkg runs, so the
-- postinst's `systemctl daemon-reload` holds dpkg mid-configure for a few seconds.
local GENERATOR = "#!/bin/sh\npgrep -x dpkg >/dev/null || exit 0\ntouch /run/cs-dpkg-slow\nsleep 4\n"

local function slow_dpkg(i)
  local _, code = ssh(i, "mkdir -p /etc/systemd/system-generators && printf %s " .. q(GENERATOR)
    .. " >/etc/systemd/system-generators/cs-dpkg-slow && chmod 0755 /etc/systemd/system-generators/cs-dpkg-slow")
  assert.are.equal(0, code)
end

describe("faults in the package manager and the engine", function()
  local work, k3s
  local function apply(args) return run.apply(work, args .. " -F --ready-timeout 60 --distro " .. q(k3s)) end

  setup(function()
    k3s = package_of("k3s")
    work = run.work()
    cluster(work)
    lab_cmd("reset " .. A .. " " .. B)
    slow_dpkg(B)
  end)
  teardown(function()
    if work then os.execute("rm -rf " .. q(work)) end
    lab_cmd("reset " .. A .. " " .. B)   -- a failed reset is this spec's failure, not the next one's
  end)

  it("Ctrl-C while dpkg configures leaves dpkg whole; the re-run converges with the packages held", function()
    local r = apply_bg(work, "--confirm -F --ready-timeout 60 --distro " .. q(k3s), function()
      wait_for(B, "test -e /run/cs-dpkg-slow", 120, "dpkg configuring on " .. HB.name)
    end, "INT")
    assert.are.equal(130, r.code, r.stderr)
    assert.is_true(r.secs < 30, r.secs .. " s from Ctrl-C to the exit")
    wait_for(B, "! pgrep -x dpkg && ! pgrep -x apt-get", 30, "dpkg and apt-get ended on " .. HB.name)
    assert.are.equal("", ssh(B, "ls -A /var/lib/dpkg/updates; dpkg --audit"), "dpkg was left interrupted")
    assert.is_nil(holds(B)["k3s-agent"])   -- the pin never ran: the re-run must see that

    local again = apply("--confirm")
    assert.are.equal(0, again.code, again.stderr)
    assert.are.same({ ["k3s-common"] = true, ["k3s-server"] = true }, holds(A))
    assert.are.same({ ["k3s-common"] = true, ["k3s-agent"] = true }, holds(B))
    for _, i in ipairs { A, B } do
      local out, code = ssh(i, "dpkg --verify k3s-common k3s-server k3s-agent 2>/dev/null; dpkg --audit")
      assert.are.equal(0, code)
      assert.are.equal("", out, "installed files differ from the packages'")
    end
    local dry = apply("--dry-run")
    assert.are.equal(0, dry.code, dry.stdout .. dry.stderr)
  end)

  it("refuses an rke2 package on the running k3s cluster at the plan, naming host and both engines", function()
    local rke2 = package_of("rke2")
    for _, mode in ipairs { "--dry-run", "--confirm" } do
      local r = run.apply(work, mode .. " -F --distro " .. q(rke2))
      assert.are_not.equal(0, r.code)
      local text = r.stdout .. r.stderr
      assert.matches(HA.address .. ": runs k3s v1.35.2+k3s1 (k3s-server running); the package is rke2", text, 1, true)
      assert.matches(HB.address .. ": runs k3s v1.35.2+k3s1 (k3s-agent running); the package is rke2", text, 1, true)
    end
    for _, i in ipairs { A, B } do
      assert.are.equal("", ssh(i, "ls -d /etc/rancher/rke2 /var/lib/rancher/rke2 2>/dev/null; true"))
    end
    assert.are.equal(0, apply("--dry-run").code)
  end)

  it("a worker rebooted while dpkg configures in Initialize Worker fails in time; the re-run repairs dpkg", function()
    -- B reinstalled: the cluster forgets its node (and node password) first, so it joins anew
    local _, code = ssh(A, "/usr/local/bin/k3s kubectl delete node " .. HB.name)
    assert.are.equal(0, code)
    lab_cmd("reset " .. B)
    slow_dpkg(B)
    local r = apply_bg(work, "--confirm -F --ready-timeout 60 --distro " .. q(k3s), function()
      wait_for(B, "test -e /run/cs-dpkg-slow", 120, "dpkg configuring on " .. HB.name)
      lab_cmd("reboot " .. B)
    end)
    assert.are_not.equal(0, r.code, r.stderr)
    assert.are_not.equal(130, r.code, r.stderr)
    assert.is_true(r.secs < 60, r.secs .. " s from the reboot to the exit")
    local text = r.stdout .. r.stderr
    assert.matches(HB.address .. " | error: " .. HB.address .. ": ", text, 1, true)
    assert.matches("phase 22/%d+ Initialize Worker: FAILED on 1 of ", text)   -- the leader may count
    assert.are_not.equal("", ssh(B, "ls -A /var/lib/dpkg/updates; dpkg --audit"), "the reboot left dpkg whole")

    local dry = apply("--dry-run")
    assert.are.equal(3, dry.code, dry.stderr)
    assert.matches("dpkg --configure -a", dry.stdout, 1, true)
    local again = apply("--confirm")
    assert.are.equal(0, again.code, again.stderr)
    assert.are.same({ ["k3s-common"] = true, ["k3s-agent"] = true }, holds(B))
    assert.are.equal("", ssh(B, "dpkg --verify k3s-common k3s-agent; ls -A /var/lib/dpkg/updates; dpkg --audit"))
    local after = apply("--dry-run")
    assert.are.equal(0, after.code, after.stdout .. after.stderr)
  end)
end)

-- Integration spec on the lab: the dry run foretells what a later phase would fail on (issue 23, Deliver 2).
--
-- About 30 s on a quiet machine (five passes of apply over two Debian hosts, no install), and
-- about 6 s more for the rpm cases (five passes of apply over one rocky host).
-- Real apt/dpkg in the lab hosts: the package carries a .deb (built here by dpkg-deb) that
-- depends on a package no host has; apt's own simulation finds it, per host, before any
-- upload: `apt-get -s satisfy` of the declared dependencies on a host without the file,
-- `apt-get -s install` of the staged file on a host that has it. Also an unresolvable load
-- balancer and a full disk (a 1 MiB tmpfs over an upload's directory on one host).
-- Rocky hosts (real rpm, the lab's rpm database): an .rpm built here by rpmbuild, not on the
-- host, whose header (read locally) requires a capability nothing there provides.
-- Done when (issue 23): the dry run exits 3 with each host's line naming the cause; a real
-- run refuses at the plan and writes nothing; each check costs the run under a second per host.
-- Faults go on this spec's own two hosts only, and are undone in teardown.
local cjson = require "cjson"
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"

local q = util.quote
local CTL = lab.find("debian", "systemd")
local WRK = lab.find("debian", "runit")
local function index(h) return tonumber(h.name:match("%d+")) end
local DEB_TARGET = "/var/lib/cs-predict/deb/cs-predict_1.0-1_all.deb"
local BIG_DIR = "/var/lib/cs-predict/big"
local MISSING = "cs-predict-needs needs cs-predict-absent (>= 1): not installable"
local RPM_HOST = lab.find("rocky", "runit")
local RPM_TARGET = "/var/lib/cs-predict/rpm/cs-predict-needs-1.0-1.noarch.rpm"

local work, bad_pkg, good_pkg

local function sh(cmd)
  local code, out = lab.sh(cmd)
  assert(code == 0, cmd .. ": " .. out)
  return out
end

local function ssh(h, cmd) return run.ssh(index(h), cmd) end

-- the package cs-predict-needs, with those Depends, built under work/<dir>
local function deb(dir, depends)
  local d = work .. "/" .. dir .. "/cs-predict-needs"
  sh("mkdir -p " .. q(d .. "/DEBIAN"))
  lab.write(d .. "/DEBIAN/control", table.concat({ "Package: cs-predict-needs", "Version: 1.0-1", "Architecture: all",
    "Maintainer: cargoship lab <lab@cargoship.invalid>", "Depends: " .. depends, "Description: predict spec", "" },
    "\n"))
  sh("dpkg-deb --build " .. q(d) .. " " .. q(d .. ".deb") .. " >/dev/null")
  return d .. ".deb"
end

local function package(name, debfile, rpmfile)
  local dir = work .. "/" .. name .. "/pkg"
  sh("mkdir -p " .. q(dir))
  return run.built(lab.write(dir .. "/distro.yaml", string.format([[
apiVersion: zarf.dev/v1alpha1
kind: ZarfDistro
metadata: {name: %s, version: 1.35.2-k3s1, architecture: amd64}
spec:
  type: k3s
  version: 1.35.2-k3s1
  config:
    files:
      - {source: %s, target: %s/blob.bin}
    os:
      files:
        - {source: %s, target: %s, selector: {package: %s}}
]], name, work .. "/blob.bin", BIG_DIR, rpmfile or debfile, rpmfile and RPM_TARGET or DEB_TARGET,
  rpmfile and "rpm" or "apt")))
end

local function cluster(lb, only)
  local opts = { user = "root", options = "{UserKnownHostsFile: " .. lab.known_hosts .. "}" }
  local hosts = only and { "    - role: controller", "      " .. lab.block(only, opts) }
    or { "    - role: controller", "      " .. lab.block(CTL, opts),
         "    - role: worker", "      " .. lab.block(WRK, opts) }
  return lab.write(work .. "/cluster.yaml", table.concat({ "apiVersion: zarf.dev/v1alpha1", "kind: ZarfCluster",
    "metadata: {name: predict}", "spec:", "  config:", "    loadbalancer: " .. lb, "  hosts:",
    table.concat(hosts, "\n"), "" }, "\n"))
end

-- the rpm cs-predict-needs (requiring python3, which the lab's rpm database provides, and
-- cs-predict-absent >= 1, which nothing does), built by rpmbuild under work/rpm
local function rpm()
  local d = work .. "/rpm"
  sh("mkdir -p " .. q(d))
  lab.write(d .. "/cs.spec", table.concat({ "Name: cs-predict-needs", "Version: 1.0", "Release: 1",
    "Summary: predict spec", "License: MIT", "BuildArch: noarch", "AutoReqProv: no",
    "Requires: python3, cs-predict-absent >= 1", "%description", "predict spec", "%files", "" }, "\n"))
  sh(string.format("rpmbuild --quiet -bb %s --define %s --define %s", q(d .. "/cs.spec"), q("_topdir " .. d),
    q("_rpmdir " .. d)))
  return d .. "/noarch/cs-predict-needs-1.0-1.noarch.rpm"
end

local function host_entry(doc, id, h)
  for _, e in ipairs(run.phase(doc, id).hosts) do
    if e.host == h.address then return e end
  end
  error("no " .. id .. " entry for " .. h.address)
end

local function predicted(doc, h)
  local e = host_entry(doc, "validate_hosts", h)
  return e.predicted == cjson.null and {} or e.predicted
end

local function uppers()
  return { lab.upper_tree(index(CTL), run.IGNORE), lab.upper_tree(index(WRK), run.IGNORE) }
end

setup(function()
  work = run.work()
  sh("head -c 2097152 /dev/urandom > " .. q(work .. "/blob.bin"))
  bad_pkg = package("bad", deb("bad", "python3, cs-predict-absent (>= 1)"))
  good_pkg = package("good", deb("good", "python3"))
end)

teardown(function()
  ssh(WRK, "umount " .. q(BIG_DIR) .. " 2>/dev/null; rm -rf /var/lib/cs-predict")
  ssh(CTL, "rm -rf /var/lib/cs-predict")
  ssh(RPM_HOST, "rm -rf /var/lib/cs-predict")
  if work then os.execute("rm -rf " .. q(work)) end
end)

describe("the dry run's forecast", function()
  it("finds nothing to foretell on hosts that have what the package needs", function()
    cluster(CTL.address)
    local r = run.apply(work, "--dry-run --distro " .. q(good_pkg))
    assert.are.equal(3, r.code, r.stderr)
    assert.are.equal(0, r.doc.predicted)
    assert.are.same({}, predicted(r.doc, CTL))
    assert.are.same({}, predicted(r.doc, WRK))
  end)

  it("names a missing package dependency per host; the real run refuses at the plan and writes nothing", function()
    cluster(CTL.address)
    local r = run.apply(work, "--dry-run --distro " .. q(bad_pkg))
    assert.are.equal(3, r.code, r.stderr)
    assert.are.equal(2, r.doc.predicted)
    for _, h in ipairs { CTL, WRK } do
      assert.are.same({ "the engine packages cannot install: " .. MISSING .. " (apt-get -s satisfy)" },
        predicted(r.doc, h))
    end
    local before = uppers()
    local real = run.apply(work, "--confirm --distro " .. q(bad_pkg))
    assert.are.equal(1, real.code, real.stderr)
    assert.are.equal("refused", real.doc.outcome)
    assert.matches("the plan foretells a failure on 2 hosts", real.doc.error, 1, true)
    assert.matches("would fail: the engine packages cannot install: " .. MISSING, real.stderr .. real.stdout, 1, true)
    local after = uppers()
    assert.are.same({}, lab.snapshot_diff(before[1], after[1]), CTL.name .. "'s upper dir")
    assert.are.same({}, lab.snapshot_diff(before[2], after[2]), WRK.name .. "'s upper dir")
  end)

  it("simulates a staged .deb, and names an unresolvable load balancer and a full disk, each under a second", function()
    -- the staged file where the upload phase puts it, and a disk too small for the 2 MiB upload
    local code, out = ssh(WRK, "mkdir -p " .. q(DEB_TARGET:match("^(.*)/")) .. " " .. q(BIG_DIR)
      .. " && mount -t tmpfs -o size=1m tmpfs " .. q(BIG_DIR))
    assert(code == 0, out)
    sh(string.format("ssh -F %s %s %s < %s", q(lab.state .. "/ssh_config"), WRK.name, q("cat > " .. DEB_TARGET),
      q(work .. "/bad/cs-predict-needs.deb")))
    cluster("lb.cs-predict.invalid")
    local plain = run.apply(work, "--dry-run")
    local r = run.apply(work, "--dry-run --distro " .. q(bad_pkg))
    assert.are.equal(3, r.code, r.stderr)
    assert.are.same({ "the engine packages cannot install: " .. MISSING .. " (apt-get -s install)",
      "no space left for the uploads on " .. BIG_DIR .. " (" .. BIG_DIR .. "): 1.0 MiB free, 2.0 MiB needed",
      "cannot resolve lb.cs-predict.invalid:6443 (the load balancer): the engine could not join" },
      predicted(r.doc, WRK))
    -- the leader joins nothing; its package line is the declared-dependency simulation's
    assert.are.same({ "the engine packages cannot install: " .. MISSING .. " (apt-get -s satisfy)" },
      predicted(r.doc, CTL))
    -- the join probe rides in one batch with phase 5's reads (validate_hosts' prefetch): phases 4
    -- and 5 cost each host one round trip, the worker with its join probe as the leader without
    for _, h in ipairs { CTL, WRK } do
      local trips = host_entry(r.doc, "validate_hosts", h).round_trips
        + host_entry(r.doc, "distro_facts", h).round_trips
      assert.are.equal(1, trips, h.name .. ": round trips of phases 4 and 5")
    end
    -- the forecast's cost: what gathering facts took beyond a run without a package (the
    -- local hashing of the package's files included), and the validation (the join probe):
    -- under a second per host, the hosts being probed at once (on a loaded machine too)
    local extra = run.phase(r.doc, "gather_facts").elapsed - run.phase(plain.doc, "gather_facts").elapsed
    local check = run.phase(r.doc, "validate_hosts").elapsed
    io.stderr:write(string.format("forecast: gather_facts +%.3f s, validate_hosts %.3f s (2 hosts)\n", extra, check))
    assert.is_true(extra < 2, "gather_facts took " .. extra .. " s more with the forecast")
    assert.is_true(check < 2, "validate_hosts took " .. check .. " s")
  end)

  it("foretells nothing for the lab's k3s rpms on a rocky host: phase 9 installs their container-selinux", function()
    local k3s = (os.getenv("CARGOSHIP_BUILD_DIR") or (lab.src .. "/build")) .. "/lab-distros/k3s.tar.zst"
    assert(io.open(k3s), k3s .. " is missing: build the lab-distros target (cmake --build build -t lab-distros)")
    cluster(RPM_HOST.address, RPM_HOST)
    local r = run.apply(work, "--dry-run --distro " .. q(k3s))
    assert.are.equal(3, r.code, r.stderr)
    assert.are.same({}, predicted(r.doc, RPM_HOST))
    assert.are.equal(0, r.doc.predicted)
  end)

  it("names a requirement of an rpm not yet on a rocky host; the real run refuses at the plan", function()
    local rpm_file = rpm()
    local rpm_pkg = package("rpm", nil, rpm_file)
    cluster(RPM_HOST.address, RPM_HOST)
    local want = "the engine packages cannot install: cs-predict-needs needs cs-predict-absent >= 1"
      .. " (rpm -q --whatprovides)"
    -- phase 9 would want a container-selinux rpm (SELinux enforces on rocky hosts): not this spec's part
    local r = run.apply(work, "--dry-run --skip-phases 9 --distro " .. q(rpm_pkg))
    assert.are.equal(3, r.code, r.stderr)
    assert.are.same({ want }, predicted(r.doc, RPM_HOST))
    local before = lab.upper_tree(index(RPM_HOST), run.IGNORE)
    local real = run.apply(work, "--confirm --skip-phases 9 --distro " .. q(rpm_pkg))
    assert.are.equal(1, real.code, real.stderr)
    assert.are.equal("refused", real.doc.outcome)
    assert.matches("would fail: " .. want, real.stderr .. real.stdout, 1, true)
    assert.are.same({}, lab.snapshot_diff(before, lab.upper_tree(index(RPM_HOST), run.IGNORE)), RPM_HOST.name)
    -- staged where the upload phase puts it: rpm's own transaction test of the file; the same
    -- size with one header byte changed is not the package (its header digest), so not simulated
    local f = assert(io.open(rpm_file, "rb"))
    local bytes = f:read("a")
    f:close()
    local i = bytes:find("MIT", 1, true)
    for _, case in ipairs { { bytes, "cs-predict-needs-1.0-1.noarch needs cs-predict-absent >= 1 (rpm -U --test)" },
                            { bytes:sub(1, i - 1) .. "XIT" .. bytes:sub(i + 3), "cs-predict-needs needs"
                              .. " cs-predict-absent >= 1 (rpm -q --whatprovides)" } } do
      lab.write(work .. "/staged.rpm", case[1])
      local code, out = ssh(RPM_HOST, "mkdir -p " .. q(RPM_TARGET:match("^(.*)/")))
      assert(code == 0, out)
      sh(string.format("ssh -F %s %s %s < %s", q(lab.state .. "/ssh_config"), RPM_HOST.name, q("cat > " .. RPM_TARGET),
        q(work .. "/staged.rpm")))
      r = run.apply(work, "--dry-run --skip-phases 9 --distro " .. q(rpm_pkg))
      assert.are.equal(3, r.code, r.stderr)
      assert.are.same({ "the engine packages cannot install: " .. case[2] }, predicted(r.doc, RPM_HOST))
    end
  end)
end)

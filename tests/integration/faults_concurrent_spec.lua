-- Fault spec on the lab (issue 23): two real applies started at once over the same hosts.
--
-- Takes ~25 s on a quiet machine (measured 37 s at load average 20, 105 s at 90-150).
-- Two lab hosts (the first Debian/systemd and the first
-- Debian/runit), one built package with a 32 MiB file and stub engine files (the engine phases
-- left out, as faults_upload_spec); the second host's link slowed with tc so the winner holds
-- its locks for seconds while the other run reaches them. Exactly one run proceeds (exit 0),
-- the other exits 4 naming the holder (its pid) having written nothing (no upload phase ran);
-- nothing is half-written (no temp name, every target whole: the bytes of a run alone), no
-- lock is left, no line of the files cargoship edits is doubled; an apply after them has
-- nothing left to do.
local util = require "cargoship.util"
local lab = require "integration.lab"
local run = require "integration.apply_run"
local packages = require "integration.packages"

local q = util.quote
local DIR = "/opt/cs-conc"

local pick = lab.pick
local A, HA = pick("debian", "systemd")
local B, HB = pick("debian", "runit")

local function ssh(i, cmd)
  local code, out = run.ssh(i, cmd)
  return out, code
end

local function distro_yaml(p)
  return string.format([[
apiVersion: zarf.dev/v1alpha1
kind: ZarfDistro
metadata: {name: conc-test, version: 1.35.4-rke2r1, architecture: amd64}
spec:
  type: rke2
  version: 1.35.4-rke2r1
  config:
    files:
      - {data: "concurrent test\n", target: /etc/cs-conc/small.txt}
      - {source: %s, target: %s/blob.bin, shasum: "%s"}
    os:
      files:
        - {source: %s, target: /var/lib/rancher/rke2/deb/cs-test_1.0_all.deb, selector: {package: apt}}
]], p.big, DIR, p.big_sha256, p.deb)
end

-- B's veth end in the lab namespace slowed (rate) or back to plain (nil).
local function shape(rate)
  local prefix = os.getenv("LAB_PREFIX") or "cs"
  local cmd = string.format("ip netns exec %s-lab tc qdisc %s dev %sv%d root", prefix, rate and "replace" or "del",
    prefix, B) .. (rate and (" tbf rate " .. rate .. " burst 32kbit latency 400ms") or "")
  local code, out = lab.sh(cmd)
  assert(code == 0 or not rate, cmd .. ": " .. out)
end

local PATHS = DIR .. " /etc/cs-conc /var/lib/rancher/rke2/deb /etc/cargoship /var/lib/cargoship"

-- The bytes of every file cargoship put on host i.
local function state(i)
  return ssh(i, "find " .. PATHS .. " -type f -print0 2>&1 | sort -z | xargs -0 sha256sum")
end

local function temps(i)
  local out = ssh(i, "find " .. PATHS .. " -name '.*.cargoship*' 2>/dev/null | grep -c .; true")
  return tonumber(out:match("%d+")) or -1
end

local function duplicated(i)
  return ssh(i, "for f in /var/lib/cargoship/manifest.txt; do sort \"$f\" | uniq -d | sed \"s|^|$f: |\"; done")
end

local function clean_hosts()
  for _, i in ipairs { A, B } do
    ssh(i, "rm -rf " .. DIR .. " /etc/cs-conc /var/lib/rancher /var/lib/cargoship/manifest.txt "
      .. "/etc/cargoship/distro-release.json; dpkg -r cs-test >/dev/null 2>&1; true")
  end
end

describe("two real applies started at once over the same hosts", function()
  local work, pkg, REF

  local function apply(extra)
    return lab.run_bin(work, "apply --confirm" .. run.NO_ENGINE .. " --distro " .. q(pkg) .. " " .. (extra or "") .. " "
      .. q(work .. "/cluster.yaml"))
  end

  local function assert_unlocked()
    local _, out = lab.sh(string.format("env HOME=%s %s unlock %s </dev/null", q(work), q(lab.bin),
      q(work .. "/cluster.yaml")))
    for _, h in ipairs { HA, HB } do assert.matches(h.address .. ": not locked", out, 1, true) end
  end

  setup(function()
    work = run.work()
    assert(os.execute("mkdir -p " .. q(work .. "/src")))
    local p = packages.build { big_mib = 32 }
    lab.write(work .. "/src/distro.yaml", distro_yaml(p))
    local code, out = lab.sh(q(lab.bin) .. " package create " .. q(work .. "/src") .. " -o " .. q(work))
    assert(code == 0, out)
    pkg = out:match("([^\n]+)\n?$")
    run.cluster(work, { HA, HB })
    clean_hosts()
    -- the reference: the bytes a run alone leaves
    local r = apply()
    assert.are.equal(0, r.code, r.all)
    REF = { [A] = state(A), [B] = state(B) }
    assert.matches(p.big_sha256, REF[B], 1, true)
    clean_hosts()
  end)
  teardown(function()
    shape(nil)
    clean_hosts()
    if work then os.execute("rm -rf " .. q(work)) end
  end)

  it("exactly one proceeds, the other exits 4 naming the holder and writes nothing; the next apply has nothing "
    .. "to do", function()
    shape("80mbit")   -- the 32 MiB upload to B takes ~3.5 s: the winner holds its locks that long
    local files = {}
    local sh = {}
    for _, n in ipairs { "a", "b" } do
      files[n] = { out = work .. "/" .. n .. ".out", pid = work .. "/" .. n .. ".pid" }
      sh[#sh + 1] = string.format("sh -c %s >%s 2>&1 </dev/null & p%s=$!", q("echo $$ > " .. q(files[n].pid)
        .. "; exec " .. q(lab.bin) .. " apply --confirm" .. run.NO_ENGINE .. " --distro " .. q(pkg) .. " "
        .. q(work .. "/cluster.yaml")), q(files[n].out), n)
    end
    local code, out = lab.sh("export HOME=" .. q(work) .. "; " .. table.concat(sh, "; ")
      .. "; wait $pa; echo a=$?; wait $pb; echo b=$?")
    shape(nil)
    assert.are.equal(0, code, out)
    local rc = { a = tonumber(out:match("a=(%d+)")), b = tonumber(out:match("b=(%d+)")) }
    local winner, loser = "a", "b"
    if rc.b == 0 then winner, loser = "b", "a" end
    local wtext, ltext = lab.read(files[winner].out), lab.read(files[loser].out)
    assert.are.same({ 0, 4 }, { rc[winner], rc[loser] }, "a: " .. lab.read(files.a.out) .. "\nb: "
      .. lab.read(files.b.out))
    local wpid = lab.read(files[winner].pid):match("%d+")
    assert.matches("another cargoship holds the lock at /run/cargoship/lock", ltext, 1, true)
    assert.matches("(pid " .. wpid .. ", ", ltext, 1, true)
    -- the loser stopped at the lock: no upload of its ran, on any host
    assert.matches("\n +14%. Upload files to hosts: skipped %(not reached%)", ltext)
    assert.matches("phase 7/%d+ Acquire exclusive host lock: FAILED", ltext)
    assert.matches("phase %d+/%d+ Upload files to hosts: ran", wtext)
    for _, i in ipairs { A, B } do
      assert.are.equal(REF[i], state(i), "host " .. i .. ": every target whole, as a run alone leaves it")
      assert.are.equal(0, temps(i), "temp names left on host " .. i)
      assert.are.equal("", duplicated(i))
    end
    assert_unlocked()
    local again = apply()
    assert.are.equal(0, again.code, again.all)
    assert.matches("nothing to apply", again.all, 1, true)
    for _, i in ipairs { A, B } do assert.are.equal(REF[i], state(i)) end
  end)
end)

-- Specs of phase 25 "Install staged files": packages not at the staged version are installed; binaries move.
local phase = require "cargoship.phases.install_staged"
local os_registry = require "cargoship.os"

local Context = require("cargoship.pipeline.context").Context

local function ctx_for(os_files)
  return setmetatable({ distro = { type = "rke2", version = "1.35.4-rke2r1", os_files = os_files, files = {},
                                   images = {}, image_config = {} }, hosts = {}, options = {} },
                      { __index = Context })
end

local function staged_file(content)
  local p = os.tmpname()
  local f = assert(io.open(p, "wb"))
  f:write(content)
  f:close()
  return p
end

local function entry(package, target, staged, extra)
  local e = { list = "os", target = target, staged = staged, mode = package == "binary" and "0755" or "0644",
              symlinks = {}, selector = { package = package, arch = {} } }
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end

-- a host answering every probe with `answer`, recording the commands
local function host(os_id, answer)
  local h = { name = "h1", role = "worker", facts = { arch = "amd64" }, sent = {} }
  h.os = assert(os_registry.by_name(os_id)):new { service_manager = "systemd" }
  function h.probe(self, cmd)
    self.sent[#self.sent + 1] = cmd
    return answer, "", 0
  end
  return h
end

describe("phase install_staged", function()
  local rpm, deb, bin
  setup(function()
    rpm, deb, bin = staged_file("rpm"), staged_file("deb"), staged_file("#!/bin/sh\n")
  end)
  teardown(function() os.remove(rpm) os.remove(deb) os.remove(bin) end)

  it("installs with dnf what rpm does not have at the staged version, and pins it", function()
    local ctx = ctx_for({ entry("rpm", "/var/lib/rancher/rke2/rpm/a.rpm", rpm),
                          entry("rpm", "/var/lib/rancher/rke2/rpm/b.rpm", rpm) })
    local h = host("rocky", "P 1 rke2-common 1.35.4-1 1.35.4-1\nP 2 rke2-server 1.35.4-1 1.34.0-1\n")
    local acts = phase.assess(ctx, h)
    assert.matches("rpm %-qp", h.sent[1])
    assert.equal(2, #acts)
    assert.matches("install %-y %-%-nogpgcheck '/var/lib/rancher/rke2/rpm/b%.rpm'$", acts[1].cmd)
    assert.matches("versionlock add 'rke2%-server'", acts[2].cmd)
  end)

  it("has nothing to do when every staged package is installed at its version", function()
    local ctx = ctx_for({ entry("rpm", "/var/lib/rancher/rke2/rpm/a.rpm", rpm) })
    assert.same({}, phase.assess(ctx, host("rocky", "P 1 rke2-common 1.35.4-1 1.35.4-1\n")))
  end)

  it("installs staged .debs with apt-get from their paths, never apt-get update", function()
    local ctx = ctx_for({ entry("apt", "/var/lib/rancher/rke2/deb/a.deb", deb) })
    local acts = phase.assess(ctx, host("debian", "P 1 cs-test 1.0 -\n"))
    assert.matches("apt%-get %-q %-y install '/var/lib/rancher/rke2/deb/a%.deb'", acts[1].cmd)
    for _, a in ipairs(acts) do assert.is_nil(a.cmd:find("update", 1, true)) end
  end)

  it("repairs an interrupted dpkg transaction before installing, and lets no cancellation kill either", function()
    local ctx = ctx_for({ entry("apt", "/var/lib/rancher/rke2/deb/a.deb", deb) })
    local h = host("debian", "P 1 cs-test 1.0 - -\n#cs-pm\nI dpkg was interrupted (its journal /var/lib/dpkg/updates"
      .. " is not empty)\nI dpkg --audit: cs-test is not fully installed\n")
    local acts = phase.assess(ctx, h)
    assert.matches("dpkg --audit", h.sent[1], 1, true)      -- in the probe the phase sends anyway
    assert.equal(1, #h.sent)
    assert.equal("env DEBIAN_FRONTEND=noninteractive dpkg --configure -a", acts[1].cmd)
    assert.equal("repair the package manager's interrupted transaction (dpkg was interrupted (its journal"
      .. " /var/lib/dpkg/updates is not empty); dpkg --audit: cs-test is not fully installed)", acts[1].say)
    assert.matches("apt%-get %-q %-y install '/var/lib/rancher/rke2/deb/a%.deb'", acts[2].cmd)
    assert.matches("^apt%-mark hold 'cs%-test'", acts[3].cmd)
    for _, a in ipairs(acts) do assert.is_number(a.finish, a.say) end
  end)

  it("pins staged packages installed at their version but left unpinned (an install cut short before its pin)",
    function()
    local ctx = ctx_for({ entry("apt", "/var/lib/rancher/rke2/deb/a.deb", deb),
                          entry("apt", "/var/lib/rancher/rke2/deb/b.deb", deb) })
    local acts = phase.assess(ctx, host("debian", "P 1 cs-a 1.0 1.0 held\nP 2 cs-b 1.0 1.0 -\n#cs-pm\n"))
    assert.equal(1, #acts)
    assert.equal("apt-mark hold 'cs-b'", acts[1].cmd)
    assert.same({}, phase.assess(ctx, host("debian", "P 1 cs-a 1.0 1.0 held\nP 2 cs-b 1.0 1.0 held\n#cs-pm\n")))
  end)

  it("on rpm hosts reads pins from versionlock, and repairs a transaction that left two versions", function()
    local ctx = ctx_for({ entry("rpm", "/var/lib/rancher/rke2/rpm/a.rpm", rpm),
                          entry("rpm", "/var/lib/rancher/rke2/rpm/b.rpm", rpm) })
    local h = host("rocky", "P 1 rke2-common 1.35.4-1 1.35.4-1\nP 2 rke2-server 1.35.4-1 1.35.4-1\n#cs-pm\n"
      .. "I rpm lists two versions of rke2-common.x86_64\n#rpm\nrke2-server-0:1.35.4-1.*\n")
    local acts = phase.assess(ctx, h)
    assert.matches("locklist", h.sent[1], 1, true)   -- the plugin's list file, read: no dnf run
    assert.equal(2, #acts)
    assert.equal("dnf -y remove --duplicates", acts[1].cmd)
    assert.equal("dnf versionlock add 'rke2-common'", acts[2].cmd)
    -- without the versionlock plugin nothing can be pinned, and nothing is planned
    assert.same({}, phase.assess(ctx, host("rocky", "P 1 rke2-common 1.35.4-1 1.35.4-1\n"
      .. "P 2 rke2-server 1.35.4-1 1.35.4-1\n#cs-pm\n#rpm-nolock\n")))
  end)

  it("moves a staged binary onto its target and makes its links", function()
    local ctx = ctx_for({ entry("binary", "/usr/local/bin/rke2", bin,
      { symlinks = { "/usr/local/bin/rke2-alias" } }) })
    local acts = phase.assess(ctx, host("debian", "S1\nL 1:1 \n"))
    assert.same({ "run", "run" }, { acts[1].kind, acts[2].kind })
    assert.equal("mv -f -- '/usr/local/bin/rke2.cargoship-staged' '/usr/local/bin/rke2'", acts[1].cmd)
    assert.matches("ln %-sfn %-%- '/usr/local/bin/rke2' '/usr/local/bin/rke2%-alias'", acts[2].cmd)
    assert.same({}, phase.assess(ctx, host("debian", "L 1:1 /usr/local/bin/rke2\n")))
  end)

  it("leaves the hosts the Initialize and Upgrade phases install on to them (their plans carry the same records)",
    function()
    local ctx = ctx_for({ entry("binary", "/usr/local/bin/rke2", bin) })
    ctx.engine = require("distros.engine").for_package(ctx.distro)
    local function h(name, engine_fact)
      local x = host("debian", "")
      x.name, x.facts.engine = name, engine_fact
      return x
    end
    local fresh = h("fresh", { running = false, action = "install" })
    local stopped = h("stopped", { running = false, action = "same" })
    local upgrading = h("upgrading", { running = true, action = "upgrade" })
    local unjoined = h("unjoined", { running = true, joined = false, action = "upgrade" })
    ctx.hosts = { fresh, stopped, upgrading, unjoined }
    -- upgrading: phase 24's; one whose drain failed stays at its old version, not installed here
    assert.same({ stopped }, phase.prepare(ctx))
    -- a run that walks the Initialize and Upgrade phases, as the runner says: the same
    ctx.phase_ids = { initialize_controller = true, initialize_worker = true, upgrade_controller = true,
                      upgrade_worker = true, install_staged = true }
    assert.same({ stopped }, phase.prepare(ctx))
    -- --skip-phases 18-24: neither runs, so every host with staged files is this phase's
    ctx.phase_ids = { install_staged = true }
    assert.same({ fresh, stopped, upgrading, unjoined }, phase.prepare(ctx))
    ctx.phase_ids = nil
    -- without an engine no Initialize phase runs: every host with staged files is this phase's
    ctx.engine = nil
    assert.same({ fresh, stopped, upgrading, unjoined }, phase.prepare(ctx))
  end)
end)

-- The query itself, run in this machine's shell against package files built here by the real
-- dpkg-deb and rpmbuild, with each tool counted through a logging shim first on PATH.
describe("phase install_staged's query of the staged files", function()
  local util = require "cargoship.util"
  local shell = require "cargoship.shell"
  local install = require "cargoship.phases.lib.install"
  local q = util.quote
  local work

  local sh = require("unit.files").sh

  local function shim(tool)
    local p = work .. "/bin/" .. tool
    local f = assert(io.open(p, "w"))
    f:write("#!/bin/sh\necho " .. tool .. " >> " .. q(work .. "/calls") .. "\nexec /usr/bin/" .. tool .. ' "$@"\n')
    f:close()
    assert(os.execute("chmod 755 " .. q(p)))
  end

  setup(function()
    work = os.tmpname()
    os.remove(work)
    assert(os.execute("mkdir -p " .. q(work .. "/bin") .. " " .. q(work .. "/deb/DEBIAN")))
    local f = assert(io.open(work .. "/deb/DEBIAN/control", "w"))
    f:write("Package: cs-q\nVersion: 1:1.2-3\nArchitecture: all\nMaintainer: t <t@t>\nDescription: t\n")
    f:close()
    local out, code = sh("dpkg-deb -b " .. q(work .. "/deb") .. " " .. q(work .. "/cs-q.deb"))
    assert(code == 0, out)
    f = assert(io.open(work .. "/cs-r.spec", "w"))
    f:write("Name: cs-r\nVersion: 2.0\nRelease: 4.el9\nSummary: t\nLicense: MIT\nBuildArch: noarch\n"
      .. "%description\nt\n%files\n")
    f:close()
    out, code = sh(string.format("rpmbuild --quiet -bb %s --define %s --define %s", q(work .. "/cs-r.spec"),
      q("_topdir " .. work .. "/top"), q("_rpmdir " .. work .. "/rpms")))
    assert(code == 0, out)
    shim("dpkg-deb")
    shim("rpm")
  end)
  teardown(function() os.execute("rm -rf " .. q(work)) end)

  local function run(method, path)
    os.remove(work .. "/calls")
    local out = sh("PATH=" .. q(work .. "/bin") .. ":$PATH sh -c " .. q(shell.fmt(install.QUERY[method], path, "1")))
    local calls = sh("cat " .. q(work .. "/calls") .. " 2>/dev/null")
    return out, calls
  end

  it("reads a .deb's name and version with one dpkg-deb run", function()
    local out, calls = run("apt", work .. "/cs-q.deb")
    assert.are.equal("P 1 cs-q 1:1.2-3 - -\n", out)
    assert.are.equal("dpkg-deb\n", calls)
  end)

  it("reads an .rpm's name and version-release with one rpm run on the file", function()
    local path = sh("find " .. q(work .. "/rpms") .. " -name 'cs-r-*.rpm'"):match("[^\n]+")
    local out, calls = run("rpm", path)
    assert.are.equal("P 1 cs-r 2.0-4.el9 -\n", out)
    -- the file once, then the database once for the installed version
    assert.are.equal("rpm\nrpm\n", calls)
  end)

  it("says - for a file that is not there (a dry run before the upload)", function()
    assert.are.equal("P 1 - - - -\n", (run("apt", work .. "/absent.deb")))
    assert.are.equal("P 1 - - -\n", (run("rpm", work .. "/absent.rpm")))
  end)
end)

-- Specs for staged package installs per package manager and the SELinux probes (facts in, actions and facts out).
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"

local function cfg(id, o) return os_registry.by_name(id):new(o or { service_manager = "systemd" }) end

describe("install_local: staged package files", function()
  it("dnf installs the files unsigned, then pins them where versionlock exists", function()
    local acts = assert(cfg("rocky", { version_id = "9.4" }):install_local(
      { "/var/lib/rancher/rke2/rpm/rke2-common.rpm", "/var/lib/rancher/rke2/rpm/rke2-server.rpm" },
      { "rke2-common", "rke2-server" }))
    assert.equal(2, #acts)
    assert.equal("dnf install -y --nogpgcheck '/var/lib/rancher/rke2/rpm/rke2-common.rpm'"
      .. " '/var/lib/rancher/rke2/rpm/rke2-server.rpm'", acts[1].cmd)
    assert.equal("if dnf versionlock list >/dev/null 2>&1; then dnf versionlock add 'rke2-common' 'rke2-server';"
      .. " else echo 'warning: the dnf versionlock plugin is absent: rke2-common rke2-server not pinned' >&2; fi",
      acts[2].cmd)
    assert.equal("yum install -y --nogpgcheck '/tmp/a.rpm'",
      cfg("centos", { version_id = "7" }):install_local({ "/tmp/a.rpm" })[1].cmd)
  end)

  it("the plugin check really decides", function()
    local cmd = cfg("rocky"):install_local({ "/x.rpm" }, { "k3s" })[2].cmd
    local function run(dnf_answers)
      local p = io.popen("dnf() { " .. dnf_answers .. "; }; " .. cmd .. " 2>&1")
      local out = p:read("a")
      p:close()
      return out
    end
    assert.equal("warning: the dnf versionlock plugin is absent: k3s not pinned\n", run("return 1"))
    assert.equal("dnf versionlock add k3s\n", run('[ "$2" = list ] || echo "dnf $*"'))
  end)

  it("apt-get installs local .debs as paths, with no apt-get update, then holds them", function()
    local acts = assert(cfg("ubuntu"):install_local({ "/var/lib/kubernetes/deb/kubeadm.deb", "kubelet.deb" },
      { "kubeadm", "kubelet" }))
    assert.equal("env DEBIAN_FRONTEND=noninteractive apt-get -q -y install '/var/lib/kubernetes/deb/kubeadm.deb'"
      .. " './kubelet.deb'", acts[1].cmd)
    assert.equal("apt-mark hold 'kubeadm' 'kubelet'", acts[2].cmd)
    for _, a in ipairs(acts) do assert.is_nil(a.cmd:find("update", 1, true)) end
  end)

  it("zypper for SUSE; nothing for a bare linux; no files is a mistake", function()
    local acts = assert(cfg("sles"):install_local({ "/tmp/k3s-selinux.rpm" }, { "k3s-selinux" }))
    assert.equal("zypper --non-interactive install --allow-unsigned-rpm '/tmp/k3s-selinux.rpm'", acts[1].cmd)
    assert.equal("zypper --non-interactive addlock 'k3s-selinux'", acts[2].cmd)
    local none, why = require("cargoship.os.linux"):new({}):install_local({ "/x" })
    assert.is_nil(none)
    assert.matches("no package manager known", why)
    assert.same({ nil, "no package files given" }, { cfg("debian"):install_local({}) })
  end)
end)

describe("SELinux probes", function()
  it("read the mode and whether semodule is there", function()
    local rocky = cfg("rocky")
    assert.same({ mode = "enforcing", semodule = true, enforcing = true, policy_applies = true },
      rocky:parse_selinux(support.fixture("os/selinux-probe-rocky.txt")))
    assert.same({ mode = "absent", semodule = false, enforcing = false, policy_applies = false },
      cfg("debian"):parse_selinux(support.fixture("os/selinux-probe-debian.txt")))
    assert.equal("permissive", rocky:parse_selinux("mode=Permissive\nsemodule=yes\n").mode)
    assert.is_false(rocky:parse_selinux("mode=Permissive\nsemodule=yes\n").policy_applies)
  end)

  it("the probe runs in a plain shell and reports a host without SELinux", function()
    local p = io.popen("PATH=/nonexistent /bin/sh -c " .. require("cargoship.util").quote(cfg("rocky"):selinux_probe()))
    local out = p:read("a")
    p:close()
    assert.equal("absent", cfg("rocky"):parse_selinux(out).mode)
  end)

  it("read booleans one getsebool each; an unknown boolean is absent", function()
    local rocky = cfg("rocky")
    assert.equal("{ getsebool 'container_manage_cgroup' 2>&1; getsebool 'virt_use_nfs' 2>&1; } ; true",
      rocky:boolean_probe({ "container_manage_cgroup", "virt_use_nfs" }))
    assert.same({ container_manage_cgroup = false, virt_use_nfs = true },
      rocky:parse_booleans(support.fixture("os/getsebool.txt")))
    assert.has_error(function() rocky:boolean_probe({ "x; reboot" }) end)
    assert.has_error(function() rocky:boolean_probe({}) end)
  end)
end)

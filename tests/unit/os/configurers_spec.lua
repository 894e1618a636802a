-- Specs for the OS configurers: what they inherit and the commands they return (facts in, commands out).
local os_registry = require "cargoship.os"
local firewall = require "cargoship.os.firewall"
local service = require "cargoship.os.service"
local support = require "unit.phases.support"

local function cfg(id, o)
  return os_registry.by_name(id):new(o or { service_manager = "systemd" })
end

describe("os configurers", function()
  it("inherit from the general ones and override what differs", function()
    local ubuntu, rocky, fedora, leap = cfg("ubuntu"), cfg("rocky"), cfg("fedora"), cfg("opensuse")
    assert.is_true(ubuntu:is_a("debian") and ubuntu:is_a("linux"))
    assert.is_false(ubuntu:is_a("rhel"))
    assert.is_true(rocky:is_a("rhel") and rocky.enterprise_linux)
    assert.is_true(fedora:is_a("rhel") and fedora.enterprise_linux)
    assert.is_true(leap:is_a("sles") and not leap.enterprise_linux)
    assert.equal("ufw", ubuntu.firewall)
    assert.equal("firewalld", rocky.firewall)
    assert.equal("firewalld", leap.firewall)
    assert.equal("apt", ubuntu.package_type)
    assert.equal("rpm", rocky.package_type)
    -- paths: the child's own, the rest from linux
    assert.equal("/etc/pki/ca-trust/source/anchors", rocky.paths.ca_anchors)
    assert.equal("/usr/local/share/ca-certificates", ubuntu.paths.ca_anchors)
    assert.equal("/etc/pki/trust/anchors", leap.paths.ca_anchors)
    assert.equal("/etc/sysctl.d", leap.paths.sysctl_dir)
    assert.is_nil(os_registry.by_name("rhel").paths.nonsense)
  end)

  it("return package commands with every name quoted", function()
    local deb, rocky, sles = cfg("debian"), cfg("rocky", { version_id = "9.4" }), cfg("sles")
    assert.equal("env DEBIAN_FRONTEND=noninteractive apt-get -q -y install '/var/lib/rancher/rke2/deb/a b.deb'",
      deb:install_files({ "/var/lib/rancher/rke2/deb/a b.deb" }))
    assert.equal("apt-mark hold 'kubeadm' 'kubelet'", deb:hold_packages({ "kubeadm", "kubelet" }))
    assert.equal("dpkg-query -W -f='${Package}\t${Version}\t${db:Status-Status}\n' 'containerd.io'",
      deb:query_packages({ "containerd.io" }))
    assert.equal("dnf install -y --nogpgcheck '/var/lib/rancher/rke2/rpm/rke2-common.rpm'",
      rocky:install_files({ "/var/lib/rancher/rke2/rpm/rke2-common.rpm" }))
    assert.equal("dnf versionlock add 'rke2-server'", rocky:hold_packages({ "rke2-server" }))
    assert.equal("rpm -q --qf '%{NAME}\t%{VERSION}-%{RELEASE}\n' 'container-selinux'",
      rocky:query_packages({ "container-selinux" }))
    assert.equal("zypper --non-interactive install --allow-unsigned-rpm '/tmp/x.rpm'",
      sles:install_files({ "/tmp/x.rpm" }))
    assert.equal("zypper --non-interactive addlock 'k3s'", sles:hold_packages({ "k3s" }))
    local none, why = cfg("debian"):install_packages({})
    assert.is_nil(none)
    assert.equal("no packages given", why)
  end)

  it("use yum on Enterprise Linux 7 and dnf from 8 on", function()
    assert.equal("yum install -y 'x'", cfg("centos", { version_id = "7" }):install_packages({ "x" }))
    assert.equal("dnf install -y 'x'", cfg("rhel", { version_id = "8.10" }):install_packages({ "x" }))
    assert.equal("dnf install -y 'x'", cfg("fedora", { version_id = "40" }):install_packages({ "x" }))
  end)

  it("parse package queries of dpkg and rpm, skipping what is not installed", function()
    local deb, rocky = cfg("debian"), cfg("rocky")
    assert.same({ ["containerd.io"] = "1.7.22-1" },
      deb:parse_package_query("containerd.io\t1.7.22-1\tinstalled\nkubelet\t1.35.3-1.1\tconfig-files\n"))
    assert.same({ ["container-selinux"] = "2.229.0-1.el9" },
      rocky:parse_package_query("container-selinux\t2.229.0-1.el9\npackage rke2-server is not installed\n"))
  end)

  it("return service commands for the host's service manager", function()
    local sd = cfg("debian", { service_manager = "systemd" })
    assert.equal("systemctl is-active --quiet 'rke2-server'", sd:service("is_active", "rke2-server"))
    assert.equal("systemctl enable 'rke2-server'", sd:service("enable", "rke2-server"))
    assert.equal("systemctl daemon-reload", sd:service("reload"))
    local rn = cfg("rocky", { service_manager = "runit", service_dir = "/etc/service" })
    assert.equal("sv status '/etc/service/k3s-agent' 2>/dev/null | grep -q '^run:'",
      rn:service("is_active", "k3s-agent"))
    assert.matches("^i=0; until sv status '/etc/service/k3s%-agent' .*; sv up '/etc/service/k3s%-agent'$",
      rn:service("start", "k3s-agent"))
    assert.equal("ln -sfn '/etc/sv/k3s-agent' '/etc/service/k3s-agent'", rn:service("enable", "k3s-agent"))
    local rc = cfg("debian", { service_manager = "openrc" })
    assert.equal("rc-update add 'kubelet' default", rc:service("enable", "kubelet"))
    local none, why = cfg("debian", {}):service("start", "kubelet")
    assert.is_nil(none)
    assert.matches("no service manager detected", why)
    assert.has_error(function() sd:service("explode", "x") end)
  end)

  it("tell the service manager from PID 1 and the tools present", function()
    local function detect(name) return service.detect(service.parse(support.fixture("facts/" .. name))) end
    assert.equal("systemd", (detect("init-systemd.txt")))
    local m, dir = detect("init-runit.txt")
    assert.same({ "runit", "/etc/service" }, { m, dir })
    assert.equal("openrc", (detect("init-openrc.txt")))
    -- systemctl installed on a runit host proves nothing
    m, dir = service.detect(service.parse("comm=runsvdir\ncmdline=runsvdir /var/service\nhas=systemctl\n"))
    assert.same({ "runit", "/var/service" }, { m, dir })
    local none, _, why = service.detect(service.parse("comm=tini\n"))
    assert.is_nil(none)
    assert.matches('PID 1 is "tini"', why)
  end)
end)

describe("firewall front end", function()
  local function fw(t)
    local f = { firewalld = "absent", ufw = "absent", nftables = "absent", zones = {} }
    for k, v in pairs(t) do f[k] = v end
    return f
  end

  it("prefers the OS's front end when it runs", function()
    assert.equal("ufw", (firewall.choose("ufw", fw { ufw = "active", nftables = "usable" })))
    assert.equal("firewalld", (firewall.choose("firewalld", fw { firewalld = "running" })))
  end)

  it("leaves a host alone whose preferred front end is installed but stopped", function()
    local b, why = firewall.choose("firewalld", fw { firewalld = "stopped", nftables = "usable" })
    assert.is_nil(b)
    assert.matches("firewalld is installed but not running", why)
    b, why = firewall.choose("ufw", fw { ufw = "inactive" })
    assert.is_nil(b)
    assert.matches("ufw is installed but inactive", why)
  end)

  it("falls back to the first that detects: firewalld, ufw, nftables", function()
    assert.equal("firewalld", (firewall.choose("ufw", fw { firewalld = "running", nftables = "usable" })))
    assert.equal("nftables", (firewall.choose("ufw", fw { nftables = "usable" })))
    assert.equal("nftables", (firewall.choose(nil, fw { nftables = "usable" })))
    assert.is_nil((firewall.choose("ufw", fw { nftables = "present" })))
  end)

  it("reads the probe's state lines", function()
    local f = firewall.parse(table.concat({ "firewalld=running", "firewalld_version=1.3.4",
      "zone=public", "zone=trusted", "nft=present", "nftables_conf=/etc/sysconfig/nftables.conf" }, "\n"))
    assert.same({ firewalld = "running", firewalld_version = "1.3.4", zones = { "public", "trusted" },
                  ufw = "absent", nftables = "usable", nftables_conf = "/etc/sysconfig/nftables.conf" }, f)
    -- nft alone (kube-proxy's rules) is not a managed firewall
    assert.equal("present", firewall.parse("nft=present\n").nftables)
  end)
end)

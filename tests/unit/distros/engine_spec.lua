-- Specs for the engine configurers: version output fixtures in, versions, verdicts and commands out.
local engine = require "distros.engine"
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"

local rke2, k3s, upstream = require "distros.rke2", require "distros.k3s", require "distros.upstream"

describe("engine version parsing", function()
  it("rke2: first vX.Y.Z+suffix of `rke2 --version`", function()
    assert.equal("v1.35.4+rke2r1", rke2:parse_version(support.fixture("facts/rke2-version.txt")))
    assert.equal("v1.19.5-rc1+rke2r1", rke2:parse_version(support.fixture("facts/rke2-version-rc.txt")))
  end)
  it("k3s: `k3s --version`", function()
    assert.equal("v1.35.2+k3s1", k3s:parse_version(support.fixture("facts/k3s-version.txt")))
  end)
  it("upstream: `kubelet --version`", function()
    assert.equal("v1.35.3", upstream:parse_version(support.fixture("facts/kubelet-version.txt")))
  end)
  it("nothing installed, nothing printed: no version", function()
    assert.is_nil(rke2:parse_version(""))
    assert.is_nil(k3s:parse_version("k3s version dev (HEAD)\n"))
    assert.is_nil(upstream:parse_version(nil))
  end)
end)

describe("engine.compare_versions", function()
  local cmp = engine.compare_versions
  it("compares a package version with a host version as semver after + -> -", function()
    assert.equal(0, cmp("v1.35.4+rke2r1", "1.35.4-rke2r1"))
    assert.equal(-1, cmp("v1.34.9+rke2r1", "1.35.4-rke2r1"))
    assert.equal(1, cmp("v1.36.0+rke2r1", "1.35.4-rke2r1"))
    assert.equal(-1, cmp("v1.35.4+rke2r1", "1.35.4-rke2r2"))
    assert.equal(0, cmp("v1.35.3", "1.35.3"))
    assert.equal(-1, cmp("v1.35.2+k3s1", "1.35.10-k3s1")) -- numbers, not text
  end)
  it("orders rke2r10 after rke2r9 (plain semver would not)", function()
    assert.equal(1, cmp("v1.35.4+rke2r10", "1.35.4-rke2r9"))
    assert.equal(-1, cmp("1.35.4-k3s.1", "1.35.4-k3s.2"))
  end)
  it("puts a release candidate before its release, and a release after its pre-releases", function()
    assert.equal(-1, cmp("v1.19.5-rc1+rke2r1", "1.19.5-rke2r1"))
    assert.equal(1, cmp("1.35.3", "1.35.3-rc.1"))
    assert.equal(-1, cmp("1.35.3-alpha", "1.35.3-alpha.1"))
  end)
  it("refuses what is not a version", function()
    local c, why = cmp("latest", "1.35.3")
    assert.is_nil(c)
    assert.equal('cannot read version "latest"', why)
    assert.is_nil((cmp("1.35", "1.35.3")))
  end)
  it("is reachable from every configurer", function()
    assert.equal(-1, k3s:compare_versions("v1.34.0+k3s1", "1.35.2-k3s1"))
  end)
end)

describe("engine.judge", function()
  it("tells install, upgrade, up to date and downgrade apart", function()
    assert.equal("install", engine.judge(nil, "1.35.4-rke2r1"))
    assert.equal("upgrade", engine.judge("v1.34.2+rke2r1", "1.35.4-rke2r1"))
    assert.equal("up to date", engine.judge("v1.35.4+rke2r1", "1.35.4-rke2r1"))
    assert.equal("downgrade", engine.judge("v1.35.5+rke2r1", "1.35.4-rke2r1"))
  end)
  it("counts the minor versions an upgrade crosses", function()
    assert.equal(2, engine.minor_jump("v1.33.1", "1.35.3"))
    assert.equal(1, engine.minor_jump("v1.34.1+k3s1", "1.35.2-k3s1"))
  end)
end)

describe("engine commands", function()
  it("name each role's service", function()
    assert.equal("rke2-server", rke2:service("controller"))
    assert.equal("rke2-agent", rke2:service("worker"))
    assert.equal("k3s-server", k3s:service("controller"))
    assert.equal("k3s-agent", k3s:service("worker"))
    assert.equal("kubelet", upstream:service("controller"))
    assert.equal("kubelet", upstream:service("worker"))
    assert.has_error(function() rke2:service("bystander") end)
  end)

  it("run kubectl with the engine's kubeconfig, every word quoted", function()
    assert.equal("env KUBECONFIG='/etc/rancher/rke2/rke2.yaml' '/var/lib/rancher/rke2/bin/kubectl' 'get' 'nodes'"
      .. " '-o' 'json'", rke2:kubectl({ "get", "nodes", "-o", "json" }))
    assert.equal("env KUBECONFIG='/etc/rancher/k3s/k3s.yaml' '/usr/local/bin/k3s' 'kubectl' 'uncordon' 'w1'",
      k3s:kubectl({ "uncordon", "w1" }))
    assert.equal("env KUBECONFIG='/etc/kubernetes/admin.conf' 'kubectl' 'delete' 'node' 'it'\\''s'",
      upstream:kubectl({ "delete", "node", "it's" }))
    assert.has_error(function() rke2:kubectl("get nodes") end)
  end)

  it("probe the version at the known paths, then PATH", function()
    -- run for real: a fake rke2 on PATH answers; without one the probe fails quietly
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir " .. dir .. " && printf '#!/bin/sh\\necho \"rke2 version v1.35.4+rke2r1 (abc)\"\\n' > "
      .. dir .. "/rke2 && chmod +x " .. dir .. "/rke2")
    local function run(path)
      local p = io.popen("PATH=" .. path .. " /bin/sh -c " .. require("cargoship.util").quote(rke2:version_probe())
        .. "; echo \"rc=$?\"")
      local out = p:read("a")
      p:close()
      return out
    end
    assert.are.equal("rke2 version v1.35.4+rke2r1 (abc)\nrc=0\n", run(dir))
    assert.are.equal("rc=1\n", run("/nonexistent"))
    os.execute("rm -rf " .. dir)
    assert.is_nil(rke2:version_probe():find("exit", 1, true), "the probe must not exit the batch's shell")
    assert.matches("command -v 'kubelet'", upstream:version_probe(), 1, true)
  end)

  it("probe the service through the host's service manager", function()
    local runit = os_registry.by_name("debian"):new { service_manager = "runit", service_dir = "/etc/service" }
    assert.equal("sv status '/etc/service/rke2-agent' 2>/dev/null | grep -q '^run:'",
      rke2:service_active_probe("worker", runit))
    local sd = os_registry.by_name("rocky"):new { service_manager = "systemd" }
    assert.equal("systemctl is-active --quiet 'k3s-server'", k3s:service_active_probe("controller", sd))
    assert.equal("systemctl is-active --quiet 'kubelet'", upstream:service_active_probe("worker", nil))
  end)

  it("loads configurers by type and refuses others", function()
    assert.equal(rke2, engine.load("rke2"))
    local e, why = engine.load("microk8s")
    assert.is_nil(e)
    assert.matches('unknown engine type "microk8s"', why)
  end)
end)

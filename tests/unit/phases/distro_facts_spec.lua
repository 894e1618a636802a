-- Specs for "Gathering facts about the distro installed": versions and services in, install/upgrade/refusal out.
local phase = require "cargoship.phases.distro_facts"
local os_registry = require "cargoship.os"
local support = require "unit.phases.support"

local NOT = { out = "", code = 1 } -- binary absent, or service not running

-- installed: {rke2 = "fixture name" | false}, running: {rke2 = true}
local function answers(installed, running)
  local a = {}
  for _, t in ipairs({ "rke2", "k3s", "upstream" }) do
    a[t .. "_version"] = installed[t] and support.fixture("facts/" .. installed[t]) or NOT
    a[t .. "_active"] = running[t] and { out = "", code = 0 } or { out = "", code = 3 }
  end
  return a
end

local function host(name, role, installed, running, manager)
  local h = support.host({ name = name, role = role }, answers(installed or {}, running or {}))
  h.os = os_registry.by_name("debian"):new { service_manager = manager or "systemd", service_dir = "/etc/service" }
  return h
end

local RKE2 = { type = "rke2", version = "1.35.4-rke2r1", architectures = { "amd64" } }

describe("phase distro_facts", function()
  it("probes version and service of every engine, the package's first, in one round trip per host", function()
    local h = host("cp1", "controller", { rke2 = "rke2-version.txt" }, { rke2 = true }, "runit")
    local ctx = support.ctx({ h }, { distro = RKE2 })
    assert.is_true(phase.run(ctx, phase.prepare(ctx)))
    assert.equal(1, h.probes_sent)
    assert.equal(0, h.writes_sent)
    local script = h.conn.commands[1].cmd
    assert.matches("sv status '/etc/service/rke2-server'", script, 1, true)
    -- another engine on the host must be seen, whatever the package names
    assert.matches("/usr/local/bin/k3s", script, 1, true)
    assert.matches("kubelet", script, 1, true)
    assert.same({ type = "rke2", version = "v1.35.4+rke2r1", running = true, service = "rke2-server",
                  action = "same" }, h.facts.engine)
  end)

  it("decides install, upgrade and same per host and picks the leader", function()
    local cp1 = host("cp1", "controller")
    local cp2 = host("cp2", "controller", { rke2 = "rke2-version.txt" }, { rke2 = true })
    local w1 = host("w1", "worker", { rke2 = "rke2-version-rc.txt" }, { rke2 = true })
    local ctx = support.ctx({ cp1, cp2, w1 }, { distro = RKE2 })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.equal("install", cp1.facts.engine.action)
    assert.is_false(cp1.facts.engine.running)
    assert.equal("same", cp2.facts.engine.action)
    assert.equal("upgrade", w1.facts.engine.action)
    assert.equal("rke2-agent", w1.facts.engine.service)
    assert.equal(cp2, ctx.leader) -- first controller whose controller service runs
    assert.is_true(ctx.engine_running)
    assert.equal("rke2", ctx.engine_type)
  end)

  it("without a running controller the leader is the first controller", function()
    local w1 = host("w1", "worker", { rke2 = "rke2-version.txt" }, { rke2 = true })
    local cp1, cp2 = host("cp1", "controller"), host("cp2", "controller")
    local ctx = support.ctx({ w1, cp1, cp2 }, { distro = RKE2 })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.equal(cp1, ctx.leader)
    assert.is_false(ctx.engine_running) -- a worker's agent is no cluster to check
  end)

  it("refuses a downgrade, naming host, installed and package versions", function()
    local cp1 = host("cp1", "controller", { rke2 = "rke2-version.txt" }, { rke2 = true })
    local w1 = host("w1", "worker", { rke2 = "rke2-version.txt" }, { rke2 = true })
    local ctx = support.ctx({ cp1, w1 }, { distro = { type = "rke2", version = "1.34.9-rke2r2" } })
    local ok, failures = phase.run(ctx, ctx.hosts)
    assert.is_nil(ok)
    assert.same({ "cp1: will not downgrade rke2: installed v1.35.4+rke2r1 is newer than the package's 1.34.9-rke2r2",
                  "w1: will not downgrade rke2: installed v1.35.4+rke2r1 is newer than the package's 1.34.9-rke2r2" },
      { failures[1].err, failures[2].err })
    assert.equal(cp1, ctx.leader) -- still chosen: later reporting needs it
  end)

  it("allows a downgrade only when told to, with a warning", function()
    local cp1 = host("cp1", "controller", { rke2 = "rke2-version.txt" }, { rke2 = true })
    local ctx, log = support.ctx({ cp1 }, { distro = { type = "rke2", version = "1.34.9-rke2r2" },
                                          options = { allow_downgrade = true } })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.equal("downgrade", cp1.facts.engine.action)
    assert.matches("warning: will not downgrade rke2", log(), 1, true)
  end)

  it("uses the context's engine when it has one (ctx.engine, set from the package)", function()
    local cp1 = host("cp1", "controller", { k3s = "k3s-version.txt" }, { k3s = true })
    local K3S = { type = "k3s", version = "1.35.2-k3s1" }
    local ctx = support.ctx({ cp1 }, { distro = K3S })
    ctx.engine = require("distros.engine").for_package(K3S)
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.equal("same", cp1.facts.engine.action)
    assert.same({ k3s = { version = "v1.35.2+k3s1", running = true } }, cp1.facts.engines)
  end)

  it("refuses a package of another engine than the one a host runs, naming host and both engines", function()
    local cp1 = host("cp1", "controller", { k3s = "k3s-version.txt" }, { k3s = true })
    local w1 = host("w1", "worker", { k3s = "k3s-version.txt" }, {})
    local w2 = host("w2", "worker")
    local ctx = support.ctx({ cp1, w1, w2 }, { distro = RKE2 })
    local ok, failures = phase.run(ctx, ctx.hosts)
    assert.is_nil(ok)
    assert.equal(2, #failures)
    assert.equal("cp1: runs k3s v1.35.2+k3s1 (k3s-server running); the package is rke2 1.35.4-rke2r1: cargoship"
      .. " does not install one engine over another (reset the host first)", failures[1].err)
    assert.matches("^w1: runs k3s v1.35.2%+k3s1 %(installed, not running%); the package is rke2", failures[2].err)
    assert.equal("install", w2.facts.engine.action) -- a clean host is judged as before
    assert.equal(0, cp1.writes_sent + w1.writes_sent + w2.writes_sent)
  end)

  it("refuses an upstream upgrade that skips a minor version; warns for rke2", function()
    local cp1 = host("cp1", "controller", { upstream = "kubelet-version.txt" }, { upstream = true })
    local ctx = support.ctx({ cp1 }, { distro = { type = "upstream", version = "1.37.0" } })
    local ok, failures = phase.run(ctx, ctx.hosts)
    assert.is_nil(ok)
    assert.matches("cannot upgrade upstream from v1.35.3 to 1.37.0: it crosses 2 minor versions", failures[1].err)
    local w = host("w1", "worker", { rke2 = "rke2-version.txt" }, {})
    local ctx2, log = support.ctx({ w }, { distro = { type = "rke2", version = "1.37.1-rke2r1" } })
    assert.is_true(phase.run(ctx2, ctx2.hosts))
    assert.matches("skips 1 minor version", log(), 1, true)
  end)

  it("without a package reports what is installed and says nothing is judged", function()
    local cp1 = host("cp1", "controller", { k3s = "k3s-version.txt" }, { k3s = true })
    local w1 = host("w1", "worker")
    local ctx, log = support.ctx({ cp1, w1 })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.same({ type = "k3s", version = "v1.35.2+k3s1", running = true, service = "k3s-server" }, cp1.facts.engine)
    assert.same({ running = false }, w1.facts.engine)
    assert.same({ k3s = { version = "v1.35.2+k3s1", running = true } }, cp1.facts.engines)
    assert.equal("k3s", ctx.engine_type)
    assert.matches("no distro package given: install/upgrade not judged", log(), 1, true)
  end)
end)

-- Specs for "Detect host operating systems": one batched read per host, configurer and facts out.
local phase = require "cargoship.phases.detect_os"
local support = require "unit.phases.support"

local function answers(os_release, init, machine)
  return {
    os_release = support.fixture("os-release/" .. os_release),
    kernel = "Linux\n6.1.0-27-amd64\n" .. (machine or "x86_64") .. "\n",
    init = support.fixture("facts/" .. (init or "init-systemd.txt")),
  }
end

describe("phase detect_os", function()
  it("picks each host's configurer and records the OS facts, one round trip per host", function()
    local h1 = support.host({ name = "h1" }, answers("debian-12", "init-runit.txt"))
    local h2 = support.host({ name = "h2" }, answers("rocky-9", "init-systemd.txt", "aarch64"))
    local ctx, log = support.ctx({ h1, h2 })
    assert.is_true(phase.run(ctx, phase.prepare(ctx)))
    assert.equal("debian", h1.os.id)
    assert.equal("runit", h1.os.service_manager)
    -- waits for runsv (a service just linked in has none until runsvdir's next scan), then sv up
    assert.matches("^i=0; until sv status '/etc/service/x' .*; sv up '/etc/service/x'$", h1.os:service("start", "x"))
    assert.same({ id = "debian", version_id = "12", pretty_name = "Debian GNU/Linux 12 (bookworm)",
                  name = "Debian GNU/Linux", like = {} }, h1.facts.os)
    assert.equal("6.1.0-27-amd64", h1.facts.kernel)
    assert.equal("amd64", h1.facts.arch)
    assert.equal("runsvdir", h1.facts.init)
    assert.equal("rocky", h2.os.id)
    assert.equal("systemd", h2.facts.service_manager)
    assert.equal("arm64", h2.facts.arch)
    assert.equal("aarch64", h2.facts.machine)
    for _, h in ipairs({ h1, h2 }) do
      assert.equal(1, h.probes_sent)
      assert.equal(0, h.writes_sent)
      assert.is_false(h.conn.commands[1].sudo) -- readable without root; sudo is judged later
    end
    assert.matches("h2 | Rocky Linux 9.4 (Blue Onyx) (kernel 6.1.0-27-amd64, arm64), configurer rocky < rhel < linux"
      .. " by ID rocky", log(), 1, true)
  end)

  it("fails an unknown OS naming the host, ID and PRETTY_NAME; other hosts go on", function()
    local h1 = support.host({ name = "h1" }, answers("alpine-3.19", "init-openrc.txt"))
    local h2 = support.host({ name = "h2" }, answers("ubuntu-24.04"))
    local ctx = support.ctx({ h1, h2 })
    local ok, failures = phase.run(ctx, ctx.hosts)
    assert.is_nil(ok)
    assert.equal(1, #failures)
    assert.equal(h1, failures[1].host)
    assert.matches('^h1: unsupported operating system: ID "alpine", PRETTY_NAME "Alpine Linux v3.19"', failures[1].err)
    assert.equal("ubuntu", h2.os.id)
  end)

  it("honours the host's os override", function()
    local h = support.host({ name = "h1", os = "debian" }, answers("alpine-3.19", "init-openrc.txt"))
    local ctx, log = support.ctx({ h })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.equal("debian", h.os.id)
    assert.equal("openrc", h.os.service_manager)
    assert.equal("alpine", h.facts.os.id) -- the facts stay what the host is
    assert.matches('by os override "debian"', log(), 1, true)
  end)

  it("warns when no service manager can be told, without failing", function()
    local a = answers("debian-12")
    a.init = "comm=tini\n"
    local h = support.host({ name = "h1" }, a)
    local ctx, log = support.ctx({ h })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.is_nil(h.os.service_manager)
    assert.matches('warning: no service manager detected: PID 1 is "tini"', log(), 1, true)
  end)

  it("fails a host whose os-release cannot be read", function()
    local h = support.host({ name = "h1" }, { kernel = "Linux\n6.1\nx86_64\n" })
    local ctx = support.ctx({ h })
    local ok, failures = phase.run(ctx, ctx.hosts)
    assert.is_nil(ok)
    assert.equal("h1: cannot read /etc/os-release or /usr/lib/os-release", failures[1].err)
  end)
end)

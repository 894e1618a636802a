-- Specs for "Connect to hosts": one session per host through the run's transport, whatever the host's block.
local phase = require "cargoship.phases.connect"
local support = require "unit.phases.support"

local function fake_transport(refuse)
  local t = { calls = {} }
  function t.connect(_, c, name)
    t.calls[#t.calls + 1] = name
    if refuse and refuse[name] then return nil, name .. ": " .. refuse[name], "auth" end
    return { name = name, address = c.address }
  end
  return t
end

local function host(name, connection)
  return support.host({ name = name, connection = connection or { kind = "ssh", address = name, user = "root" } })
end

describe("phase connect", function()
  it("connects every host through one transport and attaches the sessions", function()
    local t = fake_transport()
    local hosts = { host("10.0.0.1"), host("10.0.0.2") }
    local ctx = support.ctx(hosts, { transport = t })
    assert.is_true(phase.run(ctx, phase.prepare(ctx)))
    assert.same({ "10.0.0.1", "10.0.0.2" }, t.calls)
    assert.equal("10.0.0.2", hosts[2].conn.address)
    assert.equal(t, ctx.transport)
    -- a second run reuses the sessions
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.equal(2, #t.calls)
  end)

  it("hands openSSH and localhost hosts to the transport like ssh ones (it picks their session kind)", function()
    local t = fake_transport()
    local hosts = { host("a", { kind = "openssh", address = "a.example" }), host("b", { kind = "localhost" }),
                    host("c") }
    local ctx = support.ctx(hosts, { transport = t })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.same({ "a", "b", "c" }, t.calls)
  end)

  it("fails the hosts the transport cannot reach, with its message", function()
    local ctx = support.ctx({ host("a"), host("b") },
      { transport = fake_transport({ b = "auth: no keyPath given, no ssh-agent" }) })
    local ok, failures = phase.run(ctx, ctx.hosts)
    assert.is_nil(ok)
    assert.equal("b: auth: no keyPath given, no ssh-agent", failures[1].err)
    assert.is_not_nil(ctx.hosts[1].conn)
  end)

  it("never holds the transport: each host connects through the one the command gave it", function()
    local t = fake_transport()
    local ctx = support.ctx({ host("a") }, { transport = t })
    assert.is_true(phase.run(ctx, ctx.hosts))
    assert.equal(t, ctx.hosts[1].transport)
    local src = assert(io.open((os.getenv("CARGOSHIP_SOURCE_DIR") or ".") .. "/lua/cargoship/phases/connect.lua"))
      :read("a")
    assert.is_nil(src:find("ctx.transport", 1, true), "connect.lua uses ctx.transport")
    assert.is_nil(src:find("%.conn%f[^%w_]"), "connect.lua uses host.conn")
  end)

end)

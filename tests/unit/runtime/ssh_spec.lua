-- Specs of the ssh family that need no server: argument checks, name resolution, refused ports (loopback only).
local loop = require "cargoship.loop"
local ssh = require "cargoship.ssh"

local function run(fn)
  local ok, a, b, c = loop.run(fn)
  assert(ok, a)
  return a, b, c
end

-- Port 1 (tcpmux) is privileged and nothing on these machines serves it.
local function closed_port()
  return 1
end

describe("ssh.connect without a server", function()
  it("raises on misuse: no address, a bad policy, no known_hosts under strict checking", function()
    assert.has_error(function() run(function() return ssh.connect {} end) end)
    assert.has_error(function()
      run(function() return ssh.connect { address = "127.0.0.1", host_key_policy = "maybe" } end)
    end)
    assert.has_error(function() run(function() return ssh.connect { address = "127.0.0.1" } end) end)
  end)

  it("reports a refused port on a literal address", function()
    local port = closed_port()
    local s, err, code = run(function()
      return ssh.connect { address = "127.0.0.1", port = port, host_key_policy = "off", name = "lo" }
    end)
    assert.is_nil(s)
    assert.are.equal("refused", code)
    assert.are.equal("lo: connect: Connection refused", err)
  end)

  it("resolves a host name in the background, the loop running meanwhile", function()
    local port = closed_port()
    local ticks = 0
    local s, err, code = run(function()
      local ticker = loop.spawn(function() while true do loop.sleep(0.0005); ticks = ticks + 1 end end)
      local a, b, c = ssh.connect { address = "localhost", port = port, host_key_policy = "off" }
      ticker:cancel()
      return a, b, c
    end)
    assert.is_nil(s)
    assert.are.equal("refused", code)   -- resolved, then refused: not a resolver error
    assert.matches("^localhost: connect: ", err)
    assert.is_true(ticks >= 1, "the loop did not run while the name was resolved")
  end)

  it("reads a missing known_hosts file as an empty collection", function()
    assert.is_truthy(ssh.known_hosts("/nonexistent/known_hosts"))
  end)
end)

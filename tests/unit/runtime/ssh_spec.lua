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

describe("ssh failures", function()
  local src = os.getenv("CARGOSHIP_SOURCE_DIR") or "."

  it("are built by the one helper in every ssh*.c file, with a code from the fixed set", function()
    local p = assert(io.popen("ls " .. src .. "/runtime/ssh*.c"))
    local files = {}
    for f in p:lines() do files[#files + 1] = f end
    p:close()
    assert.is_true(#files >= 5, "found " .. #files .. " ssh*.c files")
    local codes = { timeout = 1, refused = 1, auth = 1, hostkey = 1, closed = 1, exit = 1, io = 1 }
    for _, f in ipairs(files) do
      local text = assert(io.open(f)):read("a")
      -- a hand-built triple pushes nil and then a message
      assert.is_nil(text:find("lua_pushnil%(L%);%s*lua_pushfstring"), f .. " builds a failure triple by hand")
      assert.is_nil(text:find("cs_fail%("), f .. " uses the generic helper instead of cs_ssh_fail")
      for code in text:gmatch('cs_ssh_fail%(L, [^,]+, "(%w+)"') do
        assert.is_truthy(codes[code], f .. ": code " .. code .. " is not in the fixed set")
      end
    end
  end)

  it("name the host, the operation and the detail", function()
    local s, err, code = run(function()
      return ssh.connect { address = "no-such-host.invalid", port = 22, host_key_policy = "off", name = "nx" }
    end)
    assert.is_nil(s)
    assert.are.equal("refused", code)
    assert.matches("^nx: resolve: no%-such%-host%.invalid: ", err)
  end)
end)

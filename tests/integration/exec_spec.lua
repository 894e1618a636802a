-- Integration specs of `cargoship exec` with the real binary on lab hosts, over lab.transport.
local lab = require "integration.lab"

-- A cluster file of the first n lab hosts named h1..hn (h1 the controller).
local function cluster(n)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write("apiVersion: zarf.dev/v1alpha1\nkind: ZarfCluster\nmetadata: {name: exec}\n",
    "spec:\n  config: {loadbalancer: lb.lab.internal}\n  hosts:\n")
  for i, h in ipairs { table.unpack(lab.hosts(), 1, n) } do
    f:write(string.format("    - role: %s\n      hostname: %s\n      %s\n",
      i == 1 and "controller" or "worker", h.name, lab.block(h)))
  end
  f:close()
  return path
end

local function exec(path, args)
  return lab.sh(lab.bin .. " exec " .. path .. " --known-hosts " .. lab.known_hosts .. " " .. args)
end

describe("cargoship exec", function()
  local path
  setup(function() path = cluster(4) end)
  teardown(function() os.remove(path) end)

  it("runs a command on every host, each line prefixed with its host", function()
    local code, out = exec(path, "-- 'hostname; echo second line'")
    assert.are.equal(0, code, out)
    for i = 1, 4 do
      assert.matches("h" .. i .. " | h" .. i .. "\n", out, 1, true)
      assert.matches("h" .. i .. " | second line\n", out, 1, true)
    end
    assert.matches("4 hosts: 4 ok, 0 failed", out, 1, true)
  end)

  it("selects hosts by name and by role", function()
    local code, out = exec(path, "--hosts h2,h4 -- hostname")
    assert.are.equal(0, code, out)
    assert.matches("h2 | h2", out, 1, true)
    assert.matches("h4 | h4", out, 1, true)
    assert.is_nil(out:find("h1 |", 1, true))
    code, out = exec(path, "--role controller -- hostname")
    assert.are.equal(0, code, out)
    assert.matches("1 host: 1 ok, 0 failed", out, 1, true)
  end)

  it("exits 1 when the command fails on any host, naming the host", function()
    local code, out = exec(path, "-- '[ $(hostname) != h3 ] || exit 5'")
    assert.are.equal(1, code, out)
    assert.matches("h3: command exited 5", out, 1, true)
    assert.matches("4 hosts: 3 ok, 1 failed", out, 1, true)
  end)

  it("names an unknown host with the valid ones", function()
    local code, out = exec(path, "--hosts h9 -- true")
    assert.are.equal(2, code, out)
    assert.matches('unknown host "h9"', out, 1, true)
  end)

  it("runs as root with --sudo for a non-root login", function()
    local p = os.tmpname()
    local f = assert(io.open(p, "w"))
    f:write((assert(io.open(path)):read("a"):gsub("(%a+): {address", "%1: {user: tb, address")))
    f:close()
    local code, out = exec(p, "--hosts h1 --sudo -- id -un")
    os.remove(p)
    assert.are.equal(0, code, out)
    assert.matches("h1 | root\n", out, 1, true)
  end)
end)

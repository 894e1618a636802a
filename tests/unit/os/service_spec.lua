-- Specs for the service managers' log command: what a failed start shows under its error, run by a real sh.
local service = require "cargoship.os.service"
local util = require "cargoship.util"

-- Runs a manager's command with its absolute paths moved under root (a temp dir).
local function run_under(root, cmd)
  cmd = cmd:gsub("'/etc/sv/", "'" .. root .. "/etc/sv/"):gsub("'/var/log/", "'" .. root .. "/var/log/")
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  p:close()
  return out
end

local function write(path, text)
  assert(os.execute("mkdir -p " .. util.quote(path:match("^(.*)/"))))
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

describe("runit logs", function()
  local root
  before_each(function()
    root = os.tmpname()
    os.remove(root)
    assert(os.execute("mkdir -p " .. util.quote(root)))
  end)
  after_each(function() os.execute("rm -rf " .. util.quote(root)) end)
  local logs = service.manager("runit").command("logs", "k3s-server")

  it("reads the directory the service's log/run gives svlogd, wherever that is", function()
    write(root .. "/etc/sv/k3s-server/log/run", "#!/bin/sh\nmkdir -p /x\nexec svlogd -tt " .. root
      .. "/var/log/runit/k3s-server\n")
    write(root .. "/var/log/runit/k3s-server/current", "line 1\ntoken CA hash does not match\n")
    write(root .. "/var/log/k3s-server/current", "the other place\n")
    assert.are.equal("line 1\ntoken CA hash does not match\n", run_under(root, logs))
  end)

  it("falls back to /var/log/NAME and /var/log/runit/NAME without a log/run", function()
    write(root .. "/var/log/runit/k3s-server/current", "runit dir\n")
    assert.are.equal("runit dir\n", run_under(root, logs))
    write(root .. "/var/log/k3s-server/current", "void dir\n")
    assert.are.equal("void dir\n", run_under(root, logs))
  end)

  it("says so when there is no log at all", function()
    assert.are.equal("no log found for k3s-server\n", run_under(root, logs))
  end)
end)

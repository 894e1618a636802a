-- Leak check of the SSH runtime: 20 lab hosts connected, used and closed under valgrind.
local lab = require "integration.lab"

describe("ssh runtime memory", function()
  it("leaks nothing after connecting to 20 hosts and closing them", function()
    local hosts = lab.hosts()
    assert.is_true(#hosts >= 20)
    local addrs = {}
    for i = 1, 20 do addrs[i] = string.format("%q", hosts[i].address) end
    local script = os.tmpname()
    local f = assert(io.open(script, "w"))
    f:write(string.format([[
package.path = %q .. "/lua/?.lua;" .. package.path
package.cpath = %q .. "/lib/?.so;" .. package.cpath
local loop = require "cargoship.loop"
local ssh = require "cargoship.ssh"
local ok, err = loop.run(function()
  local kh = assert(ssh.known_hosts(%q))
  local tasks = {}
  for i, a in ipairs { %s } do
    tasks[i] = loop.spawn(function()
      local s = assert(ssh.connect { address = a, user = "root", key_path = %q, known_hosts = kh })
      assert(s:exec("uname -a"))
      assert(s:sftp_put(%q, "/tmp/leak-check"))
      assert(s:close())
    end)
  end
  for _, t in ipairs(tasks) do assert(t:join()) end
  -- a name resolved in the background (localhost: /etc/hosts, no traffic), then refused
  assert(not ssh.connect { address = "localhost", port = 1, host_key_policy = "off" })
  -- one left open for the garbage collector to free
  local s = assert(ssh.connect { address = %s, user = "root", key_path = %q, known_hosts = kh })
  assert(s:exec("true"))
end)
assert(ok, err)
collectgarbage()
print("closed 20 sessions")
]], lab.src, os.getenv("CARGOSHIP_BUILD_DIR"), lab.known_hosts, table.concat(addrs, ", "), lab.key,
      script, addrs[1], lab.key))
    f:close()
    local code, out = lab.sh("valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect "
      .. "--suppressions=" .. lab.src .. "/tests/integration/valgrind-glibc.supp "
      .. "--show-leak-kinds=definite,indirect --error-exitcode=33 lua5.4 " .. script)
    os.remove(script)
    assert.matches("closed 20 sessions", out, 1, true)
    assert.matches("definitely lost: 0 bytes", out, 1, true)
    assert.matches("indirectly lost: 0 bytes", out, 1, true)
    assert.are.equal(0, code, out:sub(-3000))
  end)
end)

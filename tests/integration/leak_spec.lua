-- Leak check of the SSH runtime: 20 lab hosts connected, used and closed under valgrind; transfers cut mid-write.
local lab = require "integration.lab"

-- Bounded: the whole spec takes ~15 s on a quiet machine, but in CI of stop 29 (load 15, the
-- 50-host lab) one of its valgrind runs never ended and held its lab for the 2,400 s ctest guard;
-- past 600 s it is stopped (exit 124 fails the case, with the tail of what it printed). What hung
-- was found at stop 31, caught live: an exec whose stdout the stderr read had queued, waiting on
-- a socket nothing more would reach (runtime/ssh_exec.c wait_session; integration/recv_defer).
local VALGRIND = "timeout -k 10 600 valgrind "

describe("ssh runtime memory", function()
  it("leaks nothing after connecting to 20 hosts and closing them", function()
    local script = lab.fanout_script(20, {
      each = string.format([[
      assert(s:exec("uname -a"))
      assert(s:sftp_put(%q, "/tmp/leak-check"))
      assert(s:close())]], lab.src .. "/README.md"),
      after = string.format([[
  -- a name resolved in the background (localhost: /etc/hosts, no traffic), then refused
  assert(not ssh.connect { address = "localhost", port = 1, host_key_policy = "off" })
  -- one left open for the garbage collector to free
  local s = assert(ssh.connect { address = %q, user = "root", key_path = %q, known_hosts = kh })
  assert(s:exec("true"))]], lab.hosts()[1].address, lab.key),
      tail = 'collectgarbage()\nprint("closed 20 sessions")' })
    local code, out = lab.sh(VALGRIND .. "--leak-check=full --errors-for-leak-kinds=definite,indirect "
      .. "--suppressions=" .. lab.src .. "/tests/integration/valgrind-glibc.supp "
      .. "--show-leak-kinds=definite,indirect --error-exitcode=33 lua5.4 " .. script)
    os.remove(script)
    assert.matches("closed 20 sessions", out, 1, true)
    assert.matches("definitely lost: 0 bytes", out, 1, true)
    assert.matches("indirectly lost: 0 bytes", out, 1, true)
    assert.are.equal(0, code, out:sub(-3000))
  end)

  -- A put cut off mid-write (its task cancelled, then a put timed out mid-pipeline) leaves an
  -- SFTP handle with ~256 KiB of writes in flight that libssh2 1.10 frees neither at the cut
  -- nor at session free (runtime/ssh_sftp.c op_cleanup). One host; ~15 s under valgrind.
  it("leaks nothing after transfers cut off mid-write", function()
    local h = lab.hosts()[1]
    local big = os.tmpname()
    assert(os.execute("truncate -s 64M " .. big))   -- sparse: no disk used
    local script = lab.runtime_script(string.format([[
local ok, err = loop.run(function()
  local kh = assert(ssh.known_hosts(%q))
  for _ = 1, 2 do
    local s = assert(ssh.connect { address = %q, user = "root", key_path = %q, known_hosts = kh, timeout = 120 })
    -- 1 KiB offers: a put slow enough to be cut mid-write, however fast the link
    local t = loop.spawn(function() return s:sftp_put(%q, "/tmp/leak-cut", { offer = 1024 }) end)
    loop.sleep(0.5)
    t:cancel()
    local _, finished, bytes, perr = pcall(t.join, t)
    assert(not finished, "the put ended before it was cut: " .. tostring(bytes or perr))
    s:close()
  end
  local s = assert(ssh.connect { address = %q, user = "root", key_path = %q, known_hosts = kh, timeout = 120 })
  s:sftp_put(%q, "/tmp/leak-cut", { timeout = 0.3, offer = 1024 })   -- cut by its timeout, or not: no leak either way
  s:close()
  s = assert(ssh.connect { address = %q, user = "root", key_path = %q, known_hosts = kh, timeout = 120 })
  assert(s:exec("rm -f /tmp/leak-cut"))
  s:close()
end)
assert(ok, err)
collectgarbage()
print("cut 3 transfers")
]], lab.known_hosts, h.address, lab.key, big, h.address, lab.key, big, h.address, lab.key))
    local code, out = lab.sh(VALGRIND .. "--leak-check=full --errors-for-leak-kinds=definite,indirect "
      .. "--suppressions=" .. lab.src .. "/tests/integration/valgrind-glibc.supp "
      .. "--show-leak-kinds=definite,indirect --error-exitcode=33 lua5.4 " .. script)
    os.remove(script)
    os.remove(big)
    assert.matches("cut 3 transfers", out, 1, true)
    assert.matches("definitely lost: 0 bytes", out, 1, true)
    assert.matches("indirectly lost: 0 bytes", out, 1, true)
    assert.are.equal(0, code, out:sub(-3000))
  end)
end)

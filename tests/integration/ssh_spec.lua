-- Integration specs of the SSH transport against the lab's real sshd hosts, over lab.transport (libssh2 or openssh).
--
-- The cases are the same on both session kinds; where the kinds differ on purpose (ssh's own
-- words for a host-key failure, RSA keys, libssh2's private agent and bastion sessions) the
-- case says what each does, or is pending on the other kind, saying why.
local loop = require "cargoship.loop"
local ssh = require "cargoship.ssh"
local util = require "cargoship.util"
local transport = require "cargoship.transport"
local lab = require "integration.lab"

local function run(fn)
  local ok, a, b, c, d = loop.run(fn)
  if not ok then error(a, 0) end
  return a, b, c, d
end

local function new_transport(over)
  local o = { known_hosts = lab.known_hosts, timeout = 20 }
  for k, v in pairs(over or {}) do o[k] = v end
  return transport.new(o)
end

local function tmpfile(content)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(content)
  f:close()
  return path
end

math.randomseed(os.time())

-- A case of one session kind only: pending, with the reason, on the other.
local function only(kind, name, why, fn)
  if lab.transport == kind then it(name, fn) else pending(name .. " (" .. kind .. " only: " .. why .. ")") end
end

describe("ssh transport on the lab", function()
  for _, flavour in ipairs { "debian", "rocky" } do
    it("runs commands, uploads and downloads on a " .. flavour .. " host", function()
      local h = lab.find(flavour)
      run(function()
        local t = new_transport()
        local c = assert(t:connect(lab.conn(h), h.name))
        local out, err, code = c:exec(". /etc/os-release; echo $ID; echo oops >&2; exit 7")
        assert.are.equal(flavour .. "\n", out)
        assert.are.equal("oops\n", err)
        assert.are.equal(7, code)
        assert.are.same({ "x\n", "", 0 }, { c:exec("cat", { stdin = "x\n" }) })
        local text = string.format("hello %s %d\n", flavour, math.random(1e9))
        local src = tmpfile(text)
        local r = assert(c:upload(src, "/etc/cargoship-test.txt", { mode = "0640" }))
        assert.is_false(r.skipped)
        assert.are.equal("640\n", (c:exec("stat -c %a /etc/cargoship-test.txt")))
        local dst = os.tmpname()
        assert.are.equal(#text, c:download("/etc/cargoship-test.txt", dst))
        assert.are.equal(text, io.open(dst):read("a"))
        os.remove(src)
        os.remove(dst)
        t:close_all()
      end)
    end)
  end

  it("connects to 50 hosts and runs uname -a on all of them in one process", function()
    local hosts = lab.hosts()
    assert.is_true(#hosts >= 50, "the lab fixture must bring up at least 50 hosts, has " .. #hosts)
    local pool = require "cargoship.pool"
    local results = run(function()
      local t = new_transport()
      local r = pool.map({ table.unpack(hosts, 1, 50) }, 50, function(h)
        local c = assert(t:connect(lab.conn(h), h.name))
        local out = assert(c:exec("uname -a"))
        return out
      end)
      t:close_all()
      return r
    end)
    for i = 1, 50 do
      assert.is_true(results[i].ok, tostring(results[i].err))
      assert.matches("^Linux ", results[i][1])
    end
  end)

  it("fails a changed host key with a hostkey error naming the host and fingerprint", function()
    local h = lab.host(1)
    local fake = tmpfile(h.address
      .. " ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBN8oVlYb0LJc1QDq0Yk0+4ZtOr7uYzQ4uMzTn0fUqo1\n")
    local _, err, code = run(function()
      return new_transport { known_hosts = fake }:connect(lab.conn(h), h.name)
    end)
    assert.are.equal("hostkey", code)
    assert.matches(h.name, err, 1, true)
    assert.matches("SHA256:", err, 1, true)
    assert.matches(lab.openssh and "has changed" or "does NOT match", err, 1, true)
    os.remove(fake)
  end)

  it("refuses an unknown host under strict checking, learns it with accept-new", function()
    local h = lab.host(2)
    local empty = tmpfile("")
    local _, err, code = run(function()
      return new_transport { known_hosts = empty }:connect(lab.conn(h), h.name)
    end)
    assert.are.equal("hostkey", code)
    assert.matches(lab.openssh and "Host key verification failed" or "is not in", err, 1, true)
    local c = run(function()
      local conn = new_transport { known_hosts = empty, host_key_policy = "accept-new" }:connect(lab.conn(h), h.name)
      return conn and conn:exec("true") and conn
    end)
    assert.is_truthy(c)
    -- (OpenSSH hashes the name when ssh_config says HashKnownHosts)
    assert.matches((lab.openssh and "" or h.address) .. " ssh%-ed25519 ", io.open(empty):read("a"))
    os.remove(empty)
  end)

  it("reports a key the server does not accept as an auth error", function()
    local dir = os.tmpname()
    os.remove(dir)
    lab.sh("mkdir -p " .. dir .. " && ssh-keygen -q -t ed25519 -N '' -f " .. dir .. "/k")
    local h = lab.host(1)
    local _, err, code = run(function()
      return new_transport():connect(lab.conn(h, { key_path = dir .. "/k" }), h.name)
    end)
    assert.are.equal("auth", code)
    assert.matches(h.name, err, 1, true)
    assert.matches(lab.openssh and "Permission denied" or "refused key", err, 1, true)
    lab.sh("rm -rf " .. dir)
  end)

  if lab.openssh then
    it("logs in with an RSA key (rsa-sha2, which libssh2 1.10 cannot sign)", function()
      local h = lab.host(1)
      local out = run(function()
        local t = new_transport()
        local c = assert(t:connect(lab.conn(h, { key_path = lab.state .. "/id_rsa" }), h.name))
        local out = c:exec("echo ok")
        t:close_all()
        return out
      end)
      assert.are.equal("ok\n", out)
    end)
  else
    it("refuses RSA keys up front, naming the ways out", function()
      local h = lab.host(1)
      local _, err, code = run(function()
        return new_transport():connect(lab.conn(h, { key_path = lab.state .. "/id_rsa" }), h.name)
      end)
      assert.are.equal("auth", code)
      assert.matches("ed25519 or ecdsa", err, 1, true)
      assert.matches("agent", err, 1, true)
      assert.matches("openSSH", err, 1, true)
    end)
  end

  only("libssh2", "decrypts an encrypted key once per run, into a private agent, for every host",
    "OpenSSH in BatchMode takes encrypted keys from the operator's ssh-agent", function()
    local dir = os.tmpname()
    os.remove(dir)
    lab.sh("mkdir -p " .. dir .. " && ssh-keygen -q -t ed25519 -N 'pass phrase' -f " .. dir .. "/k")
    local pub = io.open(dir .. "/k.pub"):read("a")
    local hosts = { table.unpack(lab.hosts(), 1, 6) }
    run(function()
      local t = new_transport()
      for _, h in ipairs(hosts) do
        local c = assert(t:connect(lab.conn(h), h.name))
        assert(c:check("cat >> /etc/ssh/authorized_keys/root", { stdin = pub }))
      end
      t:close_all()
      local asked = 0
      local tp = new_transport {
        passphrase = function() error("the passphrase must come from the variable the options name") end,
        env = function(name)
          if name == "LAB_KEY_PASS" then asked = asked + 1; return "pass phrase" end
          return os.getenv(name)
        end,
      }
      local pool = require "cargoship.pool"
      local r = pool.map(hosts, 6, function(h)
        local conn = lab.conn(h, { key_path = dir .. "/k", options = { IdentityPassphraseEnv = "LAB_KEY_PASS" } })
        local c = assert(tp:connect(conn, h.name))
        return (c:exec("hostname"))
      end)
      for i, h in ipairs(hosts) do
        assert.is_true(r[i].ok, tostring(r[i].err))
        assert.are.equal(h.name .. "\n", r[i][1])
      end
      assert.are.equal(1, asked)
      local agents = tp:session_kind().agents
      assert.are.equal(1, #agents)
      local agent_dir = agents[1].dir
      tp:close_all()
      assert.is_nil(io.open(agent_dir .. "/agent.sock"), "the agent's directory outlived the run")
      -- a wrong passphrase is a clear auth error
      local bad = new_transport { passphrase = function() return "wrong" end }
      local _, err, code = bad:connect(lab.conn(hosts[1], { key_path = dir .. "/k" }), hosts[1].name)
      assert.are.equal("auth", code)
      assert.matches("ssh-add", err, 1, true)
      -- and the lab's hosts forget the key again
      t = new_transport()
      for _, h in ipairs(hosts) do
        local c = assert(t:connect(lab.conn(h), h.name))
        assert(c:check("sed -i '/ pass@/d; /" .. pub:match("AAAA%S+"):sub(1, 40):gsub("/", "\\/") .. "/d' "
          .. "/etc/ssh/authorized_keys/root"))
      end
      t:close_all()
    end)
    lab.sh("rm -rf " .. dir)
  end)

  it("authenticates with an ecdsa key", function()
    local h = lab.host(1)
    local out = run(function()
      local c = assert(new_transport():connect(lab.conn(h, { key_path = lab.state .. "/id_ecdsa" }), h.name))
      local out = c:exec("echo ok")
      -- closed, not left to the collector: a session's keepalive timer keeps it alive, and
      -- the bastion spec below counts the SSH logins host 1 holds
      c:close()
      return out
    end)
    assert.are.equal("ok\n", out)
  end)

  it("names why a checked command failed: its stdout's last lines, then its stderr, else the command", function()
    local h = lab.host(1)
    local errs = run(function()
      local c = assert(new_transport():connect(lab.conn(h), h.name))
      local e = {}
      e[1] = select(2, c:check("echo said on stdout; echo said on stderr >&2; exit 3"))
      e[2] = select(2, c:check("echo fail: /etc/service/x: runsv not running; exit 1"))
      e[3] = select(2, c:check("exit 4"))
      c:close()
      return e
    end)
    -- both: apt explains an unmet dependency on stdout and says only "E: ..." on stderr (issue 23)
    assert.are.equal(h.name .. ": command failed (exit 3): said on stdout\nsaid on stderr", errs[1])
    assert.are.equal(h.name .. ": command failed (exit 1): fail: /etc/service/x: runsv not running", errs[2])
    assert.are.equal(h.name .. ": command failed (exit 4): exit 4", errs[3])
  end)

  it("uses sudo -n for a non-root user and fails clearly when sudo wants a password", function()
    local h = lab.host(1)
    run(function()
      local t = new_transport()
      local tb = assert(t:connect(lab.conn(h, { user = "tb" }), h.name))
      assert.are.equal("tb\n", (tb:exec("id -un")))
      assert.are.equal("root\n", (tb:exec("id -un", { sudo = true })))
      local pw = assert(t:connect(lab.conn(h, { user = "tbpw" }), h.name))
      local out, err, code = pw:exec("id -un", { sudo = true })
      assert.is_nil(out)
      assert.are.equal("auth", code)
      assert.matches("needs a password", err, 1, true)
      assert.matches(h.name, err, 1, true)
      t:close_all()
    end)
  end)

  it("names a login the host refuses after the key (pam_nologin while it boots), not a refused key", function()
    local h = lab.host(1)
    local code0, out0 = lab.lab("ssh 1 " .. "'echo booting > /run/nologin'")
    assert.are.equal(0, code0, out0)
    finally(function() lab.lab("ssh 1 'rm -f /run/nologin'") end)
    local _, err, code = run(function()
      return new_transport():connect(lab.conn(h, { user = "tb" }), h.name)
    end)
    -- the system's ssh cannot tell this close from any other
    assert.are.equal(lab.openssh and "closed" or "auth", code)
    assert.matches(h.name, err, 1, true)
    -- OpenSSH's own words for it; ours name the likely causes
    assert.matches(lab.openssh and "Connection closed by" or "connection closed by the host after key", err, 1, true)
  end)

  it("reports a refused connection", function()
    local h = lab.host(1)
    local _, err, code = run(function()
      return new_transport():connect(lab.conn(h, { port = 2 }), h.name)
    end)
    assert.are.equal("refused", code)
    assert.matches(h.name, err, 1, true)
  end)

  it("times out on a host that stops answering mid-command while the others complete", function()
    -- the victim's exec also tries to end its command there: KILL_TIMEOUT more
    local hosts = lab.hosts()
    local victim = hosts[3]
    local results
    local t0 = util.now()
    run(function()
      local t = new_transport()
      local conns = {}
      for i = 1, 4 do conns[i] = assert(t:connect(lab.conn(hosts[i]), hosts[i].name)) end
      local tasks = {}
      for i = 1, 4 do
        tasks[i] = loop.spawn(function() return conns[i]:exec("sleep 1; echo done", { timeout = 4 }) end)
      end
      loop.sleep(0.3)
      lab.lab("link 3 down")
      results = {}
      for i = 1, 4 do results[i] = { select(2, tasks[i]:join()) } end
      lab.lab("link 3 up")
    end)
    assert.is_true(util.now() - t0 < 10 + transport.KILL_TIMEOUT)
    for i = 1, 4 do
      if i == 3 then
        assert.is_nil(results[i][1])
        assert.are.equal("timeout", results[i][3])
        assert.matches(victim.name, results[i][2], 1, true)
        assert.matches("ending its processes on the host failed", results[i][2], 1, true)
      else
        assert.are.equal("done\n", results[i][1])
      end
    end
  end)

  it("uploads 64 MiB with a matching sha256, skips the second upload, and a cut upload leaves the target", function()
    local h = lab.host(1)
    local big = os.tmpname()
    lab.sh("head -c 67108864 /dev/urandom > " .. big)
    local sum = util.sha256_file(big)
    run(function()
      local t = new_transport()
      local c = assert(t:connect(lab.conn(h), h.name))
      local r = assert(c:upload(big, "/var/tmp/big.bin", { mode = "0600" }))
      assert.is_false(r.skipped)
      assert.are.equal(sum, (c:exec("sha256sum /var/tmp/big.bin")):match("^%x+"))
      assert.is_true(assert(c:upload(big, "/var/tmp/big.bin", { mode = "0600" })).skipped)
      -- a different file, cut mid-way by the host going silent: the old one must stay
      local other = os.tmpname()
      lab.sh("head -c 67108864 /dev/urandom > " .. other)
      local task = loop.spawn(function()
        return c:upload(other, "/var/tmp/big.bin", { mode = "0600", timeout = 3 })
      end)
      loop.sleep(0.05)
      lab.lab("link 1 down")
      local _, ok, err, code = task:join()
      lab.lab("link 1 up")
      assert.is_nil(ok, "the upload should have been cut")
      assert.is_truthy(code == "timeout" or code == "closed", tostring(err))
      local c2 = assert(t:connect(lab.conn(h), h.name))
      assert.are.equal(sum, (c2:exec("sha256sum /var/tmp/big.bin")):match("^%x+"))
      c2:exec("rm -f /var/tmp/big.bin /var/tmp/.big.bin.cargoship-*")
      os.remove(other)
      t:close_all()
    end)
    os.remove(big)
  end)

  it("runs many commands at once on one session", function()
    local h = lab.host(2)
    run(function()
      local c = assert(new_transport():connect(lab.conn(h), h.name))
      local tasks = {}
      for i = 1, 30 do
        tasks[i] = loop.spawn(function()
          return c:exec("head -c 300000 /dev/zero | tr '\\0' a; echo " .. i .. " >&2")
        end)
      end
      for i = 1, 30 do
        local ok, out, err, code = tasks[i]:join()
        assert.is_true(ok, out)
        assert(out, "command " .. i .. ": " .. tostring(err) .. " (" .. tostring(code) .. ")")
        assert.are.equal(300000, #out)
        assert.are.equal(i .. "\n", err)
        assert.are.equal(0, code)
      end
      -- 100 MB of output, not copied quadratically
      local out = c:exec("head -c 100000000 /dev/zero")
      assert.are.equal(100000000, #out)
      c:close()
    end)
  end)

  -- notes/libssh2.md §5: the three rules concurrent channels on one session need
  it("keeps 8 channels writing 8 MiB of stdin each on one session intact (send gate)", function()
    local h = lab.host(3)
    run(function()
      local c = assert(new_transport():connect(lab.conn(h), h.name))
      local tasks, sums = {}, {}
      for i = 1, 8 do
        local data = string.rep(string.char(64 + i), 8 * 1024 * 1024 - i)
        sums[i] = util.sha256(data)
        tasks[i] = loop.spawn(function() return c:exec("sha256sum", { stdin = data }) end)
      end
      for i = 1, 8 do
        local ok, out, err, code = tasks[i]:join()
        assert.is_true(ok, tostring(out))
        assert.are.equal(0, code, err)
        assert.are.equal(sums[i], out:match("^%x+"))
      end
      c:close()
    end)
  end)

  it("opens 40 channels at once on one session, queued past MaxSessions (control gate)", function()
    local h = lab.host(4)
    run(function()
      local c = assert(new_transport():connect(lab.conn(h), h.name))
      local tasks = {}
      for i = 1, 40 do tasks[i] = loop.spawn(function() return c:exec("echo " .. i .. "; sleep 0.2") end) end
      for i = 1, 40 do
        local ok, out = tasks[i]:join()
        assert.is_true(ok)
        assert.are.equal(i .. "\n", out)
      end
      assert.are.equal(0, c.session:info().channels)
      c:close()
    end)
  end)

  only("libssh2", "runs each command after a session's first on a channel opened while the one before ran",
    "openSSH: its master opens the channels", function()
    local h = lab.host(5)
    run(function()
      for _, spare in ipairs { true, false } do
        local c = assert(new_transport { spare_channel = spare }:connect(lab.conn(h), h.name))
        for i = 1, 5 do assert.are.same({ i .. "\n", "", 0 }, { c:exec("echo " .. i) }) end
        local info = c.session:info()
        assert.are.equal(5, info.commands)
        -- the first opens its own; each later one takes the spare its predecessor opened
        assert.are.equal(spare and 4 or 0, info.opened_ahead)
        assert.are.equal(spare, info.spare)
        assert.are.equal(0, info.channels)
        -- commands at once: each opens its own, and the spare goes to one of them
        local tasks = {}
        for i = 1, 12 do tasks[i] = loop.spawn(function() return c:exec("echo " .. i .. "; sleep 0.1") end) end
        for i = 1, 12 do
          local ok, out = tasks[i]:join()
          assert.is_true(ok)
          assert.are.equal(i .. "\n", out)
        end
        assert.are.same({ "x\n", "", 0 }, { c:exec("cat", { stdin = "x\n" }) })
        assert.are.equal(0, c.session:info().channels)
        c:close()
      end
    end)
  end)

  only("libssh2", "reaches 10 hosts through one bastion session",
    "openSSH: blocks jump through ssh_config's ProxyJump/ProxyCommand, openssh_spec", function()
    local hosts = lab.hosts()
    local bastion = lab.conn(hosts[1])
    run(function()
      -- SSH logins host 1 holds, counted through a session of its own: an earlier spec's
      -- session still open there must not count for or against the bastion
      local watch = assert(new_transport():connect(bastion, hosts[1].name))
      local function logins()
        local ss = assert(watch:exec("ss -Htnp state established '( sport = :22 )'"))
        return select(2, ss:gsub("[^\n]+", "")), ss
      end
      local before = logins()
      local t = new_transport()
      local pool = require "cargoship.pool"
      local r = pool.map({ table.unpack(hosts, 2, 11) }, 10, function(h)
        local c = assert(t:connect(lab.conn(h, { bastion = bastion }), h.name))
        return (c:exec("hostname"))
      end)
      for i = 1, 10 do
        assert.is_true(r[i].ok, tostring(r[i].err))
        assert.are.equal(hosts[i + 1].name .. "\n", r[i][1])
      end
      local n = 0
      for _ in pairs(t:session_kind().bastions) do n = n + 1 end
      assert.are.equal(1, n)
      -- the bastion saw one SSH login more, whatever the number of hosts behind it
      local after, ss = logins()
      assert.are.equal(before + 1, after, "SSH connections host 1 holds:\n" .. ss)
      t:close_all()
      watch:close()
    end)
  end)

  only("libssh2", "closes sessions cleanly and frees them", "the runtime's libssh2 sessions", function()
    local h = lab.host(1)
    run(function()
      local kh = assert(ssh.known_hosts(lab.known_hosts))
      for _ = 1, 5 do
        local s = assert(ssh.connect { address = h.address, user = "root", key_path = lab.key, known_hosts = kh })
        assert.is_true(s:close())
        assert.has_error(function() s:exec("true") end)
      end
    end)
  end)
end)

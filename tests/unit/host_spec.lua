-- Specs of cargoship.host: batched probes run by a real shell, and writes refused in a dry run.
local host_mod = require "cargoship.host"

-- A connection that runs each command with the local /bin/sh, as a host's shell would.
local function local_conn()
  local c = { sent = {} }
  function c.exec(_, cmd, opts)
    c.sent[#c.sent + 1] = cmd
    c.timeouts = c.timeouts or {}
    c.timeouts[#c.timeouts + 1] = opts and opts.timeout or false
    local path, input = os.tmpname(), os.tmpname()
    local f = io.open(input, "w")
    f:write(opts and opts.stdin or "")
    f:close()
    local p = io.popen("sh -c " .. require("cargoship.util").quote(cmd) .. " 2>" .. path .. " <" .. input)
    local out = p:read("a")
    local _, _, code = p:close()
    local err = io.open(path):read("a")
    os.remove(path)
    os.remove(input)
    return out, err, code
  end
  c.check = c.exec
  return c
end

local function new_host(dry_run)
  local h = host_mod.new { config = { index = 1, name = "h1", role = "worker" }, dry_run = dry_run }
  h:attach(local_conn())
  return h
end

describe("host:probes", function()
  it("answers every key from one round trip, with each key's own exit status", function()
    local h = new_host(true)
    local res = assert(h:probes {
      a = "echo alpha",
      b = "echo beta; false",
      c = "printf 'no newline'",
      d = "echo to stderr >&2; echo out",
    })
    assert.are.same({ out = "alpha\n", code = 0 }, res.a)
    assert.are.same({ out = "beta\n", code = 1 }, res.b)
    assert.are.equal("no newline", res.c.out)
    assert.are.equal("out\n", res.d.out)
    assert.are.equal(1, #h.conn.sent)
    assert.are.equal(1, h.probes_sent)
  end)

  it("keeps a key that exits from cutting the others short", function()
    local h = new_host(true)
    local res = assert(h:probes { a = "echo one; exit 4", b = "echo two", z = "exit 0" })
    assert.are.same({ out = "one\n", code = 4 }, res.a)
    assert.are.same({ out = "two\n", code = 0 }, res.b)
    assert.are.equal(0, res.z.code)
  end)

  it("runs keys without exit in a brace group, those with exit in a subshell", function()
    local h = new_host(true)
    assert(h:probes { a = "echo a", b = "exit 1" })
    local script = h.conn.sent[1]
    assert.matches("{ echo a\n} 2>/dev/null", script, 1, true)
    assert.matches("( exit 1\n) 2>/dev/null", script, 1, true)
  end)
end)

describe("host command deadlines", function()
  it("gives every read and write a deadline unless the caller sets one", function()
    local h = new_host(false)
    h:probe("true")
    h:probe("true", { timeout = 5 })
    h:run("true")
    h:check("true")
    assert.are.same({ host_mod.READ_TIMEOUT, 5, host_mod.WRITE_TIMEOUT, host_mod.WRITE_TIMEOUT }, h.conn.timeouts)
  end)
end)

describe("host writes", function()
  for _, case in ipairs {
    { "run", function(h) return h:run("touch /x") end },
    { "check", function(h) return h:check("touch /x") end },
    { "write_file", function(h) return h:write_file("/etc/x", "y") end },
    { "upload", function(h) return h:upload("/tmp/x", "/etc/x") end },
    { "remove", function(h) return h:remove("/etc/x") end },
  } do
    it("refuses " .. case[1] .. " in a dry run, before anything reaches the host", function()
      local h = new_host(true)
      local ok, err = pcall(case[2], h)
      assert.is_false(ok)
      assert.matches("^h1: dry run: refused to ", err)
      assert.are.equal(0, #h.conn.sent)
      assert.are.equal(1, #h.refused)
    end)
  end

  it("lets reads through in a dry run", function()
    local h = new_host(true)
    assert.are.equal("x\n", (h:probe("echo x")))
    assert.is_true(h:exists("/"))
    assert.is_false(h:exists("/no/such/path"))
    local _, _, code = h:read_file("/no/such/path")
    assert.are.equal("notfound", code)
  end)

  it("writes a file through a temporary name when not a dry run", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir " .. dir)
    local h = new_host(false)
    assert.is_true(h:write_file(dir .. "/f", "content\n", { mode = "0640" }))
    assert.are.equal("content\n", io.open(dir .. "/f"):read("a"))
    local p = io.popen("stat -c %a " .. dir .. "/f; ls -A " .. dir)
    assert.are.equal("640\nf\n", p:read("a"))
    p:close()
    os.execute("rm -rf " .. dir)
  end)

  -- sha256sum marks a name holding a backslash with a "\\" before the hash: the script read that
  -- as the hash, so a converged write under such a name was written again on every apply
  it("skips a write record whose target holds the content already, a backslash in its name too", function()
    local dir = os.tmpname()
    os.remove(dir)
    os.execute("mkdir " .. dir)
    local function run(a)
      local files = require "unit.files"
      files.write(dir .. "/script", host_mod.write_script(a))
      files.write(dir .. "/stdin", host_mod.write_stdin(a))
      local p = io.popen("sh " .. dir .. "/script < " .. dir .. "/stdin")
      local out = p:read("a")
      p:close()
      return out
    end
    for _, name in ipairs({ "plain", "odd\\name" }) do
      local a = { path = dir .. "/" .. name, content = "content\n", mode = "0640" }
      assert.are.equal("cs-done\n", run(a), name)
      assert.are.equal("cs-skipped\n", run(a), name)
      assert.are.equal("content\n", io.open(a.path):read("a"))
    end
    os.execute("rm -rf " .. dir)
  end)
end)

describe("host:reconnect", function()
  it("opens the new session before closing the old one, and a dry run refuses it", function()
    local events = {}
    local old = { close = function() events[#events + 1] = "close old" end }
    local new = { close = function() events[#events + 1] = "close new" end }
    local transport = { connect = function(_, c, name)
      events[#events + 1] = "connect " .. name .. " " .. c.address
      return new
    end }
    local h = host_mod.new { config = { index = 1, name = "h1", role = "worker",
      connection = { address = "192.0.2.1" } }, transport = transport }
    h:attach(old)
    assert.is_true(h:reconnect())
    assert.are.same({ "connect h1 192.0.2.1", "close old" }, events)
    assert.are.equal(new, h.conn)
    local dry = host_mod.new { config = { index = 1, name = "h1", role = "worker" }, dry_run = true,
      transport = transport }
    dry:attach(old)
    assert.has_error(function() dry:reconnect() end, "h1: dry run: refused to reconnect")
    local failing = host_mod.new { config = { index = 1, name = "h1", role = "worker" },
      transport = { connect = function() return nil, "h1: connection refused", "connect" end } }
    failing:attach(old)
    assert.are.same({ nil, "h1: connection refused", "connect" }, { failing:reconnect() })
    assert.are.equal(old, failing.conn, "a failed reconnect keeps the session it had")
  end)
end)

-- Specs of cargoship.facts.prefetch: later phases' reads sent ahead in one batch, answered, forgotten on a write.
--
-- The batch is run by this machine's real /bin/sh (a fake connection hands the command to
-- it), so the shell plumbing (stdout, stderr, status per command, isolation) is tested for
-- real; the commands themselves only echo.
local prefetch = require "cargoship.facts.prefetch"
local host_mod = require "cargoship.host"
local shell = require "cargoship.shell"

local function sh(cmd)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(cmd)
  f:close()
  local errp = os.tmpname()
  local p = assert(io.popen("sh " .. shell.quote(path) .. " 2>" .. shell.quote(errp)))
  local out = p:read("a")
  local _, _, code = p:close()
  local ef = assert(io.open(errp))
  local err = ef:read("a")
  ef:close()
  os.remove(path)
  os.remove(errp)
  return out, err, code
end

-- A connection whose commands run in /bin/sh here; every command is recorded.
local function conn(o)
  o = o or {}
  local c = { sent = {}, root = o.root ~= false }
  function c.exec(_, cmd, opts)
    c.sent[#c.sent + 1] = { cmd = cmd, sudo = opts and opts.sudo }
    -- sudo as this spec wants it: a no-op prefix, or a command that is not there
    return sh((cmd:gsub("sudo %-n ", o.sudo == false and "cs_no_sudo_here " or "")))
  end
  function c.sudo_known() return c.root and "" or (c.sudo_ok and "sudo -n " or nil) end
  function c.sudo_answer(_, code) c.sudo_ok, c.answered = code == 0, code end
  function c.check(_, cmd, opts) return c.exec(c, cmd, opts) end
  return c
end

local function new_host(c, dry_run)
  local h = host_mod.new { config = { name = "h1", role = "controller" }, dry_run = dry_run ~= false }
  h:attach(c)
  return h
end

local function ctx()
  return {
    clock = function() return 1000 end,
    each = function(_, hosts, fn) for _, h in ipairs(hosts) do fn(h) end return true end,
  }
end

describe("facts.prefetch", function()
  it("gives each command its own stdout, stderr and status; one's exit or variables do not reach another", function()
    local list = {
      { cmd = "printf 'a\\nb'; echo oops >&2; exit 3" },
      { cmd = "x=1; echo \"x=${x}\"" },
      { cmd = "echo \"x=${x:-unset}\"; true" },
      { cmd = "printf ''" },
    }
    local out, _, code = sh(prefetch.script(list))
    assert.equal(0, code)
    local got = prefetch.parse(out, list)
    assert.same({ out = "a\nb", err = "oops", code = 3 }, got[1])
    assert.same({ out = "x=1\n", err = "", code = 0 }, got[2])
    assert.same({ out = "x=unset\n", err = "", code = 0 }, got[3])
    assert.same({ out = "", err = "", code = 0 }, got[4])
  end)

  it("keeps only the sections that came back whole", function()
    local list = { { cmd = "echo one" }, { cmd = "echo two" } }
    local out = sh(prefetch.script(list))
    local cut = out:sub(1, out:find("two", 1, true))
    local got = prefetch.parse(cut, list)
    assert.same({ out = "one\n", err = "", code = 0 }, got[1])
    assert.is_nil(got[2])
  end)

  describe("through a host", function()
    local phases = {
      { id = "a", prefetch = function() return { one = "echo one", two = "echo two; exit 1" }, { sudo = false } end },
      { id = "b" },
      { id = "c", prefetch = function(_, host) if host.os then return { three = "echo three" } end end },
      { id = "d", prefetch = function() return { lock = "echo lock" } end },
    }

    it("sends one batch before the first phase; its reads and later phases' cost nothing more", function()
      local c = conn()
      local h = new_host(c)
      prefetch.before_phase(ctx(), phases, 1, { h })
      assert.equal(1, #c.sent)
      assert.is_false(c.sent[1].sudo, "the batch runs as the login user")
      local res, taken = h:probes({ one = "echo one", two = "echo two; exit 1" }, { sudo = false })
      assert.same({ one = { out = "one\n", code = 0 }, two = { out = "two\n", code = 1 } }, res)
      assert.same({ 1000, 1000 }, taken)
      assert.same({ "lock\n", "", 0 }, { h:probe("echo lock") })
      assert.equal(1, #c.sent, "answered from the batch")
      assert.equal(1, h.probes_sent)
    end)

    it("asks a phase that could not say its reads again later, and sends only what is new", function()
      local c = conn()
      local h = new_host(c)
      prefetch.before_phase(ctx(), phases, 1, { h })
      prefetch.before_phase(ctx(), phases, 2, { h })  -- b has no prefetch: nothing sent
      assert.equal(1, #c.sent)
      h.os = {}
      prefetch.before_phase(ctx(), phases, 3, { h })
      assert.equal(2, #c.sent)
      assert.is_nil(c.sent[2].cmd:find("echo lock", 1, true), "what was answered is not sent again")
      assert.same({ three = { out = "three\n", code = 0 } }, (h:probes({ three = "echo three" })))
      prefetch.before_phase(ctx(), phases, 4, { h })
      assert.equal(2, #c.sent)
    end)

    it("answers only the same command as the same user", function()
      local c = conn()
      local h = new_host(c)
      prefetch.before_phase(ctx(), phases, 1, { h })
      h:probes({ one = "echo one" })  -- as root: not what was fetched (login user)
      h:probe("echo lock ")
      assert.equal(3, #c.sent)
    end)

    it("asks sudo in the batch for a login that is not root, and keeps root's answers only if it works", function()
      local c = conn { root = false }
      local h = new_host(c)
      prefetch.before_phase(ctx(), phases, 1, { h })
      assert.equal(1, #c.sent, "deciding sudo costs no round trip of its own")
      assert.equal(0, c.answered)
      assert.same({ "lock\n", "", 0 }, { h:probe("echo lock") })
      assert.equal(1, #c.sent)
      local bad = conn { root = false, sudo = false }
      local h2 = new_host(bad)
      prefetch.before_phase(ctx(), phases, 1, { h2 })
      assert.equal(127, bad.answered)
      assert.is_nil(h2:recall("echo lock", true), "sudo failed: the phase asks itself and reports why")
      assert.is_truthy(h2:recall("echo one", false), "the login user's reads are kept")
    end)

    it("forgets every answer at the host's first write", function()
      local c = conn()
      local h = new_host(c, false)
      prefetch.before_phase(ctx(), phases, 1, { h })
      assert.is_truthy(h:recall("echo lock", true))
      h:run("true")
      assert.is_nil(h:recall("echo lock", true))
      h:probe("echo lock")
      assert.equal(3, #c.sent)
    end)

    it("changes nothing when the batch fails: the phases ask for themselves", function()
      local c = conn()
      function c.exec(_, cmd) c.sent[#c.sent + 1] = { cmd = cmd }; return nil, "h1: closed", "closed" end
      local h = new_host(c)
      prefetch.before_phase(ctx(), phases, 1, { h })
      assert.is_nil(h.prefetched)
    end)
  end)
end)

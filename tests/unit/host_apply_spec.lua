-- Specs of host:apply: action records executed by a real local shell standing in for the host's.
local action = require "cargoship.action"
local host_mod = require "cargoship.host"
local util = require "cargoship.util"

local function sh(cmd, stdin)
  local path, input = os.tmpname(), os.tmpname()
  local f = io.open(input, "w")
  f:write(stdin or "")
  f:close()
  local p = io.popen("sh -c " .. util.quote(cmd) .. " 2>" .. path .. " <" .. input)
  local out = p:read("a")
  local _, _, code = p:close()
  local err = io.open(path):read("a")
  os.remove(path)
  os.remove(input)
  return out, err, code
end

-- A connection as transport.lua's: exec answers the exit code, check fails on non-zero,
-- upload records what it was asked and answers as told.
local function local_conn(o)
  o = o or {}
  local c = { sent = {}, uploads = {}, stdins = {} }
  function c.exec(_, cmd, opts)
    c.sent[#c.sent + 1] = cmd
    c.stdins[#c.sent] = opts and opts.stdin
    return sh(cmd, opts and opts.stdin)
  end
  function c.check(_, cmd, opts)
    c.sent[#c.sent + 1] = cmd
    c.stdins[#c.sent] = opts and opts.stdin
    local out, err, code = sh(cmd, opts and opts.stdin)
    if code ~= 0 then
      return nil, "h1: command failed (exit " .. code .. "): " .. (err:match("[^\n]*") or ""), "exit"
    end
    return out, err
  end
  function c.upload(_, src, dst, opts)
    c.uploads[#c.uploads + 1] = { src = src, dst = dst, opts = opts }
    if o.upload_error then return nil, o.upload_error, "io" end
    return { skipped = o.upload_skipped or false, bytes = 3, sha256 = opts.sha256 }
  end
  return c
end

local function new_host(dry_run, o)
  local h = host_mod.new { config = { index = 1, name = "h1", role = "worker" }, dry_run = dry_run }
  h:attach(local_conn(o))
  return h
end

local function tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir " .. dir))
  return dir
end

local read = require("unit.files").read

local function stat(path)
  local p = io.popen("stat -c '%a' " .. path)
  local s = p:read("l")
  p:close()
  return s
end

local function statuses(outcomes)
  local out = {}
  for i, o in ipairs(outcomes) do out[i] = o.status end
  return out
end

describe("host:apply", function()
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  it("writes a file atomically, then skips it when content and mode are already in place", function()
    local h = new_host(false)
    local w = action.write { path = dir .. "/f", content = "hello\n", mode = "0640" }
    local outcomes, err = h:apply({ w })
    assert.is_nil(err)
    assert.are.same({ "done" }, statuses(outcomes))
    assert.are.equal("hello\n", read(dir .. "/f"))
    assert.are.equal("640", stat(dir .. "/f"))
    local p = io.popen("ls -A " .. dir)
    assert.are.equal("f\n", p:read("a"))
    p:close()
    -- the check and the write are one round trip each time
    local sent = #h.conn.sent
    assert.are.same({ "skipped" }, statuses(h:apply({ w })))
    assert.are.equal(sent + 1, #h.conn.sent)
  end)

  -- the command is argv on the host (sh -c, sudo, env: `ps` shows it to every local user,
  -- sudo logs it); the hash of a token or a password is an offline guess away from it
  it("sends no hash of a written file's content in the command, only on stdin, and still skips", function()
    local h = new_host(false)
    local content = "token: K10hunter2\n"
    local sum = util.sha256(content)
    local w = action.write { path = dir .. "/token", content = content, mode = "0600", secret = true }
    assert.are.same({ "done" }, statuses(h:apply({ w })))
    assert.are.same({ "skipped" }, statuses(h:apply({ w })))
    local n = #h.conn.sent
    for i = 1, n do
      local cmd = h.conn.sent[i]
      assert.is_nil(cmd:find(sum, 1, true), "the content's sha256 is in the command: " .. cmd)
      assert.is_nil(cmd:find("hunter2", 1, true), "the content is in the command")
      assert.are.equal(sum .. "\n" .. content, h.conn.stdins[i])
    end
    -- the same bytes under another hash line are not "already there": the hash is what is compared
    local out = h.conn:check(h.conn.sent[n], { stdin = util.sha256("other") .. "\n" .. content })
    assert.matches("cs%-done", out)
    assert.are.equal(content, read(dir .. "/token"))
    assert.are.equal("600", stat(dir .. "/token"))
  end)

  it("runs a command marked secret from stdin, so its text is in no argv on the host", function()
    local h = new_host(false)
    local cmd = "printf '%s\\n' s3cr3t-value > " .. dir .. "/out; echo ran"
    assert.are.same({ "done" }, statuses(h:apply({ action.run { cmd = cmd, secret = true } })))
    assert.are.equal("s3cr3t-value\n", read(dir .. "/out"))
    assert.is_nil(h.conn.sent[1]:find("s3cr3t", 1, true), h.conn.sent[1])
    assert.are.equal(cmd, h.conn.stdins[1])
    -- a plain command is sent as it is
    h:apply({ action.run { cmd = "true # visible" } })
    assert.are.equal("true # visible", h.conn.sent[#h.conn.sent])
  end)

  it("rewrites when the content or the mode differ", function()
    local h = new_host(false)
    local path = dir .. "/f"
    assert.are.same({ "done" }, statuses(h:apply({ action.write { path = path, content = "a", mode = "0644" } })))
    assert.are.same({ "done" }, statuses(h:apply({ action.write { path = path, content = "b", mode = "0644" } })))
    assert.are.equal("b", read(path))
    assert.are.same({ "done" }, statuses(h:apply({ action.write { path = path, content = "b", mode = "0600" } })))
    assert.are.equal("600", stat(path))
  end)

  it("keeps an existing file's mode when the action names none", function()
    local h = new_host(false)
    local path = dir .. "/f"
    assert(os.execute("printf old > " .. path .. " && chmod 0604 " .. path))
    assert.are.same({ "done" }, statuses(h:apply({ action.write { path = path, content = "new" } })))
    assert.are.equal("604", stat(path))
    assert.are.same({ "skipped" }, statuses(h:apply({ action.write { path = path, content = "new" } })))
  end)

  it("removes a path, and says skipped when it is already gone", function()
    local h = new_host(false)
    assert(os.execute("touch " .. dir .. "/g"))
    local r = action.remove { path = dir .. "/g" }
    assert.are.same({ "done" }, statuses(h:apply({ r })))
    assert.is_nil(read(dir .. "/g"))
    assert.are.same({ "skipped" }, statuses(h:apply({ r })))
  end)

  it("stops at the first failed action: the rest are not run", function()
    local h = new_host(false)
    local outcomes, err = h:apply({
      action.run { cmd = "true" },
      action.run { cmd = "echo broken >&2; exit 3" },
      action.write { path = dir .. "/never", content = "x" },
    })
    assert.are.same({ "done", "failed", "not_run" }, statuses(outcomes))
    assert.matches("exit 3", err)
    assert.are.equal(err, outcomes[2].error)
    assert.is_nil(read(dir .. "/never"))
  end)

  it("uploads through the connection with the planned sha256, and reports its skip", function()
    local h = new_host(false, { upload_skipped = true })
    local outcomes = h:apply({ action.upload { path = "/opt/x", source = "/tmp/x", sha256 = "ab12", mode = "755" } })
    assert.are.same({ "skipped" }, statuses(outcomes))
    local u = h.conn.uploads[1]
    assert.are.same({ "/tmp/x", "/opt/x", "ab12", "0755" }, { u.src, u.dst, u.opts.sha256, u.opts.mode })
  end)

  it("fails an upload the connection refuses", function()
    local h = new_host(false, { upload_error = "sha256 is x, not the planned y" })
    local outcomes, err = h:apply({ action.upload { path = "/opt/x", source = "/tmp/x", sha256 = "y" } })
    assert.are.same({ "failed" }, statuses(outcomes))
    assert.matches("not the planned", err)
  end)

  it("runs service verbs through the host's OS configurer", function()
    local h = new_host(false)
    h.os = { service = function(_, verb, name) return "echo " .. verb .. "-" .. name end }
    assert.are.same({ "done" }, statuses(h:apply({ action.service { verb = "restart", service = "rke2-server" } })))
    assert.are.equal("echo restart-rke2-server", h.conn.sent[#h.conn.sent])
    h.os = { service = function() return nil, "no service manager detected" end }
    local outcomes, err = h:apply({ action.service { verb = "start", service = "x" } })
    assert.are.same({ "failed" }, statuses(outcomes))
    assert.matches("no service manager detected", err)
  end)

  it("calls the phase's step with the context, the host and the record", function()
    local h = new_host(false)
    local ctx, seen = {}, {}
    local steps = {
      drain = function(c, host, a) seen[#seen + 1] = { c, host, a.node } return true end,
      wait = function() return "skipped" end,
      boom = function() return nil, "node never became Ready" end,
      raise = function() error("oops", 0) end,
    }
    local list = {
      action.step { name = "drain", say = "drain node n1", node = "n1" },
      action.step { name = "wait", say = "wait for Ready" },
      action.step { name = "boom", say = "wait again" },
    }
    local outcomes, err = h:apply(list, { ctx = ctx, steps = steps })
    assert.are.same({ "done", "skipped", "failed" }, statuses(outcomes))
    assert.are.equal("node never became Ready", err)
    assert.are.same({ { ctx, h, "n1" } }, seen)
    local o2, e2 = h:apply({ action.step { name = "raise", say = "r" } }, { steps = steps })
    assert.are.same({ "failed" }, statuses(o2))
    assert.are.equal("oops", e2)
    local o3, e3 = h:apply({ action.step { name = "missing", say = "m" } }, { steps = steps })
    assert.are.same({ "failed" }, statuses(o3))
    assert.matches("no step missing", e3)
  end)

  it("refuses a note: a sentence is not something to execute", function()
    local h = new_host(false)
    local outcomes, err = h:apply({ action.note("rewrite /etc/motd") })
    assert.are.same({ "failed" }, statuses(outcomes))
    assert.matches("is a sentence, not an action", err)
  end)

  it("is refused as a whole in a dry run, before anything reaches the host", function()
    local h = new_host(true)
    local ok, err = pcall(h.apply, h, { action.write { path = dir .. "/f", content = "x" } })
    assert.is_false(ok)
    assert.matches("^h1: dry run: refused to apply 1 action", err)
    assert.are.equal(0, #h.conn.sent)
    assert.is_nil(read(dir .. "/f"))
  end)

  it("raises on a table that is no action record (a phase's bug)", function()
    local h = new_host(false)
    assert.has_error(function() h:apply({ { kind = "bogus" } }) end)
  end)
end)

-- Round trips: a phase's consecutive records go to the host as one script (cargoship.host_batch),
-- run here by a real shell; each keeps its own outcome, error and stdin bytes.
describe("host:apply, consecutive records in one round trip", function()
  local batch = require "cargoship.host_batch"
  local dir
  before_each(function() dir = tmpdir() end)
  after_each(function() os.execute("rm -rf " .. dir) end)

  it("sends writes, removes, runs and service verbs as one command whose argv carries no record", function()
    local h = new_host(false)
    h.os = { service = function(_, verb, name) return "echo " .. verb .. "-" .. name .. " >> " .. dir .. "/svc" end }
    assert(os.execute("touch " .. dir .. "/old"))
    local secret = "token: K10hunter2\n"
    local acts = {
      action.run { cmd = "cat > " .. dir .. "/stdin-seen; echo ran", secret = true },
      action.write { path = dir .. "/a", content = secret, mode = "0600" },
      action.write { path = dir .. "/empty", content = "" },
      action.write { path = dir .. "/raw", content = "no newline\30cs-z:1:0\n\30cs-a:9\nx" },
      action.remove { path = dir .. "/old" },
      action.remove { path = dir .. "/never-was" },
      action.service { verb = "enable", service = "k3s-agent" },
      action.service { verb = "start", service = "k3s-agent" },
    }
    local outcomes, err = h:apply(acts)
    assert.is_nil(err)
    assert.are.same({ "done", "done", "done", "done", "done", "skipped", "done", "done" }, statuses(outcomes))
    assert.are.equal(1, #h.conn.sent, "one command for the eight records")
    assert.are.equal(batch.LOADER, h.conn.sent[1], "the command line is the loader alone")
    assert.are.equal(secret, read(dir .. "/a"))
    assert.are.equal("600", stat(dir .. "/a"))
    assert.are.equal("", read(dir .. "/empty"))
    assert.are.equal("no newline\30cs-z:1:0\n\30cs-a:9\nx", read(dir .. "/raw"))
    assert.is_nil(read(dir .. "/old"))
    assert.are.equal("", read(dir .. "/stdin-seen"), "a run reads none of the later records' bytes")
    assert.are.equal("enable-k3s-agent\nstart-k3s-agent\n", read(dir .. "/svc"))
    -- the same records again: one round trip, the writes skipped
    local again = h:apply({ acts[2], acts[3], acts[4] })
    assert.are.same({ "skipped", "skipped", "skipped" }, statuses(again))
    assert.are.equal(2, #h.conn.sent)
  end)

  it("stops at the failing record: those before done, its own exit and stderr named with host and record, "
    .. "the rest not run", function()
    local h = new_host(false)
    local outcomes, err = h:apply({
      action.write { path = dir .. "/one", content = "1" },
      action.run { cmd = "echo said-before; echo first-err >&2; true" },
      action.run { cmd = "echo why-on-stdout; echo broken >&2; exit 7", say = "start the agent" },
      action.write { path = dir .. "/never", content = "x" },
      action.run { cmd = "touch " .. dir .. "/never2" },
    })
    assert.are.same({ "done", "done", "failed", "not_run", "not_run" }, statuses(outcomes))
    assert.are.equal("h1: start the agent: command failed (exit 7): why-on-stdout\nbroken", err)
    assert.are.equal(err, outcomes[3].error)
    assert.are.equal("1", read(dir .. "/one"))
    assert.is_nil(read(dir .. "/never"))
    assert.is_nil(read(dir .. "/never2"))
    assert.are.equal(1, #h.conn.sent)
  end)

  it("sends alone what cannot share a script: an upload splits the run, a lone record keeps its own command",
    function()
    local h = new_host(false)
    local outcomes = h:apply({
      action.write { path = dir .. "/a", content = "a" },
      action.run { cmd = "true" },
      action.upload { path = "/opt/x", source = "/tmp/x", sha256 = "ab12" },
      action.run { cmd = "echo lone" },
      action.run { cmd = "cat", stdin = "own stdin" },
    })
    assert.are.same({ "done", "done", "done", "done", "done" }, statuses(outcomes))
    -- the batch (write + run), then the upload (the connection's), the lone run, the run with stdin
    assert.are.same({ batch.LOADER, "echo lone", "cat" }, h.conn.sent)
    assert.are.equal(1, #h.conn.uploads)
  end)
end)

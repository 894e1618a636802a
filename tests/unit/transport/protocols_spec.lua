-- Specs of the command and transfer protocols over a session kind of the spec's own (local sh): no libssh2 below them.
local loop = require "cargoship.loop"
local util = require "cargoship.util"
local command = require "cargoship.transport.command"
local connection = require "cargoship.transport.connection"

local RUN = "seam-" .. util.getpid()   -- unique tags: the kill script looks through every /proc here

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- For setting up and looking at the "host" only, never for the protocols' commands.
local function sh(script)
  local p = assert(io.popen("sh -c " .. util.quote(script) .. " 2>&1"))
  local out = p:read("a")
  p:close()
  return out
end

-- The local session kind: the host is this machine. exec runs `sh -c cmd` in the background
-- from the login user's home (dir/home) with a sudo stand-in first on PATH, and waits for
-- it by polling the loop, so commands run side by side and one that times out or whose task
-- is cancelled goes on running, as it does behind an SSH channel. put and get copy files.
local Local = {}
Local.__index = Local

local SUDO = [[#!/bin/sh
d=$(dirname "$0")/..
printf '%s\n' "$*" >>"$d/sudo.log"
[ ! -e "$d/sudo-password" ] || { echo "sudo: a password is required" >&2; exit 1; }
[ "$1" = -n ] && shift
exec "$@"
]]

-- df as the host's: the real one, unless the spec set the free KiB of every filesystem
local DF = [[#!/bin/sh
d=$(dirname "$0")/..
[ -e "$d/df-avail" ] || exec /usr/bin/df "$@"
printf 'Filesystem 1024-blocks Used Available Capacity Mounted on\nfake 1 1 %s 100%% /\n' "$(cat "$d/df-avail")"
]]

local function local_session(dir, o)
  sh(string.format("mkdir -p %s/home %s/bin %s/x %s/root/etc", dir, dir, dir, dir))
  write(dir .. "/bin/sudo", SUDO)
  write(dir .. "/bin/df", DF)
  sh("chmod +x " .. util.quote(dir .. "/bin/sudo") .. " " .. util.quote(dir .. "/bin/df"))
  local s = setmetatable({ dir = dir, home = dir .. "/home", name = "h1", n = 0,
    wires = {}, stdins = {}, puts = {}, gets = {} }, Local)
  for k, v in pairs(o or {}) do s[k] = v end
  return s
end

-- Hands a stream over in 5-byte chunks, so the marker arrives cut in pieces.
local function deliver(text, callback)
  for i = 1, #text, 5 do callback(text:sub(i, i + 4)) end
end

function Local:exec(cmd, opts)
  opts = opts or {}
  if self.closed then return nil, self.name .. ": exec: session closed", "closed" end
  self.n = self.n + 1
  local base = self.dir .. "/x/" .. self.n
  self.wires[self.n], self.stdins[self.n] = cmd, opts.stdin
  write(base .. ".cmd", cmd)
  write(base .. ".in", opts.stdin or "")
  local q = util.quote
  os.execute(string.format('( cd %s && PATH=%s:"$PATH" sh -c "$(cat %s)" <%s >%s 2>%s; echo $? >%s; mv %s %s ) '
    .. '>/dev/null 2>&1 &', q(self.home), q(self.dir .. "/bin"), q(base .. ".cmd"), q(base .. ".in"),
    q(base .. ".out"), q(base .. ".err"), q(base .. ".rc.tmp"), q(base .. ".rc.tmp"), q(base .. ".rc")))
  local t0 = loop.now()
  while not read(base .. ".rc") do
    if opts.timeout and opts.timeout > 0 and loop.now() - t0 > opts.timeout then
      return nil, string.format("%s: exec: timed out after %s s", self.name, opts.timeout), "timeout"
    end
    loop.sleep(0.01)
  end
  local out, err, status = read(base .. ".out"), read(base .. ".err"), tonumber(read(base .. ".rc"))
  if self.drop_marker then err = err:gsub("\30.*$", "") end
  if opts.on_stdout then deliver(out, opts.on_stdout); out = "" end
  if opts.on_stderr then deliver(err, opts.on_stderr); err = "" end
  return out, err, status
end

function Local:put(local_path, remote, opts)
  self.puts[#self.puts + 1] = { local_path = local_path, remote = remote, opts = opts }
  local path = remote:sub(1, 1) == "/" and remote or (self.home .. "/" .. remote)
  local data = assert(read(local_path))
  if self.corrupt then data = data .. "!" end
  if self.cut then
    write(path, data:sub(1, 3))
    return nil, self.name .. ": sftp: connection cut", "closed"
  end
  if self.full then   -- the filesystem filled up mid-write: SFTP says only "failure"
    write(path, data:sub(1, 3))
    return nil, self.name .. ": sftp: write " .. remote .. ": sftp status 4", "io"
  end
  write(path, data)
  sh(string.format("chmod %o %s", opts.mode, util.quote(path)))
  return #data
end

function Local:get(remote, local_path)
  self.gets[#self.gets + 1] = remote
  local data = read(remote)
  if not data then return nil, self.name .. ": sftp: " .. remote .. ": no such file", "io" end
  write(local_path, data)
  return #data
end

function Local:state() return self.closed and "closed" or "ready" end
function Local:close() self.closed = true end

local function run(fn)
  local ok, a, b, c = loop.run(fn)
  assert(ok, a)
  return a, b, c
end

-- The pids of processes here whose environment carries tag (none once a command is ended).
local function tagged_pids(tag)
  return sh("grep -lsxzF " .. util.quote(command.TAG_VAR .. "=" .. tag) .. " /proc/[0-9]*/environ; true")
end

describe("the command protocol over a local session kind", function()
  local dir, s
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    s = local_session(dir)
  end)
  after_each(function() os.execute("rm -rf " .. util.quote(dir)) end)

  local function conn(user) return connection.new(s, { name = "h1", user = user or "root", run_id = RUN, seq = 1 }) end

  it("reads the exit status from its marker and keeps the marker out of stderr, also when streamed", function()
    local r, chunks = {}, {}
    run(function()
      local c = conn()
      r[1] = table.pack(c:exec("echo out; echo err >&2; exit 7"))
      -- a command that prints something like the marker itself: the last one is ours
      r[2] = table.pack(c:exec("printf '\\036cs-exit:5\\n' >&2; exit 3"))
      r[3] = table.pack(c:exec("echo err >&2; exit 4", { on_stderr = function(d) chunks[#chunks + 1] = d end }))
    end)
    assert.are.same({ "out\n", "err\n", 7 }, { r[1][1], r[1][2], r[1][3] })
    assert.are.same({ "", "\30cs-exit:5\n", 3 }, { r[2][1], r[2][2], r[2][3] })
    assert.are.equal(4, r[3][3])
    assert.are.equal("err\n", table.concat(chunks))
  end)

  it("fails 'closed' when the session brings no exit status back", function()
    s.drop_marker = true
    local out, err, code = run(function() return conn():exec("true") end)
    assert.is_nil(out)
    assert.are.equal("closed", code)
    assert.matches("h1: exec: no exit status came back", err, 1, true)
  end)

  it("tags every command in its environment, and sudo runs the tagged command", function()
    local plain, sudoed, as_root
    run(function()
      local c = conn("tb")
      plain = c:exec('echo "$CARGOSHIP_CMD"')
      sudoed = c:exec('echo "$CARGOSHIP_CMD"', { sudo = true })
      as_root = conn():check('echo "$CARGOSHIP_CMD"', { sudo = true })
    end)
    assert.are.equal(RUN .. ".1.1\n", plain)
    assert.are.equal(RUN .. ".1.2\n", sudoed)
    assert.are.equal(RUN .. ".1.1\n", as_root)
    local log = read(dir .. "/sudo.log")
    -- once to find out sudo works, once for the command; root needs none
    assert.are.equal("-n true\n", log:sub(1, 8))
    assert.matches("\n-n env CARGOSHIP_CMD=" .. RUN .. ".1.2 sh -c ", log, 1, true)
    local _, n = log:gsub("\n%-n ", "")
    assert.are.equal(1, n)
  end)

  it("refuses sudo with the reason when it needs a password", function()
    write(dir .. "/sudo-password", "")
    local out, err, code = run(function() return conn("tb"):exec("id", { sudo = true }) end)
    assert.is_nil(out)
    assert.are.equal("auth", code)
    assert.matches("h1: sudo: user tb needs a password for sudo", err, 1, true)
  end)

  it("sends a command over MAX_INLINE to the shell's stdin, also under sudo, and keeps stdin for the rest", function()
    local long = "x='" .. string.rep("a", command.MAX_INLINE) .. "'; echo ${#x} \"$CARGOSHIP_CMD\""
    local r = {}
    run(function()
      local c = conn("tb")
      r[1] = c:exec(long)
      r[2] = c:exec(long, { sudo = true })
      r[3] = c:exec("tr a-z A-Z", { stdin = "hello" })
      r[4] = table.pack(c:exec(long, { stdin = "data" }))
    end)
    assert.are.equal(command.MAX_INLINE .. " " .. RUN .. ".1.1\n", r[1])
    assert.are.equal(command.MAX_INLINE .. " " .. RUN .. ".1.2\n", r[2])
    assert.are.equal("HELLO", r[3])
    assert.are.same({ nil, "io" }, { r[4][1], r[4][3] })
    assert.matches("has stdin of its own", r[4][2], 1, true)
    -- the long ones went as a short wire with the script on stdin ("sudo -n true" came first)
    for _, i in ipairs { 1, 3 } do
      assert.is_true(#s.wires[i] < 200, #s.wires[i] .. " bytes")
      assert.matches('eval "$(cat)"', s.wires[i], 1, true)
      assert.is_true(long == s.stdins[i], "the script went over stdin")
    end
  end)

  it("ends a timed-out command's processes on the host before exec returns", function()
    local out, err, code = run(function() return conn():exec("sleep 30; echo late", { timeout = 0.3 }) end)
    assert.is_nil(out)
    assert.are.equal("timeout", code)
    assert.are.equal("h1: exec: timed out after 0.3 s; its processes on the host were ended", err)
    assert.are.equal("", tagged_pids(RUN .. ".1.1"))
    assert.matches("CARGOSHIP_CMD=" .. RUN .. ".1.1", s.wires[2], 1, true)
  end)

  it("ends a cancelled command before the cancellation goes on, and the next command waits for that", function()
    local code, running, next_out
    run(function()
      local c = conn()
      local t = loop.spawn(function() return c:exec("sleep 30") end)
      loop.sleep(0.3)
      assert.are_not.equal("", tagged_pids(RUN .. ".1.1"), "the command runs on the host")
      t:cancel()
      next_out = c:exec("echo next")
      code = select(3, t:join())
      running = c:running()
    end)
    assert.are.equal("cancelled", code)
    assert.are.equal("next\n", next_out)
    assert.are.equal(0, running)
    assert.are.equal("", tagged_pids(RUN .. ".1.1"))
    assert.matches("grep -lsxzF", s.wires[2], 1, true)
    assert.matches("echo next", s.wires[3], 1, true)
  end)

  it("lets a cancelled finishing command (a package manager's transaction) end on its own, within its bound",
    function()
    local done = dir .. "/home/transaction-done"
    local code, t0, waited
    run(function()
      local c = conn()
      local t = loop.spawn(function()
        return c:exec("sleep 0.8; echo unpacked; echo configured >" .. util.quote(done), { finish = 60 })
      end)
      loop.sleep(0.3)
      t0 = loop.now()
      t:cancel()
      code = select(3, t:join())
      waited = loop.now() - t0
    end)
    assert.are.equal("cancelled", code)
    assert.are.equal("configured\n", read(done), "the transaction was killed half-way")
    assert.is_true(waited < 30, waited .. " s")   -- well within the bound: it ended on its own
    assert.are.equal("", tagged_pids(RUN .. ".1.1"))
  end)

  it("ends a cancelled finishing command that outlives its bound", function()
    local code, waited
    run(function()
      local c = conn()
      local t = loop.spawn(function() return c:exec("sleep 300", { finish = 0.5 }) end)
      loop.sleep(0.3)
      local t0 = loop.now()
      t:cancel()
      code = select(3, t:join())
      waited = loop.now() - t0
    end)
    assert.are.equal("cancelled", code)
    -- ended once the bound passed (a loaded machine's /proc scans take seconds), not at its end
    assert.is_true(waited >= 0.5 and waited < 120, waited .. " s")
    assert.are.equal("", tagged_pids(RUN .. ".1.1"))
  end)

  it("keeps a finishing command's output and exit status", function()
    local out, err, code = run(function() return conn():exec("echo out; echo err >&2; exit 3", { finish = 5 }) end)
    assert.are.same({ "out\n", "err\n", 3 }, { out, err, code })
  end)
end)

describe("the transfer protocol over a local session kind", function()
  local dir, s, src, dst
  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    s = local_session(dir)
    src, dst = dir .. "/app.conf", dir .. "/root/etc/app.conf"
    write(src, "key: value\n")
  end)
  after_each(function() os.execute("rm -rf " .. util.quote(dir)) end)

  local function conn(user) return connection.new(s, { name = "h1", user = user or "root", run_id = RUN, seq = 1 }) end
  local function mode_of(path) return (sh("stat -c %a " .. util.quote(path)):gsub("%s+$", "")) end
  local function listing(path) return sh("ls -A " .. util.quote(path)) end

  it("stages beside the target, fsyncs, verifies, renames, then skips an identical file", function()
    local r = {}
    run(function()
      local c = conn()
      r[1] = assert(c:upload(src, dst, { mode = "0640" }))
      r[2] = assert(c:upload(src, dst, { mode = "0640" }))
      r[3] = assert(c:upload(src, dst, { mode = 384 }))
    end)
    assert.are.same({ skipped = false, bytes = 11, sha256 = util.sha256("key: value\n") }, r[1])
    assert.is_true(r[2].skipped)
    assert.is_false(r[3].skipped, "a new mode is a change")
    assert.are.equal(2, #s.puts)
    assert.are.equal(dir .. "/root/etc/.app.conf.cargoship-" .. RUN .. ".tmp", s.puts[1].remote)
    assert.is_false(s.puts[1].opts.fsync, "the finishing script syncs it: no SFTP round trip for that")
    assert.matches('sync -- "$tmp"', s.wires[2], 1, true)
    assert.are.equal(384, s.puts[1].opts.mode)
    assert.are.equal("key: value\n", read(dst))
    assert.are.equal("600", mode_of(dst))
    assert.are.equal("app.conf\n", listing(dir .. "/root/etc"), "no temporary file is left")
  end)

  it("sets the owner, and an unchanged owner is skipped", function()
    local me, group = sh("id -un"):gsub("%s+$", ""), sh("id -gn"):gsub("%s+$", "")
    local r = {}
    run(function()
      local c = conn()
      r[1] = assert(c:upload(src, dst, { owner = me, group = group }))
      r[2] = assert(c:upload(src, dst, { owner = me, group = group }))
    end)
    assert.is_false(r[1].skipped)
    assert.is_true(r[2].skipped)
    assert.matches("chown ", s.wires[#s.wires - 1], 1, true)
    assert.are.equal(me .. ":" .. group .. "\n", sh("stat -c %U:%G " .. util.quote(dst)))
  end)

  it("keeps the old target when the staged content does not match", function()
    write(dst, "old\n")
    s.corrupt = true
    local ok, err, code = run(function() return conn():upload(src, dst, {}) end)
    assert.is_nil(ok)
    assert.are.equal("exit", code)
    assert.matches("checksum mismatch after upload", err, 1, true)
    assert.are.equal("old\n", read(dst))
    assert.are.equal("app.conf\n", listing(dir .. "/root/etc"))
  end)

  it("stages a non-root upload in the home and copies it beside the target under sudo", function()
    run(function() assert(conn("tb"):upload(src, dst, {})) end)
    assert.are.equal(".cargoship-" .. RUN .. "-app.conf", s.puts[1].remote)
    assert.is_false(s.puts[1].opts.fsync)
    assert.are.equal("key: value\n", read(dst))
    assert.are.equal("", listing(dir .. "/home"))
    assert.are.equal("app.conf\n", listing(dir .. "/root/etc"))
    assert.matches('cp -- "$src" "$tmp"', read(dir .. "/sudo.log"), 1, true)
  end)

  it("remembers the temporary file of a cut upload and removes it", function()
    s.cut = true
    local r = {}
    run(function()
      local c = conn()
      r[1] = table.pack(c:upload(src, dst, {}))
      r[2] = listing(dir .. "/root/etc")
      r[3] = c:remove_temps()
      r[4] = #c.temps
    end)
    assert.are.same({ nil, "closed" }, { r[1][1], r[1][3] })
    assert.are.equal(".app.conf.cargoship-" .. RUN .. ".tmp\n", r[2])
    assert.is_true(r[3])
    assert.are.equal(0, r[4])
    assert.are.equal("", listing(dir .. "/root/etc"))
  end)

  it("forgets a temp name once its upload is renamed into place: a later cleanup has nothing to remove", function()
    local n = run(function()
      local c = conn()
      assert(c:upload(src, dst, {}))
      return #c.temps
    end)
    assert.are.equal(0, n)
  end)

  it("names a full filesystem before writing: free and needed sizes, nothing put, no temp file", function()
    local big = dir .. "/engine.tar"
    sh("truncate -s 250M " .. util.quote(big))
    write(dir .. "/df-avail", tostring(40 * 1024))
    local ok, err, code = run(function() return conn():upload(big, dst, { sha256 = string.rep("0", 64) }) end)
    assert.is_nil(ok)
    assert.are.equal("io", code)
    assert.are.equal("h1: upload " .. dst .. ": no space left on device on " .. dir .. "/root/etc: 40 MiB free, "
      .. "250 MiB needed", err)
    assert.are.same({}, s.puts)
    assert.are.equal("", listing(dir .. "/root/etc"))
  end)

  it("removes what a put that failed mid-write left, and names the full filesystem, not 'sftp status 4'", function()
    s.full = true
    write(dst, "old\n")
    local r = run(function()
      local c = conn()
      -- the probe still sees room (another writer filled the disk meanwhile): the put fails
      local p = table.pack(c:upload(src, dst, {}))
      p.temps = #c.temps
      return p
    end)
    assert.is_nil(r[1])
    assert.are.equal("io", r[3])
    assert.matches("sftp status 4", r[2], 1, true)   -- the disk has room again: the put's own words
    assert.are.equal(0, r.temps)
    assert.are.equal("app.conf\n", listing(dir .. "/root/etc"), "the partial temp file is removed")
    assert.are.equal("old\n", read(dst))
    -- now the disk stays full after the failed put: the cause is named
    write(dir .. "/df-avail", "0")
    local big = dir .. "/big"
    write(big, string.rep("x", 5000))
    local _, err = run(function()
      local c = conn()
      local real = c.exec
      local first = true
      c.exec = function(self, cmd, o)   -- the probe ran before the disk filled up
        if first then first = false; return real(self, cmd:gsub("df %-P", "true"), o) end
        return real(self, cmd, o)
      end
      return c:upload(big, dst, {})
    end)
    assert.are.equal("h1: upload " .. dst .. ": no space left on device on " .. dir .. "/root/etc: 0 KiB free, "
      .. "5 KiB needed", err)
    assert.are.equal("app.conf\n", listing(dir .. "/root/etc"))
  end)

  it("downloads through the session as root, through sudo cat otherwise", function()
    write(dst, "secret\n")
    local n = {}
    run(function()
      n[1] = assert(conn():download(dst, dir .. "/got-root"))
      n[2] = assert(conn("tb"):download(dst, dir .. "/got-tb"))
    end)
    assert.are.same({ 7, 7 }, n)
    assert.are.same({ dst }, s.gets)
    assert.are.equal("secret\n", read(dir .. "/got-root"))
    assert.are.equal("secret\n", read(dir .. "/got-tb"))
    assert.matches("cat -- " .. util.quote(dst), read(dir .. "/sudo.log"), 1, true)
  end)
end)

describe("the protocols", function()
  it("never loaded libssh2: the session kind below them is the spec's", function()
    assert.is_nil(package.loaded["cargoship.ssh"])
    assert.is_nil(package.loaded["cargoship.transport.libssh2"])
    assert.is_nil(package.loaded["cargoship.transport"])
  end)
end)

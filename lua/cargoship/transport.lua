-- cargoship.transport: opens SSH connections to hosts (caps, retries, bastions) and wraps them with sudo and uploads.
--
-- A connection runs commands as the login user or, with sudo = true, as root (sudo -n when the
-- login user is not root, decided once per host). Every command travels as `sh -c <quoted>`
-- followed by a marker carrying its exit status on stderr, because libssh2 1.10 reports
-- "exit 0" for a channel that never received an exit status (notes/libssh2.md §7).
--
-- Ending what we started: closing a channel does not stop the command behind it (sshd sends
-- no signal without a pty), so every command runs with CARGOSHIP_CMD=<tag> in its
-- environment, which its children inherit. When a command is cancelled or times out, a
-- second channel on the same session finds every process carrying the tag
-- (/proc/*/environ), sends TERM, then KILL after 2 s, and returns once none is left; only
-- then does exec return (or re-raise the cancellation). A command started on a connection
-- after that waits until the ends of its cancelled commands are confirmed, so a host's lock,
-- released through the same connection, goes only after the commands it guarded.
-- Processes that drop their environment (env -i, a service manager's units) are not ours.
--
-- Dead hosts: a keepalive task per connection asks the host for an answer every
-- `keepalive` seconds (default 10; ServerAliveInterval in the host's ssh options); after
-- `keepalive_count_max` (default 3; ServerAliveCountMax) silent rounds while a command
-- waits, the session is broken and every command on it fails "closed".
--
-- Long commands: an exec request must fit one SSH packet, so a command whose wire form is
-- over M.MAX_INLINE bytes is sent over stdin to the host's shell instead. A command that
-- also has stdin of its own must stay under the limit.
local loop = require "cargoship.loop"
local ssh = require "cargoship.ssh"
local util = require "cargoship.util"
local shell = require "cargoship.shell"
local keys = require "cargoship.ssh.keys"
local agent = require "cargoship.ssh.agent"

local M = {}

local MARK = "\30cs-exit:"

-- The largest wire form sent in the exec request itself (libssh2 1.10 refuses requests over
-- about 34 KB, the runtime over 32 KiB); longer commands travel over stdin.
M.MAX_INLINE = 30000
-- Keepalive defaults: a silent host fails after 3 x 10 s.
M.KEEPALIVE, M.KEEPALIVE_COUNT_MAX = 10, 3
-- How long ending a command's processes may take before we give up (a dead host cannot
-- answer; a live one needs at most the script's 3 s).
M.KILL_TIMEOUT = 8

local TAG_VAR = "CARGOSHIP_CMD"

local Transport = {}
Transport.__index = Transport

local Connection = {}
Connection.__index = Connection

local function expand_home(path, env)
  if path and path:sub(1, 2) == "~/" then
    local home = env("HOME")
    if home then return home .. path:sub(2) end
  end
  return path
end

-- M.new{known_hosts = path, host_key_policy = "strict", timeout = 30, env = os.getenv,
--       passphrase = function(key_path) -> string|nil, max_unauthenticated = 16,
--       max_per_endpoint = 6, keepalive = seconds (0: none), keepalive_count_max = n,
--       run_id = string}
function M.new(opts)
  opts = opts or {}
  local env = opts.env or os.getenv
  local self = setmetatable({
    env = env,
    known_hosts_path = expand_home(opts.known_hosts or "~/.ssh/known_hosts", env),
    policy = opts.host_key_policy or "strict",
    timeout = opts.timeout or 30,
    passphrase = opts.passphrase,
    keepalive = opts.keepalive or M.KEEPALIVE,
    keepalive_count_max = opts.keepalive_count_max or M.KEEPALIVE_COUNT_MAX,
    run_id = opts.run_id or string.format("%d-%d", util.getpid(), math.floor(util.now() * 1000) % 1000000),
    -- sshd drops unauthenticated connections beyond MaxStartups (10 by default): cap them
    -- everywhere, and per endpoint, which is what a shared bastion sees (notes §2)
    startups = loop.semaphore(opts.max_unauthenticated or 16),
    per_endpoint_limit = opts.max_per_endpoint or 6,
    endpoints = {},
    key_info = {},
    bastions = {},
    connections = {},
    collections = {},
    agents = {},
  }, Transport)
  return self
end

-- known_hosts files are read once per run and shared by every host that uses them.
function Transport:known_hosts(path)
  local kh = self.collections[path]
  if kh then return kh end
  local err
  kh, err = ssh.known_hosts(path)
  if not kh then return nil, err end
  self.collections[path] = kh
  return kh
end

local POLICIES = { yes = "strict", strict = "strict", ["accept-new"] = "accept-new", no = "off", off = "off" }

-- The host's own ssh options may name another known_hosts file or policy, as ssh_config does.
local function option(c, name)
  for k, v in pairs(c.options or {}) do
    if k:lower() == name then return tostring(v) end
  end
end

local function host_key_settings(self, c)
  local o = c.options or {}
  local path, policy = self.known_hosts_path, self.policy
  for k, v in pairs(o) do
    local key = k:lower()
    if key == "userknownhostsfile" then path = expand_home(tostring(v), self.env)
    elseif key == "stricthostkeychecking" then
      policy = POLICIES[tostring(v):lower()]
      if not policy then return nil, "StrictHostKeyChecking must be yes, accept-new or no, got " .. tostring(v) end
    end
  end
  return path, policy
end

-- What a key file is, read once per run; RSA refused with the ways out. An encrypted key's
-- passphrase comes from the environment variable the host's ssh options name
-- (IdentityPassphraseEnv), else from the transport's passphrase source.
function Transport:key(path, passphrase_env)
  local info = self.key_info[path]
  if info then return info end
  local text, err = keys.read(path)
  if not text then
    info = { err = err }
  else
    local k, why = keys.inspect(text)
    if not k then info = { err = "key " .. path .. ": " .. why }
    elseif k.type == "rsa" or k.type == "dsa" then info = { err = "key " .. path .. ": " .. keys.RSA_MESSAGE }
    else info = k end
    if info.encrypted then
      local pass = passphrase_env and self.env(passphrase_env)
      if not pass or pass == "" then pass = self.passphrase and self.passphrase(path) end
      if not pass then
        info = { err = "key " .. path .. " is encrypted and no passphrase was given "
          .. "(set CARGOSHIP_SSH_PASSPHRASE, run on a terminal, or use ssh-agent)" }
      else
        -- decrypted once into a private agent; libssh2 would decrypt it again per host
        local a, aerr = agent.start(path, pass)
        if a then
          info.agent = a
          self.agents[#self.agents + 1] = a
        elseif aerr and aerr:find("^ssh%-add") then
          info = { err = aerr }
        else
          info.passphrase = pass   -- no ssh-agent here: libssh2 decrypts per host, slower
        end
      end
    end
  end
  self.key_info[path] = info
  return info
end

local function endpoint_sem(self, key)
  local sem = self.endpoints[key]
  if not sem then
    sem = loop.semaphore(self.per_endpoint_limit)
    self.endpoints[key] = sem
  end
  return sem
end

-- One authenticated session, with the startup caps held only until auth is done, and a
-- retry with backoff when sshd drops us before its banner (MaxStartups).
local function open_session(self, params, endpoint)
  local sem = endpoint_sem(self, endpoint)
  local last_err, last_code
  for attempt = 1, 6 do
    sem:acquire()
    self.startups:acquire()
    local s, err, code = ssh.connect(params)
    if s and not params.key_path then
      local ok, aerr, acode = s:agent_auth(params.user, params.timeout, params.agent_socket)
      if not ok then
        s:close()
        s, err, code = nil, aerr, acode
      end
    end
    self.startups:release()
    sem:release()
    if s then return s end
    last_err, last_code = err, code
    if code ~= "closed" or params.fd then break end
    loop.sleep(0.05 * 2 ^ (attempt - 1) * (0.5 + math.random()))
  end
  return nil, last_err, last_code
end

local function params_for(self, c, name)
  local user = c.user or "root"
  local kh_path, policy = host_key_settings(self, c)
  if not kh_path then return nil, name .. ": ssh options: " .. policy, "hostkey" end
  local kh
  if policy ~= "off" then
    local err
    kh, err = self:known_hosts(kh_path)
    if not kh then return nil, name .. ": " .. err, "hostkey" end
  end
  local p = {
    address = c.address, port = c.port or 22, user = user, name = name,
    known_hosts = kh, host_key_policy = policy, timeout = self.timeout,
  }
  if c.key_path then
    local path = expand_home(c.key_path, self.env)
    local info = self:key(path, option(c, "identitypassphraseenv"))
    if info.err then return nil, name .. ": auth: " .. info.err, "auth" end
    if info.agent then
      p.agent_socket = info.agent.socket
    else
      p.key_path, p.passphrase = path, info.passphrase
    end
  elseif not self.env("SSH_AUTH_SOCK") then
    local home = self.env("HOME") or ""
    for _, k in ipairs { "id_ed25519", "id_ecdsa" } do
      local path = home .. "/.ssh/" .. k
      local f = io.open(path, "rb")
      if f then
        f:close()
        local info = self:key(path)
        if not info.err then
          if info.agent then p.agent_socket = info.agent.socket
          else p.key_path, p.passphrase = path, info.passphrase end
          break
        end
      end
    end
    if not p.key_path and not p.agent_socket then
      return nil, name .. ": auth: no keyPath given, no ssh-agent (SSH_AUTH_SOCK) and no "
        .. "~/.ssh/id_ed25519 or id_ecdsa", "auth"
    end
  end
  return p
end

-- A tunnel through a bastion: one authenticated bastion session shared by every host
-- behind it, a direct-tcpip channel per host (notes §4: 199 targets through one session).
function Transport:bastion_fd(b, target, name)
  local bkey = string.format("%s@%s:%d", b.user or "root", b.address, b.port or 22)
  local entry = self.bastions[bkey]
  if not entry then
    entry = { ready = loop.semaphore(0) }
    self.bastions[bkey] = entry
    local conn, err, code = self:connect(b, "bastion " .. b.address)
    entry.conn, entry.err, entry.code = conn, err, code
    entry.done = true
    for _ = 1, 1000 do entry.ready:release() end
  elseif not entry.done then
    entry.ready:acquire()
  end
  if not entry.conn then return nil, name .. ": via " .. tostring(entry.err), entry.code end
  local tunnel, err, code = entry.conn.session:forward(target.address, target.port or 22, self.timeout)
  if not tunnel then return nil, name .. ": bastion tunnel: " .. err, code end
  local down = loop.spawn(tunnel.pump, tunnel, "down")
  local up = loop.spawn(tunnel.pump, tunnel, "up")
  return tunnel, { down, up }
end

-- Transport:connect(connection_config, name) -> Connection | nil, msg, code
-- connection_config: { address, port, user, key_path, bastion = {...} } (config's ssh block).
function Transport:connect(c, name)
  name = name or c.address
  local params, err, code = params_for(self, c, name)
  if not params then return nil, err, code end
  local pumps
  if c.bastion then
    local tunnel, extra, tcode = self:bastion_fd(c.bastion, c, name)
    if not tunnel then return nil, extra, tcode end
    params.fd, params.tunnel, pumps = tunnel:fd(), tunnel, extra
  end
  local endpoint = c.bastion and ("via " .. c.bastion.address) or (params.address .. ":" .. params.port)
  local s, serr, scode = open_session(self, params, endpoint)
  if not s then
    if pumps then for _, t in ipairs(pumps) do t:cancel() end end
    return nil, serr, scode
  end
  self.seq = (self.seq or 0) + 1
  local conn = setmetatable({
    session = s, name = name, user = params.user, root = params.user == "root",
    transport = self, pumps = pumps, temps = {},
    tag_base = (tostring(self.run_id):gsub("[^%w.-]", "_")) .. "." .. self.seq, commands = {}, ncommands = 0,
  }, Connection)
  self.connections[#self.connections + 1] = conn
  local interval = tonumber(option(c, "serveraliveinterval") or self.keepalive) or M.KEEPALIVE
  local count = tonumber(option(c, "serveralivecountmax") or self.keepalive_count_max) or M.KEEPALIVE_COUNT_MAX
  if interval > 0 then
    interval = math.max(1, math.floor(interval))
    conn.keepalive_task = loop.spawn(function()
      while true do
        loop.sleep(interval)
        local ok, kerr = s:keepalive(interval, count)
        if not ok then
          conn.lost = kerr
          return
        end
      end
    end)
  end
  return conn
end

-- Closes every connection this transport opened (bastions last).
function Transport:close_all()
  for i = #self.connections, 1, -1 do self.connections[i]:close() end
  self.connections = {}
  for _, a in ipairs(self.agents) do a:stop() end
  self.agents = {}
  for path, info in pairs(self.key_info) do
    if info.agent then self.key_info[path] = nil end
  end
end

-- ---- connections ------------------------------------------------------------------------

-- Splits the exit-status marker off stderr; nil status when the marker never came.
local function split_marker(stderr)
  local at = stderr:find(MARK, 1, true)
  local last
  while at do
    last = at
    at = stderr:find(MARK, at + 1, true)
  end
  if not last then return stderr, nil end
  local status = tonumber(stderr:match("^(%d+)\n?$", last + #MARK))
  if not status then return stderr, nil end
  return stderr:sub(1, last - 1), status
end

-- Decides once whether this host needs sudo and whether sudo works without a password.
function Connection:sudo_prefix()
  if self.root then return "" end
  if self.sudo_ok == nil then
    local _, err, code = self:raw("sudo -n true", {})
    if code == 0 then
      self.sudo_ok = true
    elseif err and err:find("password", 1, true) then
      self.sudo_ok, self.sudo_err = false, self.name .. ": sudo: user " .. self.user
        .. " needs a password for sudo; cargoship needs passwordless sudo (NOPASSWD) or root login"
    else
      self.sudo_ok, self.sudo_err = false, self.name .. ": sudo: does not work for user " .. self.user
        .. ": " .. ((err and err ~= "" and err:gsub("%s+$", "")) or "exit " .. tostring(code))
    end
  end
  if not self.sudo_ok then return nil, self.sudo_err, "auth" end
  return "sudo -n "
end

-- Wraps a stderr callback so the marker never reaches it: everything from the last
-- RS byte on is held back until the next chunk or the end proves what it is.
local function marker_filter(callback)
  local held = ""
  local f = {}
  function f.feed(chunk)
    local data = held .. chunk
    local at = data:match(".*()\30")
    if at then
      held = data:sub(at)
      data = data:sub(1, at - 1)
    else
      held = ""
    end
    if data ~= "" then callback(data) end
  end
  -- -> exit status from the marker, or nil when it never came
  function f.finish()
    local clean, code = split_marker(held)
    if clean ~= "" then callback(clean) end
    held = ""
    return code
  end
  return f
end

-- The command exactly as given, with the exit-status marker; no sudo, no tag.
function Connection:raw(cmd, opts)
  local wire = "sh -c " .. util.quote(cmd) .. "; printf '" .. MARK:gsub("\30", "\\036") .. "%d\\n' \"$?\" >&2"
  local filter
  if opts.on_stderr then
    filter = marker_filter(opts.on_stderr)
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.on_stderr = filter.feed
    opts = o
  end
  local out, err, status, signal = self.session:exec(wire, opts)
  if not out then return nil, err, status end
  local clean, code
  if filter then clean, code = err, filter.finish() else clean, code = split_marker(err) end
  if not code then
    return nil, string.format("%s: exec: no exit status came back (connection cut or shell killed%s)",
      self.name, signal and (", signal " .. signal) or ""), "closed"
  end
  return out, clean, code
end

-- The host's side of ending commands: every process whose environment carries one of the
-- tags gets TERM, then KILL after 1 s; exit 0 once none is left, 1 after 3 s.
local function kill_script(tags)
  local pats = {}
  for i, t in ipairs(tags) do pats[i] = "-e " .. util.quote(TAG_VAR .. "=" .. t) end
  return table.concat({
    "n=0",
    "while :; do",
    "  p=$(grep -lsxzF " .. table.concat(pats, " ") .. " /proc/[0-9]*/environ 2>/dev/null"
      .. " | sed -n 's,^/proc/\\([0-9]*\\)/environ$,\\1,p')",
    '  [ -n "$p" ] || exit 0',
    "  n=$((n + 1)); [ $n -le 30 ] || exit 1",
    "  if [ $n -le 10 ]; then kill -TERM $p 2>/dev/null; else kill -KILL $p 2>/dev/null; fi",
    "  sleep 0.1",
    "done",
  }, "\n")
end

-- Ends the processes of the given commands on the host; true once none is left.
local function kill_commands(self, list)
  local tags, sudo = {}, false
  for _, e in ipairs(list) do
    tags[#tags + 1] = e.tag
    sudo = sudo or e.sudo
  end
  if #tags == 0 then return true end
  local prefix = ""
  if sudo then prefix = self:sudo_prefix() or "" end
  local _, err, code = self:raw(prefix .. "sh -c " .. util.quote(kill_script(tags)), { timeout = M.KILL_TIMEOUT })
  if code == 0 then return true end
  if type(code) == "number" then
    return nil, self.name .. ": processes of the command still ran 2 s after KILL", "timeout"
  end
  return nil, err, code
end

local function command_done(self, e)
  e.done = true
  if self.commands[e.tag] then
    self.commands[e.tag] = nil
    self.ncommands = self.ncommands - 1
  end
  for _ = 1, e.waiters do e.gone:release() end
end

-- Ends one command of ours; its outcome goes into e.end_err when it could not be confirmed.
local function end_command(self, e)
  e.killing = true
  local pok, ok, err = pcall(kill_commands, self, { e })   -- a closed session raises
  if not pok then ok, err = nil, tostring(ok) end
  if not ok then e.end_err = err end
  command_done(self, e)
  return ok, err
end

-- Waits until every command of this connection whose task is being cancelled is confirmed
-- ended (at most KILL_TIMEOUT + a few seconds each): what runs next on the host, such as
-- the release of its lock, must not run beside them.
function Connection:settle()
  if self.ncommands == 0 then return true end
  local waiting = {}
  for _, e in pairs(self.commands) do
    if e.killing or (e.task and e.task:stopping()) then waiting[#waiting + 1] = e end
  end
  for _, e in ipairs(waiting) do
    if not e.done then
      e.waiters = e.waiters + 1
      e.gone:acquire(M.KILL_TIMEOUT + 5)
    end
  end
  return true
end

-- Connection:kill_all() -> true | nil, msg, code
-- Ends every command running on this connection, whoever started it, and returns once the
-- host has none of their processes left (their exec calls then return on their own).
function Connection:kill_all()
  if self.ncommands == 0 then return true end
  local list = {}
  for _, e in pairs(self.commands) do
    if not e.done then list[#list + 1] = e end
  end
  return loop.shield(kill_commands, self, list)
end

-- Connection:running() -> number of commands of this connection still on the host.
function Connection:running()
  return self.ncommands
end

-- The wire form of cmd with its tag (and sudo prefix): inline, or over stdin when long.
local function tagged(self, cmd, prefix, opts, tag)
  local env = prefix .. "env " .. TAG_VAR .. "=" .. tag .. " sh -c "
  local inline = env .. util.quote(cmd)
  if #util.quote(inline) + 48 <= M.MAX_INLINE then return inline, opts end   -- 48: raw's wrapping
  if opts.stdin ~= nil then
    return nil, string.format("%s: exec: the command is %d bytes and has stdin of its own; commands over %d "
      .. "bytes travel over stdin, so one that also sends stdin must stay under that limit",
      self.name, #cmd, M.MAX_INLINE), "io"
  end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.stdin = cmd
  return env .. util.quote('eval "$(cat)"'), o
end

-- Connection:exec(cmd, {sudo, stdin, timeout, on_stdout, on_stderr})
--   -> stdout, stderr, exit_code | nil, msg, code
-- A non-zero exit is not an error here: the caller decides what it means. On a timeout or
-- a cancellation the command's processes on the host are ended before this returns (or
-- re-raises); a timeout's message says whether that was confirmed.
function Connection:exec(cmd, opts)
  opts = opts or {}
  -- a task being cancelled (Ctrl-C, or its host lost for the run) starts nothing more on the
  -- host: its cancellation would only raise at its first wait, after the request went out
  local me = loop.current()
  if me and me:stopping() then error("cancelled", 0) end
  local prefix = ""
  if opts.sudo then
    local p, err, code = self:sudo_prefix()
    if not p then return nil, err, code end
    prefix = p
  end
  self:settle()
  self.nseq = (self.nseq or 0) + 1
  local tag = self.tag_base .. "." .. self.nseq
  local wire, o, ecode = tagged(self, cmd, prefix, opts, tag)
  if not wire then return nil, o, ecode end
  local e = { tag = tag, sudo = prefix ~= "", task = loop.current(), gone = loop.semaphore(0), waiters = 0 }
  self.commands[tag] = e
  self.ncommands = self.ncommands + 1
  local r = table.pack(pcall(self.raw, self, wire, o))
  if not r[1] then
    -- cancelled (or a bug): the command may still run on the host; end it first
    if not e.done then loop.shield(end_command, self, e) end
    error(r[2], 0)
  end
  if r[2] == nil and r[4] == "timeout" and not e.done then
    local ok = loop.shield(end_command, self, e)
    return nil, r[3] .. (ok and "; its processes on the host were ended"
      or ("; ending its processes on the host failed: " .. tostring(e.end_err))), "timeout"
  end
  command_done(self, e)
  return table.unpack(r, 2, r.n)
end

-- What a failed command said, for its error: its stderr's lines (the cause is often last,
-- after progress lines: dnf's "nothing provides", kubeadm's "[ERROR CRI]"), at most the
-- first and the last ones, MAX_ERR_LINES in all with a marker, when there are more; nil when
-- it said nothing.
local MAX_ERR_LINES = 12
function M.error_text(err)
  local lines = {}
  for l in (err or ""):gmatch("[^\n]+") do
    if l:find("%S") then lines[#lines + 1] = l end
  end
  if #lines == 0 then return nil end
  if #lines > MAX_ERR_LINES then
    -- the first line, a marker, the last MAX_ERR_LINES - 2
    local keep = { lines[1], string.format("[... %d lines ...]", #lines - MAX_ERR_LINES + 1) }
    for i = #lines - MAX_ERR_LINES + 3, #lines do keep[#keep + 1] = lines[i] end
    lines = keep
  end
  return table.concat(lines, "\n")
end

-- Connection:check(cmd, opts) -> stdout | nil, msg, code: a non-zero exit becomes an error
-- naming the command's stderr; when that is empty, its stdout (runit's sv and others say
-- why there), else the command's start.
function Connection:check(cmd, opts)
  local out, err, code = self:exec(cmd, opts)
  if not out then return nil, err, code end
  if code ~= 0 then
    return nil, string.format("%s: command failed (exit %d): %s", self.name, code,
      M.error_text(err) or M.error_text(out) or cmd:sub(1, 80)), "exit"
  end
  return out, err
end

local function dirname(path)
  return path:match("^(.*)/[^/]*$") or "."
end

local function basename(path)
  return path:match("([^/]*)$")
end

-- The host's sha256 of "$1", printed as hex first on the line: openssl or python3's hashlib
-- (both use the CPU's SHA extensions, ~5x less CPU than coreutils' sha256sum, which is
-- what an upload's check costs the host beyond the transfer), else sha256sum.
local HOST_SHA256 = "cs_sha256() { case $1 in -*) set -- \"./$1\";; esac;"
  .. " openssl dgst -sha256 -r \"$1\" 2>/dev/null || python3 -c "
  .. util.quote("import hashlib, sys\nh = hashlib.sha256()\nwith open(sys.argv[1], 'rb') as f:\n"
    .. "    for b in iter(lambda: f.read(1 << 20), b''):\n        h.update(b)\nprint(h.hexdigest())")
  .. " \"$1\" 2>/dev/null || sha256sum -- \"$1\"; }"
M.HOST_SHA256 = HOST_SHA256

-- Connection:upload(local, remote, {mode = "0644"|number, owner, group, timeout, sha256 = expected})
--   -> { skipped = bool, bytes = n, sha256 = hex } | nil, msg, code
-- To a temporary name beside the target, fsync'd, checked against the expected sha256 on the
-- host, then renamed into place: the target is either the old file or the whole new one.
-- Skipped when the host already has the same content, mode and owner. With opts.sha256 (the
-- plan's hash, taken once per run) the local file is not hashed again for every host: the
-- host's check against it is what guarantees the content, and a file that changed since the
-- plan fails that check instead of landing.
function Connection:upload(local_path, remote, opts)
  opts = opts or {}
  local sum = opts.sha256
  if not sum then
    local size
    sum, size = util.sha256_file(local_path)   -- once per file identity per run
    if not sum then return nil, size, "io" end
  end
  local mode = opts.mode
  if type(mode) == "number" then mode = string.format("%o", mode) end
  mode = mode and mode:gsub("^0+(%d%d%d)$", "%1")
  local owner = opts.owner and (opts.owner .. (opts.group and (":" .. opts.group) or "")) or nil
  local probe = HOST_SHA256 .. "\n" .. shell.fmt("[ ! -f %s ] || cs_sha256 %s 2>/dev/null; stat -c '%%a %%U:%%G' -- %s"
    .. " 2>/dev/null; true", remote, remote, remote)
  local cur = self:exec(probe, { sudo = true, timeout = opts.timeout })
  if cur then
    local rsum, rmode, rowner = cur:match("^(%x+)[^\n]*\n(%d+) (%S+)")
    if rsum == sum and (not mode or mode == rmode)
      and (not owner or owner == rowner or (not opts.group and rowner:match("^[^:]*") == opts.owner)) then
      return { skipped = true, bytes = 0, sha256 = sum }
    end
  end
  local tmp_name = "." .. basename(remote) .. ".cargoship-" .. self.transport.run_id .. ".tmp"
  local beside = dirname(remote) .. "/" .. tmp_name
  local stage = self.root and beside or (".cargoship-" .. self.transport.run_id .. "-" .. basename(remote))
  self.temps[#self.temps + 1] = beside
  if stage ~= beside then self.temps[#self.temps + 1] = stage end
  -- fsync'd by SFTP when it is the temp file itself; a stage that is copied is synced as the copy
  local bytes, err, code = self.session:sftp_put(local_path, stage,
    { mode = 384, timeout = opts.timeout, fsync = stage == beside })
  if not bytes then return nil, err, code end
  local script = {
    "set -e",
    HOST_SHA256,
    shell.fmt("src=%s; tmp=%s; dst=%s", stage, beside, remote),
    "trap 'rm -f -- \"$tmp\"' EXIT",
    '[ "$src" = "$tmp" ] || { cp -- "$src" "$tmp"; rm -f -- "$src"; sync -- "$tmp" 2>/dev/null || sync; }',
    'sum=$(cs_sha256 "$tmp"); sum=${sum%% *}',
    shell.fmt('[ "$sum" = %s ] || { echo "checksum mismatch after upload: got $sum, expected %s'
      .. ' (did the local file change since the plan?)" >&2; exit 65; }', sum, sum),
  }
  if mode then script[#script + 1] = shell.fmt('chmod %s -- "$tmp"', mode) end
  if owner then script[#script + 1] = shell.fmt('chown %s -- "$tmp"', owner) end
  script[#script + 1] = 'mv -f -- "$tmp" "$dst"'
  script[#script + 1] = "trap - EXIT"
  local ok, cerr, ccode = self:check(table.concat(script, "\n"), { sudo = true, timeout = opts.timeout })
  if not ok then return nil, cerr, ccode end
  return { skipped = false, bytes = bytes, sha256 = sum }
end

-- Connection:download(remote, local, {timeout}) -> bytes | nil, msg, code
-- As root, over SFTP; otherwise through sudo cat, since the file is often root's.
function Connection:download(remote, local_path, opts)
  opts = opts or {}
  if self.root then return self.session:sftp_get(remote, local_path, opts) end
  local tmp = local_path .. ".cs-" .. util.getpid() .. ".tmp"
  local f, ferr = io.open(tmp, "wb")
  if not f then return nil, "localhost: create " .. tmp .. ": " .. tostring(ferr), "io" end
  local n = 0
  local out, err, code = self:check(shell.fmt("cat -- %s", remote), {
    sudo = true, timeout = opts.timeout,
    on_stdout = function(chunk) n = n + #chunk; f:write(chunk) end,
  })
  f:close()
  if not out then os.remove(tmp) return nil, err, code end
  local ok, rerr = os.rename(tmp, local_path)
  if not ok then os.remove(tmp) return nil, "localhost: " .. tostring(rerr), "io" end
  return n
end

-- Removes the temporary files this run left on the host (after a cut upload).
function Connection:remove_temps()
  if #self.temps == 0 then return true end
  local paths = {}
  for i, p in ipairs(self.temps) do paths[i] = util.quote(p) end
  local ok, err, code = self:exec("rm -f -- " .. table.concat(paths, " "), { sudo = true, timeout = 30 })
  if ok then self.temps = {} end
  return ok and true, err, code
end

function Connection:close()
  if self.ncommands > 0 and self.session:info().state == "ready" then self:kill_all() end
  if self.keepalive_task then self.keepalive_task:cancel() end
  if self.session then self.session:close() end
  if self.pumps then for _, t in ipairs(self.pumps) do t:cancel() end end
end

M.Connection = Connection
M.split_marker = split_marker
return M

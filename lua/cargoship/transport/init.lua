-- cargoship.transport: opens connections to hosts through a session kind, under the command and transfer protocols.
--
-- Three layers, one file each:
--   transport/command.lua   the command protocol (exit marker, sudo, environment tag, ending
--                           commands on cancel and timeout, long commands over stdin)
--   transport/transfer.lua  the transfer protocol (stage, fsync, verify, rename, download)
--   transport/libssh2.lua   a session kind: opens sessions (known_hosts, keys, agents,
--                           bastions, startup caps, retries, keepalive)
-- transport/connection.lua puts one session under both protocols: that is the connection
-- callers get from Transport:connect. The protocols use a session through the interface
-- below and nothing else, so a second session kind (the system's OpenSSH) plugs in beside
-- libssh2 without a line of either protocol copied.
--
-- ## Session kinds
-- A kind is a module with new(transport_options) -> kind, kind:open(ssh_config, name) ->
-- session | nil, msg, code, and kind:close_all() (what it holds beyond the sessions: shared
-- bastion sessions, private agents). The session logs in as ssh_config.user or root.
-- A session provides exactly these five; each waits by yielding to the loop, raises when
-- its task is cancelled, and fails with nil, "<host>: <op>: <detail>", code.
--
--   session:exec(cmd, {stdin, timeout, on_stdout, on_stderr}) -> stdout, stderr, status, signal
--     Runs cmd, one shell command line, by the login user's shell (`sh -c`-like: the command
--     protocol quotes, the kind adds none). stdin: a string written whole, then EOF (none:
--     EOF at once); long commands travel this way. timeout: seconds for the whole command
--     (nil or 0: none); past it, nil, "<host>: exec: timed out after N s", "timeout", and
--     the command may still run: the protocol ends it. on_stdout/on_stderr: the stream is
--     handed over chunk by chunk as it comes and not kept (returned ""); they must not wait.
--     stderr must come through byte for byte: the exit status is read from the protocol's
--     own marker at its end, never from status (libssh2 says 0 when none came); signal,
--     if known, names what killed the remote shell. Several exec calls on one session run
--     at once (the kill script runs beside the command it ends). Code "closed" once the
--     session is gone.
--   session:put(local_path, remote, {mode, timeout, fsync}) -> bytes
--     Writes remote whole (created with mode, or truncated), a relative path under the
--     login user's home; fsync'd before it returns unless fsync is false. The transfer
--     protocol stages with it, then verifies and renames over exec: a cut put never touches
--     the target. It is not done over exec's stdin because the kind's own file transfer is
--     the fast one (SFTP: pipelined writes, one mapping of the file shared by every host).
--   session:get(remote, local_path, {timeout}) -> bytes
--     Reads remote into local_path, written whole or not at all. Used when the login user
--     is root; others read through `sudo cat` over exec, since the file is often root's.
--   session:close()
--     Ends the session and what lives with it (keepalive, tunnel); twice is harmless.
--   session:state() -> "ready" | another word
--     "ready" while commands can run; close asks it before ending running commands, which
--     a broken or closed session cannot carry.
-- What the protocols do not need stays in the kind: host keys, auth, keepalive (OpenSSH has
-- its own ServerAliveInterval), bastions, retries.
local util = require "cargoship.util"
local command = require "cargoship.transport.command"
local transfer = require "cargoship.transport.transfer"
local connection = require "cargoship.transport.connection"
local pacer = require "cargoship.transport.pacer"

local M = {}

-- The session kinds, by name, and the module of each.
local KINDS = {
  libssh2 = "cargoship.transport.libssh2",
  openssh = "cargoship.transport.openssh",
  localhost = "cargoship.transport.localhost",
}
-- The kind that opens each connection block of the cluster file (config/hosts.lua): an
-- `ssh:` block the run's kind (libssh2 unless session_kind says otherwise), `openSSH:` the
-- system's ssh, `localhost: true` this machine.
local BY_BLOCK = { openssh = "openssh", localhost = "localhost" }

M.MAX_INLINE = command.MAX_INLINE
M.KILL_TIMEOUT = command.KILL_TIMEOUT
M.HOST_SHA256 = transfer.HOST_SHA256
M.error_text = command.error_text
M.failure_text = command.failure_text
M.split_marker = command.split_marker
M.Connection = connection.Connection
M.connection = connection.new

local Transport = {}
Transport.__index = Transport

-- M.new{known_hosts = path, host_key_policy = "strict", timeout = 30, env = os.getenv,
--       passphrase = function(key_path) -> string|nil, max_startups = 10 (handshakes at once
--       per host or bastion), max_unauthenticated = 16 (handshakes at once overall; both
--       transport/pacer.lua), keepalive = seconds (0: none), keepalive_count_max = n,
--       run_id = string, session_kind = "libssh2"|"openssh" (what opens `ssh:` blocks),
--       ssh_program = "ssh" (the openssh kind's), log = function(line),
--       upload_transport = "libssh2"|"openssh"|"auto" (how libssh2 hosts' files are put:
--       "openssh" through an ssh master per host, "auto" so for files of 32 MiB and more)}
function M.new(opts)
  opts = opts or {}
  local kind = opts.session_kind or "libssh2"
  if not KINDS[kind] then error("transport: unknown session kind " .. tostring(kind), 2) end
  -- one pacer for every kind: a host reached by libssh2 and by an upload master counts once
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.pacer = opts.pacer or pacer.new { per_endpoint = opts.max_startups, total = opts.max_unauthenticated,
    log = opts.log }
  local self = setmetatable({
    opts = o,
    pacer = o.pacer,
    kind = kind,
    run_id = opts.run_id or string.format("%d-%d", util.getpid(), math.floor(util.now() * 1000) % 1000000),
    kinds = {},
    connections = {},
    seq = 0,
  }, Transport)
  self:session_kind()   -- the options are checked now, not at the first host
  return self
end

-- The session kind of that name (default: the run's kind for `ssh:` blocks), started at its
-- first use.
function Transport:session_kind(name)
  name = name or self.kind
  local k = self.kinds[name]
  if not k then
    k = require(KINDS[name]).new(self.opts)
    self.kinds[name] = k
  end
  return k
end

-- The name of the kind that opens connection block c.
function Transport:kind_for(c)
  if c.kind == nil or c.kind == "ssh" then return self.kind end
  return BY_BLOCK[c.kind] or error("transport: unknown connection kind " .. tostring(c.kind), 2)
end

-- Transport:connect(connection_config, name) -> Connection | nil, msg, code
-- connection_config: a host's connection block as config/hosts.lua gives it: kind "ssh"
-- { address, port, user, key_path, options, bastion = {...} }, "openssh" (the openSSH block)
-- or "localhost".
function Transport:connect(c, name)
  name = name or c.address
  local spare = self.spare and self.spare[name]
  if spare then
    self.spare[name] = nil
    if spare.session:state() == "ready" and spare.ncommands == 0 then
      spare.round_trips = 0   -- the pass that takes it counts its own
      return spare
    end
  end
  local kind = self:kind_for(c)
  local session, err, code = self:session_kind(kind):open(c, name)
  if not session then return nil, err, code end
  local via = self.opts.upload_transport
  if kind == "libssh2" and (via == "openssh" or via == "auto") then
    session = require(KINDS.openssh).via(session, self:session_kind("openssh"), c, name, via)
  end
  self.seq = self.seq + 1
  -- the login user: the block's, else the one the kind found (ssh_config's, or ours locally)
  local conn = connection.new(session, { name = name, user = session.user or c.user or "root",
    run_id = self.run_id, seq = self.seq })
  self.connections[#self.connections + 1] = conn
  return conn
end

-- Transport:keep(): the connections open now stay open for the hosts of the next pass, which
-- connect() hands them to by host name (still ready, nothing running on them) instead of
-- logging in again: a handshake costs several round trips (TCP, key exchange, auth), so the
-- real run that follows its plan at once (--confirm) does not pay them twice. The next pass
-- re-reads every fact over them as it would over a new login; close_all closes what it leaves.
function Transport:keep()
  self.spare = {}
  for _, conn in ipairs(self.connections) do self.spare[conn.name] = conn end
end

-- Closes every connection this transport opened, then what the kinds hold (bastions last).
function Transport:close_all()
  self.spare = nil
  for i = #self.connections, 1, -1 do self.connections[i]:close() end
  self.connections = {}
  for _, k in pairs(self.kinds) do k:close_all() end
end

return M

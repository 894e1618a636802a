-- cargoship.transport.command: the command protocol over any session kind (exit marker, sudo, tag, ending commands).
--
-- A connection runs commands as the login user or, with sudo = true, as root (sudo -n when the
-- login user is not root, decided once per host). Every command travels as `sh -c <quoted>`
-- followed by a marker carrying its exit status on stderr, because libssh2 1.10 reports
-- "exit 0" for a channel that never received an exit status (notes/libssh2.md §7); the
-- protocol trusts the marker alone, whatever the session kind says.
--
-- Ending what we started: closing a channel does not stop the command behind it (sshd sends
-- no signal without a pty), so every command runs with CARGOSHIP_CMD=<tag> in its
-- environment, which its children inherit. When a command is cancelled or times out, a
-- second command on the same session finds every process carrying the tag
-- (/proc/*/environ), sends TERM, then KILL after 1 s, and returns once none is left; only
-- then does exec return (or re-raise the cancellation). A command started on a connection
-- after that waits until the ends of its cancelled commands are confirmed, so a host's lock,
-- released through the same connection, goes only after the commands it guarded.
-- Processes that drop their environment (env -i, a service manager's units) are not ours.
--
-- Commands that must not be killed half-way (opts.finish = seconds: a package manager's
-- transaction, which leaves its database broken when killed mid-unpack): their output goes
-- to files on the host and is copied out at their end, so a channel closed by a cancellation
-- cannot SIGPIPE them; a cancellation then waits up to `finish` seconds for their processes
-- to end on their own before it ends what is left, as above.
--
-- Long commands: an exec request must fit one SSH packet, so a command whose wire form is
-- over M.MAX_INLINE bytes is sent over stdin to the host's shell instead. A command that
-- also has stdin of its own must stay under the limit.
--
-- The methods below live on a connection (transport/connection.lua) and use of it only:
-- session (its exec, see transport/init.lua), name, user, root, tag_base, commands,
-- ncommands, and sudo_ok/sudo_err once decided; they count round_trips (commands sent, each
-- with its sudo check and kill scripts; transfer.lua adds one per file sent).
local loop = require "cargoship.loop"
local util = require "cargoship.util"

local M = {}

local MARK = "\30cs-exit:"

-- The largest wire form sent in the exec request itself (libssh2 1.10 refuses requests over
-- about 34 KB, the runtime over 32 KiB); longer commands travel over stdin.
M.MAX_INLINE = 30000
-- How long ending a command's processes may take before we give up (a dead host cannot
-- answer; a live one needs at most the script's 3 s).
M.KILL_TIMEOUT = 8

local TAG_VAR = "CARGOSHIP_CMD"
M.TAG_VAR = TAG_VAR

local methods = {}
M.methods = methods

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
M.split_marker = split_marker

-- Decides once whether this host needs sudo and whether sudo works without a password.
-- Judges what `sudo -n true` answered (exit code, stderr), once per connection.
local function judge_sudo(self, code, err)
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

-- conn:sudo_answer(code, err): what `sudo -n true` answered inside a batch that asked it on
-- the way (facts/prefetch.lua), so deciding sudo costs no round trip of its own.
function methods:sudo_answer(code, err)
  if self.root or self.sudo_ok ~= nil then return end
  judge_sudo(self, code, err)
end

function methods:sudo_prefix()
  if self.root then return "" end
  if self.sudo_ok == nil then
    local _, err, code = self:raw("sudo -n true", {})
    judge_sudo(self, code, err)
  end
  if not self.sudo_ok then return nil, self.sudo_err, "auth" end
  return "sudo -n "
end

-- conn:sudo_known() -> the sudo prefix ("" as root) once it is known to work, else nil: a
-- batch that runs some commands as root inside one command (facts/prefetch.lua) must not
-- spend a round trip finding out, nor fail where the command itself would report why.
function methods:sudo_known()
  if self.root then return "" end
  if self.sudo_ok then return "sudo -n " end
  return nil
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
function methods:raw(cmd, opts)
  local wire = "sh -c " .. util.quote(cmd) .. "; printf '" .. MARK:gsub("\30", "\\036") .. "%d\\n' \"$?\" >&2"
  local filter
  if opts.on_stderr then
    filter = marker_filter(opts.on_stderr)
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.on_stderr = filter.feed
    opts = o
  end
  -- every command is a round trip to the host, whoever sends it: the runner reports the count
  -- per host and phase (host:round_trips), and the dry run's budget is stated in them
  self.round_trips = (self.round_trips or 0) + 1
  local t0 = loop.now()
  local out, err, status, signal = self.session:exec(wire, opts)
  if not out then return nil, err, status end
  -- the quickest command so far: the link's round trip plus a shell's start, what the
  -- upload sizes its data in flight by (transfer.lua)
  local took = loop.now() - t0
  if not self.quickest or took < self.quickest then self.quickest = took end
  local clean, code
  if filter then clean, code = err, filter.finish() else clean, code = split_marker(err) end
  if not code then
    -- what came on stderr is the last word of whatever ended it (ssh's own, for the openSSH kind)
    local said = (clean or ""):gsub("%s+$", ""):match("([^\n]*)$") or ""
    if #said > 300 then said = "..." .. said:sub(-300) end
    return nil, string.format("%s: exec: no exit status came back (connection cut or shell killed%s)%s",
      self.name, signal and (", signal " .. signal) or "", said ~= "" and (": " .. said) or ""), "closed"
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

-- The host's side of waiting for a command's processes to end on their own: exit 0 once
-- none carries the tag, 1 after `seconds`.
local function wait_script(tag, seconds)
  return table.concat({
    "n=0",
    "while :; do",
    "  grep -lsxzqF -e " .. util.quote(TAG_VAR .. "=" .. tag) .. " /proc/[0-9]*/environ 2>/dev/null || exit 0",
    "  n=$((n + 1)); [ $n -le " .. math.ceil(seconds * 4) .. " ] || exit 1",
    "  sleep 0.25",
    "done",
  }, "\n")
end

-- A finishing command's wrapper: no channel stream the command writes to can close under it.
local function finishing(cmd)
  return "cs_o=$(mktemp) && cs_e=$(mktemp) || exit 125\n"
    .. "( " .. cmd .. "\n) </dev/null >\"$cs_o\" 2>\"$cs_e\"; cs_s=$?\n"
    .. "cat \"$cs_o\"; cat \"$cs_e\" >&2; rm -f \"$cs_o\" \"$cs_e\"; exit $cs_s"
end
M.finishing = finishing

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

-- A cancelled finishing command: waits (shielded) until its processes end on their own, at
-- most `seconds`; true when they did.
local function await_end(self, e, seconds)
  local prefix = ""
  if e.sudo then prefix = self:sudo_prefix() or "" end
  local _, _, code = self:raw(prefix .. "sh -c " .. util.quote(wait_script(e.tag, seconds)),
    { timeout = seconds + M.KILL_TIMEOUT })
  if code ~= 0 then return false end
  command_done(self, e)
  return true
end

-- Waits until every command of this connection whose task is being cancelled is confirmed
-- ended (at most KILL_TIMEOUT + a few seconds each): what runs next on the host, such as
-- the release of its lock, must not run beside them.
function methods:settle()
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

-- conn:kill_all() -> true | nil, msg, code
-- Ends every command running on this connection, whoever started it, and returns once the
-- host has none of their processes left (their exec calls then return on their own).
function methods:kill_all()
  if self.ncommands == 0 then return true end
  local list = {}
  for _, e in pairs(self.commands) do
    if not e.done then list[#list + 1] = e end
  end
  return loop.shield(kill_commands, self, list)
end

-- conn:running() -> number of commands of this connection still on the host.
function methods:running()
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

-- conn:exec(cmd, {sudo, stdin, timeout, on_stdout, on_stderr})
--   -> stdout, stderr, exit_code | nil, msg, code
-- A non-zero exit is not an error here: the caller decides what it means. On a timeout or
-- a cancellation the command's processes on the host are ended before this returns (or
-- re-raises); a timeout's message says whether that was confirmed.
function methods:exec(cmd, opts)
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
  if opts.finish then
    if opts.stdin ~= nil then error("exec: a finishing command takes no stdin", 2) end
    cmd = finishing(cmd)
  end
  local wire, o, ecode = tagged(self, cmd, prefix, opts, tag)
  if not wire then return nil, o, ecode end
  local e = { tag = tag, sudo = prefix ~= "", task = loop.current(), gone = loop.semaphore(0), waiters = 0 }
  self.commands[tag] = e
  self.ncommands = self.ncommands + 1
  local r = table.pack(pcall(self.raw, self, wire, o))
  if not r[1] then
    -- cancelled (or a bug): the command may still run on the host; a finishing one is let
    -- finish within its bound, then whatever is left is ended
    if not e.done and opts.finish and r[2] == "cancelled" then pcall(loop.shield, await_end, self, e, opts.finish) end
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
-- after progress lines: dnf's "nothing provides", an engine's "[ERROR CRI]"), at most the
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

-- What explains a failure, from both streams: a tool may say why on stdout and only that it
-- failed on stderr (apt-get prints "The following packages have unmet dependencies: ..." on
-- stdout, then "E: Unable to correct problems, you have held broken packages." on stderr).
-- So stdout's last lines (at most MAX_OUT_LINES, ) come first, then
-- stderr's as error_text keeps them; nil when neither said anything.
local MAX_OUT_LINES = 8
function M.failure_text(out, err)
  local e = M.error_text(err)
  local o = M.error_text(out)
  if not e then return o end
  if not o then return e end
  local lines = {}
  for l in o:gmatch("[^\n]+") do lines[#lines + 1] = l end
  return table.concat(lines, "\n", math.max(1, #lines - MAX_OUT_LINES + 1)) .. "\n" .. e
end

-- conn:check(cmd, opts) -> stdout | nil, msg, code: a non-zero exit becomes an error
-- naming what the command said (failure_text: stdout's last lines, then stderr's), else the
-- command's start.
function methods:check(cmd, opts)
  local out, err, code = self:exec(cmd, opts)
  if not out then return nil, err, code end
  if code ~= 0 then
    return nil, string.format("%s: command failed (exit %d): %s", self.name, code,
      M.failure_text(out, err) or cmd:sub(1, 80)), "exit"
  end
  return out, err
end

return M

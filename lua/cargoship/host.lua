-- cargoship.host: the one way phases touch a machine; reads always work, writes are refused during a dry run.
--
-- Reads:  host:probe(cmd, opts), host:probes{key = cmd, ...}, host:read_file(path), host:exists(path)
--         answered from the prefetch (host:remember, facts/prefetch.lua) when the very same
--         command, as the same user, was sent ahead; the first write forgets every answer.
-- Writes: host:run(cmd, opts), host:check(cmd, opts), host:write_file(path, content, opts),
--         host:upload(local, remote, opts), host:remove(path), host:download(remote, local)
--         (a local write: refused in a dry run like the rest),
--         host:apply(actions, opts): executes action records (cargoship.action), see below
-- Session: host:connect() through the transport the command gave the host, host:reconnect()
--          (a new login in place of the current one), host:revive() (a new login only when
--          the session dropped: cleanup), host:temps_left(), host:remove_temps(), host:connected(),
--          host:disconnect() (removes this run's temp files, closes the session)
-- Commands run under sudo (when the login user is not root) unless opts.sudo == false.
-- During a dry run every write raises "<host>: dry run: refused to <what>": a phase that
-- writes while it should only report is caught here, by the transport, not by convention.
local shell = require "cargoship.shell"
local action = require "cargoship.action"
local loop = require "cargoship.loop"
local batch = require "cargoship.host_batch"
local command = require "cargoship.transport.command"

local M = {}

local Host = {}
Host.__index = Host

-- M.new{config = host entry of the loaded cluster, log = logger, dry_run = bool,
--        transport = the run's transport (cargoship.transport), which host:connect uses}
function M.new(opts)
  local cfg = opts.config
  return setmetatable({
    config = cfg,
    name = cfg.name or (cfg.connection and cfg.connection.address) or ("host" .. tostring(cfg.index)),
    role = cfg.role,
    index = cfg.index,
    facts = {},
    log = opts.log,
    dry_run = opts.dry_run and true or false,
    transport = opts.transport,
    conn = nil,
    refused = {},    -- what a dry run refused, for the report and for tests
    probes_sent = 0, -- SSH round trips spent on reads, for the dry-run benchmark
    writes_sent = 0,
    prefetched = nil, -- [sudo .. "\0" .. cmd] = {out, err, code, taken = {t0, t1}}: see host:remember
    round_trips_closed = 0, -- the command layer's count of the sessions already closed
  }, Host)
end

-- Attaches the connection opened by the transport (phase "Connect to hosts").
function Host:attach(conn)
  self.conn = conn
end

-- host:connect() -> true | nil, msg, code: opens the session through the run's transport;
-- a host already connected stays as it is.
function Host:connect()
  if self.conn then return true end
  if not self.transport then return nil, self.name .. ": no transport to connect with", "closed" end
  local conn, err, code = self.transport:connect(self.config.connection or {}, self.name)
  if not conn then return nil, err, code end
  self:attach(conn)
  return true
end

function Host:connected()
  return self.conn ~= nil
end

-- host:disconnect() -> true | nil, msg: removes the temp files this run left (uploads cut
-- short) and closes the session. Closing changes nothing on the host; the removal is only
-- ever of this run's own files, and a dry run has made none.
function Host:disconnect()
  local conn = self.conn
  if not conn then return true end
  local ok, err = true, nil
  if not self.dry_run and conn.remove_temps then ok, err = conn:remove_temps() end
  conn:close()
  self.round_trips_closed = self.round_trips_closed + (conn.round_trips or 0)
  self.conn, self.prefetched = nil, nil
  if not ok then return nil, tostring(err) end
  return true
end

function Host:is_controller()
  return self.role == "controller"
end

-- Every write may change what a read would say: the prefetched answers go with the first one.
local function wrote(self)
  self.writes_sent = self.writes_sent + 1
  self.prefetched = nil
end

-- host:remember(cmd, sudo, {out, err, code, taken = {t0, t1}}): an answer fetched ahead (by
-- facts/prefetch.lua, in one batch), which host:probe and host:probes then give for the same
-- command and user instead of asking again; taken is when (the batch's send and answer).
function Host:remember(cmd, sudo, answer)
  self.prefetched = self.prefetched or {}
  self.prefetched[(sudo and "s" or "u") .. "\0" .. cmd] = answer
end

-- host:recall(cmd, sudo) -> the remembered answer | nil
function Host:recall(cmd, sudo)
  local p = self.prefetched
  return p and p[(sudo and "s" or "u") .. "\0" .. cmd]
end

-- host:sudo_known() -> the sudo prefix ("" as root) once sudo is known to work, else nil
function Host:sudo_known()
  return self.conn and self.conn.sudo_known and self.conn:sudo_known() or nil
end

-- host:sudo_answer(code, err): `sudo -n true`'s answer, asked inside a prefetch batch
function Host:sudo_answer(code, err)
  if self.conn and self.conn.sudo_answer then self.conn:sudo_answer(code, err) end
end

-- host:round_trips() -> commands and transfers sent to the host so far, every session
-- counted (the transport's command layer counts; sudo checks and lock beats included).
function Host:round_trips()
  return self.round_trips_closed + (self.conn and self.conn.round_trips or 0)
end

local function need_conn(self)
  if not self.conn then error(self.name .. ": not connected", 0) end
  return self.conn
end

local function refuse(self, what)
  if self.dry_run then
    self.refused[#self.refused + 1] = what
    error(string.format("%s: dry run: refused to %s", self.name, what), 0)
  end
end

-- host:reconnect() -> true | nil, msg, code: a fresh session in place of the current one, so
-- what a new login reads (/etc/environment through pam_env) applies to the commands after
-- it. The new session is opened before the old one closes: a task using the host meanwhile
-- (the lock's refresher) never finds it unconnected. A dry run refuses it: a plan must not
-- depend on a session the real run would have.
function Host:reconnect()
  refuse(self, "reconnect")
  if not self.transport then return nil, self.name .. ": no transport to connect with", "closed" end
  local conn, err, code = self.transport:connect(self.config.connection or {}, self.name)
  if not conn then return nil, err, code end
  local old = self.conn
  self:attach(conn)
  self.prefetched = nil
  if old then
    self.round_trips_closed = self.round_trips_closed + (old.round_trips or 0)
    old:close()
  end
  return true
end

-- host:revive() -> true | nil, msg, code: for cleanup after a dropped session (sshd killed
-- or restarted, a link that came back): a fresh session in place of one that can no longer
-- carry commands, so the run can still release its lock and remove its temp files. A
-- session still "ready" is kept; a dry run has nothing to clean and is refused.
function Host:revive()
  local conn = self.conn
  if not conn then return nil, self.name .. ": not connected", "closed" end
  local session = conn.session
  if not (session and session.state) or session:state() == "ready" then return true end
  local ok, err, code = self:reconnect()
  if not ok then return nil, err, code end
  if self.log then self.log:verbose("reconnected for cleanup") end
  -- the dropped session's temp names are this run's too: the new one removes them
  for _, p in ipairs(conn.temps or {}) do self.conn.temps[#self.conn.temps + 1] = p end
  return true
end

-- host:temps_left() -> how many temp names of this run's uploads may be on the host.
function Host:temps_left()
  local conn = self.conn
  return conn and conn.temps and #conn.temps or 0
end

-- host:remove_temps() -> true | nil, msg, code: removes the temp names this run's uploads
-- may have left (a cut or failed upload), keeping the session open.
function Host:remove_temps()
  local conn = self.conn
  if not conn or self.dry_run or not conn.remove_temps then return true end
  return conn:remove_temps()
end

-- Every command gets a deadline: a host that stops answering mid-command must fail that
-- host, not hold the whole run until TCP gives up. Reads are quick; writes (installing
-- packages, say) may take a while. Callers pass opts.timeout for anything longer.
M.READ_TIMEOUT = 120
M.WRITE_TIMEOUT = 900

local function with_sudo(opts, timeout)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  if o.sudo == nil then o.sudo = true end
  if o.timeout == nil then o.timeout = timeout end
  return o
end

-- host:probe(cmd, opts) -> stdout, stderr, exit | nil, msg, code. Must not change the host.
function Host:probe(cmd, opts)
  local o = with_sudo(opts, M.READ_TIMEOUT)
  local known = self:recall(cmd, o.sudo)
  if known then return known.out, known.err, known.code end
  self.probes_sent = self.probes_sent + 1
  return need_conn(self):exec(cmd, o)
end

-- host:probes{key = cmd, ...} -> { key = {out = s, code = n}, ... } | nil, msg, code
-- Every command in one round trip: facts are batched, not fetched one command each.
-- Stderr is discarded; a command containing `exit` runs in a subshell, the others share the
-- script's shell (so they must not change its state in ways later keys would notice).
-- On success a second value, taken = {t0, t1}, says when the answers were taken when all came
-- from the prefetch (a phase timing the host's clock needs it); nil when asked just now.
function Host:probes(cmds, opts)
  local keys, res, taken = {}, {}, nil
  local sudo = with_sudo(opts).sudo
  for k, cmd in pairs(cmds) do
    local known = self:recall(cmd, sudo)
    if known then
      res[k], taken = { out = known.out, code = known.code }, taken or known.taken
    else
      keys[#keys + 1] = k
    end
  end
  if #keys == 0 then return res, taken end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = shell.fmt("printf '\\036cs-begin:%%s\\n' %s", k)
    -- a command that may `exit` needs a subshell of its own; the others run in a brace
    -- group, which costs the host no fork (50 hosts x ~10 probes add up on a dry run)
    if cmds[k]:find("%f[%w]exit%f[%W]") then
      parts[#parts + 1] = "( " .. cmds[k] .. "\n) 2>/dev/null"
    else
      parts[#parts + 1] = "{ " .. cmds[k] .. "\n} 2>/dev/null"
    end
    parts[#parts + 1] = shell.fmt("printf '\\036cs-end:%%s:%%d\\n' %s \"$?\"", k)
  end
  local out, err, code = self:probe(table.concat(parts, "\n"), opts)
  if not out then return nil, err, code end
  for k, body, status in out:gmatch("\30cs%-begin:([^\n]*)\n(.-)\30cs%-end:[^\n:]*:(%d+)\n") do
    res[k] = { out = body, code = tonumber(status) }
  end
  for _, k in ipairs(keys) do
    if not res[k] then return nil, self.name .. ": probe " .. k .. ": no answer", "closed" end
  end
  return res
end

-- host:read_file_command(path) -> the command host:read_file sends (as root), for a prefetch
function Host.read_file_command(_, path)
  return shell.fmt("if [ -e %s ]; then cat -- %s; else exit 44; fi", path, path)
end

-- host:read_file(path) -> content | nil, msg, "notfound"|code
function Host:read_file(path)
  local out, err, code = self:probe(self:read_file_command(path))
  if not out then return nil, err, code end
  if code == 44 then return nil, self.name .. ": " .. path .. ": no such file", "notfound" end
  if code ~= 0 then
    return nil, self.name .. ": read " .. path .. ": " .. (err:match("[^\n]+") or ("exit " .. code)), "exit"
  end
  return out
end

function Host:exists(path)
  local out, _, code = self:probe(shell.fmt("test -e %s", path))
  return out ~= nil and code == 0
end

-- host:run(cmd, opts) -> stdout, stderr, exit | nil, msg, code. Changes the host.
function Host:run(cmd, opts)
  refuse(self, "run: " .. cmd:sub(1, 120))
  wrote(self)
  return need_conn(self):exec(cmd, with_sudo(opts, M.WRITE_TIMEOUT))
end

-- host:check(cmd, opts) -> stdout, stderr | nil, msg, code: a non-zero exit is an error.
function Host:check(cmd, opts)
  refuse(self, "run: " .. cmd:sub(1, 120))
  wrote(self)
  return need_conn(self):check(cmd, with_sudo(opts, M.WRITE_TIMEOUT))
end

-- host:write_file(path, content, {mode, owner, group}) -> true | nil, msg, code
-- Written beside the target and renamed into place, so a failure leaves the old file.
function Host:write_file(path, content, opts)
  refuse(self, "write " .. path)
  opts = opts or {}
  wrote(self)
  local script = {
    "set -e",
    shell.fmt("dst=%s; tmp=$(dirname -- \"$dst\")/.$(basename -- \"$dst\").cargoship.$$", path),
    "trap 'rm -f -- \"$tmp\"' EXIT",
    "umask 077",
    'cat > "$tmp"',
  }
  if opts.mode then script[#script + 1] = shell.fmt('chmod %s -- "$tmp"', opts.mode) end
  if opts.owner then
    script[#script + 1] = shell.fmt('chown %s -- "$tmp"', opts.owner .. (opts.group and (":" .. opts.group) or ""))
  end
  script[#script + 1] = 'mv -f -- "$tmp" "$dst"'
  script[#script + 1] = "trap - EXIT"
  local ok, err, code = need_conn(self):check(table.concat(script, "\n"),
    { sudo = true, stdin = content, timeout = opts.timeout or M.WRITE_TIMEOUT })
  if not ok then return nil, err, code end
  return true
end

function Host:upload(local_path, remote, opts)
  refuse(self, "upload " .. remote)
  wrote(self)
  -- an hour: image tarballs of an air-gapped install can be gigabytes on a slow link
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  if o.timeout == nil then o.timeout = 3600 end
  return need_conn(self):upload(local_path, remote, o)
end

function Host:remove(path)
  refuse(self, "remove " .. path)
  wrote(self)
  return need_conn(self):check(shell.fmt("rm -f -- %s", path), { sudo = true, timeout = M.WRITE_TIMEOUT })
end

-- ---- executing action records ------------------------------------------------------------

-- "0644" -> "644", as stat -c %a prints it; nil stays nil.
local function stat_mode(mode)
  if not mode then return nil end
  return (mode:gsub("^0+(%d%d%d)$", "%1"))
end

-- The check and the write in one round trip: the content travels on stdin either way, and
-- the script prints which it did. Without a mode, a new file is 0600 (umask 077: it may be a
-- secret) and an existing one keeps its mode and owner.
-- The content's sha256 is the first line of stdin, never a word of the script: the script is
-- the argv of `sh -c` (and of sudo, which also logs it) on the host, which every local user
-- can read with `ps`, and the hash of a token or a registry password is an offline guess
-- away from it. `read` takes exactly that line off the pipe (shells read a pipe byte by byte
-- for it), so `cat` gets the content whole. Every write does this, not only those marked
-- secret: a custom phase that forgets the mark leaks nothing either.
-- size: the content's length when the write is one record of a batch (cargoship.host_batch),
-- whose stdin goes on with the next records' input: the content is then read with `head -c`,
-- which stops at exactly its bytes, in place of `cat`, which reads to the end.
local function write_script(a, size)
  local take = size and string.format("head -c %d", size) or "cat"
  return table.concat({
    "set -e",
    shell.fmt("dst=%s; mode=%s; user=%s; grp=%s", a.path, stat_mode(a.mode) or "", a.owner or "", a.group or ""),
    "IFS= read -r want",
    shell.SHA256_FN,
    'if [ -f "$dst" ] && [ ! -L "$dst" ]; then',
    '  set -- $(cs_sha256 "$dst"); sum=$1',
    [[  set -- $(stat -c '%a %U %G' -- "$dst")]],
    '  if [ "$sum" = "$want" ] && { [ -z "$mode" ] || [ "$1" = "$mode" ]; } &&'
      .. ' { [ -z "$user" ] || [ "$2" = "$user" ]; } && { [ -z "$grp" ] || [ "$3" = "$grp" ]; }; then',
    "    " .. take .. " >/dev/null; echo cs-skipped; exit 0",
    "  fi",
    "fi",
    a.dir_mode and shell.fmt('d=$(dirname -- "$dst"); [ -d "$d" ] || mkdir -p -m %s -- "$d"', a.dir_mode) or ":",
    'tmp=$(dirname -- "$dst")/.$(basename -- "$dst").cargoship.$$',
    [[trap 'rm -f -- "$tmp"' EXIT]],
    "umask 077",
    take .. ' > "$tmp"',
    'if [ -n "$mode" ]; then chmod "$mode" -- "$tmp"; elif [ -e "$dst" ]; then chmod --reference="$dst" -- "$tmp"; fi',
    'if [ -z "$user$grp" ] && [ -e "$dst" ]; then chown --reference="$dst" -- "$tmp"; fi',
    'if [ -n "$user$grp" ]; then chown "$user${grp:+:$grp}" -- "$tmp"; fi',
    'mv -f -- "$tmp" "$dst"',
    "trap - EXIT",
    "echo cs-done",
  }, "\n")
end

local function said(out)
  if type(out) ~= "string" then return nil end
  return out:match("cs%-(%a+)%s*$")
end

local EXECUTE = {}

-- What a write sends on stdin: the content's hash line, then the content.
local function write_stdin(a)
  return require("cargoship.util").sha256(a.content) .. "\n" .. a.content
end
M.write_script, M.write_stdin = write_script, write_stdin

function EXECUTE.write(self, a)
  local out, err = need_conn(self):check(write_script(a),
    { sudo = true, stdin = write_stdin(a), timeout = a.timeout or M.WRITE_TIMEOUT })
  if not out then return "failed", err end
  return said(out) == "skipped" and "skipped" or "done"
end

function EXECUTE.upload(self, a)
  if a.dir_mode then
    local ok, derr = need_conn(self):check(shell.fmt('d=$(dirname -- %s); [ -d "$d" ] || mkdir -p -m %s -- "$d"',
      a.path, a.dir_mode), { sudo = true, timeout = M.WRITE_TIMEOUT })
    if not ok then return "failed", derr end
  end
  local r, err = need_conn(self):upload(a.source, a.path, { mode = a.mode, owner = a.owner, group = a.group,
    sha256 = a.sha256, timeout = a.timeout or 3600, assessed = a.assessed })
  if not r then return "failed", err end
  return r.skipped and "skipped" or "done"
end

function EXECUTE.remove(self, a)
  local out, err = need_conn(self):check(shell.fmt('p=%s; if [ -e "$p" ] || [ -L "$p" ]; then rm -f %s -- "$p";'
    .. ' echo cs-done; else echo cs-skipped; fi', a.path, a.recursive and "-r" or "-f"),
    { sudo = true, timeout = a.timeout or M.WRITE_TIMEOUT })
  if not out then return "failed", err end
  return said(out) == "skipped" and "skipped" or "done"
end

-- A command marked secret travels over stdin to a shell that runs it (`eval "$(cat)"`), so
-- its text is in no argv on the host (the programs it starts have their own: a secret must
-- reach them through files or stdin, never as a word of the command). One with stdin of its
-- own keeps the exec request: that stdin is where its secret goes.
M.SECRET_RUN = 'eval "$(cat)"'
function EXECUTE.run(self, a)
  local cmd, stdin = a.cmd, a.stdin
  if a.secret and stdin == nil then cmd, stdin = M.SECRET_RUN, a.cmd end
  local out, err = need_conn(self):check(cmd, with_sudo({ sudo = a.sudo, stdin = stdin, timeout = a.timeout,
    finish = a.finish }, M.WRITE_TIMEOUT))
  if not out then return "failed", err end
  return "done"
end

function EXECUTE.service(self, a)
  if not self.os then return "failed", self.name .. ": no OS configurer (was the OS detected?)" end
  local cmd, why = self.os:service(a.verb, a.service, { nowait = a.nowait })
  if not cmd then return "failed", self.name .. ": " .. a.say .. ": " .. tostring(why) end
  local out, err = need_conn(self):check(cmd, { sudo = true, timeout = a.timeout or M.WRITE_TIMEOUT })
  if not out then return "failed", err end
  return "done"
end

-- kubectl apply on a leader whose API server is still settling fails for a while (connection
-- refused, no such resource type yet): it is retried; the other verbs are not, a drain has
-- its own --timeout and the rest act at once or not at all.
M.KUBE_RETRIES = 5
M.KUBE_RETRY_INTERVAL = 3
M.KUBE_TIMEOUT = 120

local function last_line(out, err)
  local text = (err and err ~= "") and err or out or ""
  local last
  for line in text:gmatch("[^\n]+") do
    if line:match("%S") then last = line end
  end
  return last or "no output"
end

-- M.drain_blockers(text) -> {"ns/pod", ...}, reason|nil: the pods whose eviction kubectl drain
-- reported failing (`error when evicting pods/"web-1" -n "demo" ...: <why>`), in order of
-- first mention, and the API server's refusal (the disruption budget's) where it gave one.
function M.drain_blockers(text)
  local pods, seen, reason = {}, {}, nil
  for line in (text or ""):gmatch("[^\n]+") do
    for name, ns in line:gmatch('pods/"([^"]+)" %-n "([^"]+)"') do
      local id = ns .. "/" .. name
      if not seen[id] then seen[id] = true; pods[#pods + 1] = id end
    end
    local why = line:match("^error when evicting pods/[^:]*: (.*)$")
    if why and not why:match("^global timeout") then reason = why end
  end
  return pods, reason
end

function EXECUTE.kube(self, a)
  local tries = a.verb == "apply" and (a.retries or M.KUBE_RETRIES) or 1
  local out, err, code
  for attempt = 1, tries do
    out, err, code = need_conn(self):exec(a.cmd, with_sudo({ timeout = a.timeout or M.KUBE_TIMEOUT }, M.KUBE_TIMEOUT))
    if out and code == 0 then return "done" end
    if attempt < tries then loop.sleep(M.KUBE_RETRY_INTERVAL) end
  end
  if not out then return "failed", err end
  local msg = string.format("%s: %s failed (exit %s): %s", self.name, a.say, tostring(code), last_line(out, err))
  if a.verb == "drain" then
    local pods, reason = M.drain_blockers(out .. "\n" .. (err or ""))
    if #pods > 0 then
      msg = string.format("%s: drain node %s failed: %s %s could not be evicted%s (kubectl: %s)", self.name,
        a.node, #pods == 1 and "pod" or "pods", table.concat(pods, ", "), reason and (": " .. reason) or "",
        last_line(out, err))
    end
  end
  return "failed", msg
end

-- A step is the phase's own code: steps[name](ctx, host, action) -> true | "skipped" | nil, err
function EXECUTE.step(self, a, opts)
  local fn = opts.steps and opts.steps[a.name]
  if type(fn) ~= "function" then return "failed", self.name .. ": the phase has no step " .. a.name end
  local ok, r, err = pcall(fn, opts.ctx, self, a)
  if not ok then
    if r == "cancelled" then error(r, 0) end
    return "failed", type(r) == "table" and tostring(r.err or r) or tostring(r)
  end
  if r == nil and err ~= nil then return "failed", tostring(err) end
  return r == "skipped" and "skipped" or "done"
end

function EXECUTE.note(self, a)
  return "failed", self.name .. ": \"" .. a.say .. "\" is a sentence, not an action: a phase whose assess returns"
    .. " sentences must do its work in run (docs/phases.md)"
end

-- ---- batches: consecutive records in one round trip (cargoship.host_batch) ----------------

-- The record as a part of a batch ({body, input}), or nil when it goes alone: uploads (a
-- transfer), kube (retried with pauses), steps and notes (Lua), runs with stdin of their own,
-- a finish bound or as the login user, and a service the OS cannot render (its single
-- execution reports why).
local function batch_item(self, a)
  if a.on == "local" then return nil end
  if a.kind == "write" then
    return { body = write_script(a, #a.content), input = write_stdin(a) }
  elseif a.kind == "remove" then
    return { body = shell.fmt('p=%s; if [ -e "$p" ] || [ -L "$p" ]; then rm -f %s -- "$p"; echo cs-done;'
      .. ' else echo cs-skipped; fi', a.path, a.recursive and "-r" or "-f") }
  elseif a.kind == "run" then
    if a.stdin ~= nil or a.finish ~= nil or a.sudo == false then return nil end
    return { body = a.cmd }
  elseif a.kind == "service" then
    local cmd = self.os and self.os:service(a.verb, a.service, { nowait = a.nowait })
    if not cmd then return nil end
    return { body = cmd }
  end
  return nil
end

local function bare(self, msg)
  msg = tostring(msg)
  local p = self.name .. ": "
  return msg:sub(1, #p) == p and msg:sub(#p + 1) or msg
end

-- Executes actions[i..j] (each with its batch item) as one command; fills outcomes[i..j]
-- and returns the first failure's message. Each record's outcome is its own: done or skipped
-- as its own stdout says, failed with its own exit status and output, "not_run" after it;
-- a command cut (timeout, lost session) fails the record it was in, the ones it finished stay done.
local function apply_batch(self, actions, items, i, j, outcomes)
  local list, timeout = {}, 0
  for k = i, j do
    list[#list + 1] = items[k]
    timeout = timeout + (actions[k].timeout or M.WRITE_TIMEOUT)
  end
  local _, stdin = batch.script(list)
  local got = {}
  local out, err, code = need_conn(self):exec(batch.LOADER, { sudo = true, stdin = stdin, timeout = timeout,
    on_stdout = function(chunk) got[#got + 1] = chunk end })
  -- the stream as it came (a cut command returns none of it); a connection that hands
  -- stdout back whole instead gives it here
  local text = #got > 0 and table.concat(got) or out or ""
  local parts = batch.parse(text, out and err or "", #list)
  for n, r in ipairs(parts) do
    local k, a = i + n - 1, actions[i + n - 1]
    if r.status == 0 then
      local st = (a.kind == "write" or a.kind == "remove") and said(r.out) == "skipped" and "skipped" or "done"
      outcomes[k] = { status = st }
      if self.log then self.log:debug("%s: %s", a.say, st) end
    else
      local msg
      if not out then
        msg = string.format("%s: %s: %s", self.name, a.say, bare(self, err))
      else
        local st = r.status or code
        msg = string.format("%s: %s: command failed (exit %s): %s", self.name, a.say, tostring(st),
          command.failure_text(r.out, r.err) or (r.started and a.say or command.failure_text(out, err) or a.say))
      end
      outcomes[k] = { status = "failed", error = msg }
      if self.log then self.log:debug("%s: failed: %s", a.say, msg) end
      for m = k + 1, j do outcomes[m] = { status = "not_run" } end
      return msg
    end
  end
  return nil   -- every record ended with 0 (a session lost after that leaves them done)
end

-- host:apply(actions, {ctx = context, steps = phase.steps}) -> outcomes, err
-- Executes the records in order; outcomes[i] = {status = "done"|"skipped"|"failed"|"not_run",
-- error = msg|nil}: "skipped" when the host already had it (same content, mode and owner),
-- "not_run" for every action after the first failure, which stops the list; err is that
-- failure's message, naming the host and the record. A dry run refuses it as a whole, like
-- every write. Consecutive writes, removes, runs and service records travel as one script
-- (cargoship.host_batch: one round trip for the run of them, each with its own outcome);
-- the others, and a run of one, are sent alone.
function Host:apply(actions, opts)
  opts = opts or {}
  refuse(self, string.format("apply %d action%s", #actions, #actions == 1 and "" or "s"))
  local outcomes, items = {}, {}
  for k, a in ipairs(actions) do
    action.check(a)
    items[k] = batch_item(self, a) or false
  end
  local i = 1
  while i <= #actions do
    local j = i
    while items[i] and items[j + 1] do j = j + 1 end
    if j > i then
      wrote(self)
      local err = apply_batch(self, actions, items, i, j, outcomes)
      if err then
        for m = j + 1, #actions do outcomes[m] = { status = "not_run" } end
        return outcomes, err
      end
    else
      local a = actions[i]
      if a.kind ~= "step" and a.kind ~= "note" then wrote(self) end
      local status, err
      if a.on == "local" then
        status, err = "failed", self.name .. ": " .. a.say .. ": a record for the operator's machine, not a host"
      else
        status, err = EXECUTE[a.kind](self, a, opts)
      end
      outcomes[i] = { status = status, error = err }
      if status == "failed" then
        if self.log then self.log:debug("%s: failed: %s", a.say, tostring(err)) end
        for m = i + 1, #actions do outcomes[m] = { status = "not_run" } end
        return outcomes, err
      end
      if self.log then self.log:debug("%s: %s", a.say, status) end
    end
    i = j + 1
  end
  return outcomes
end

-- host:download(remote, local, opts) -> bytes | nil, msg, code: a copy of a host's file on the
-- operator's machine. A read on the host but a write here, so a dry run refuses it before
-- the local file is touched (what a plan needs of a remote file, host:read_file gives).
function Host:download(remote, local_path, opts)
  refuse(self, "download " .. remote .. " to " .. local_path)
  self.probes_sent = self.probes_sent + 1
  return need_conn(self):download(remote, local_path, opts)
end

M.Host = Host
return M

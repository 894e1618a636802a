-- cargoship.host: the one way phases touch a machine; reads always work, writes are refused during a dry run.
--
-- Reads:  host:probe(cmd, opts), host:probes{key = cmd, ...}, host:read_file(path), host:exists(path)
-- Writes: host:run(cmd, opts), host:check(cmd, opts), host:write_file(path, content, opts),
--         host:upload(local, remote, opts), host:remove(path), host:download(remote, local)
--         (a local write: refused in a dry run like the rest),
--         host:apply(actions, opts): executes action records (cargoship.action), see below
-- Session: host:connect() through the transport the command gave the host, host:reconnect()
--          (a new login in place of the current one), host:connected(),
--          host:disconnect() (removes this run's temp files, closes the session)
-- Commands run under sudo (when the login user is not root) unless opts.sudo == false.
-- During a dry run every write raises "<host>: dry run: refused to <what>": a phase that
-- writes while it should only report is caught here, by the transport, not by convention.
local shell = require "cargoship.shell"
local action = require "cargoship.action"
local loop = require "cargoship.loop"

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
  self.conn = nil
  if not ok then return nil, tostring(err) end
  return true
end

function Host:is_controller()
  return self.role == "controller"
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
  if old then old:close() end
  return true
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
  self.probes_sent = self.probes_sent + 1
  return need_conn(self):exec(cmd, with_sudo(opts, M.READ_TIMEOUT))
end

-- host:probes{key = cmd, ...} -> { key = {out = s, code = n}, ... } | nil, msg, code
-- Every command in one round trip: facts are batched, not fetched one command each.
-- Stderr is discarded; a command containing `exit` runs in a subshell, the others share the
-- script's shell (so they must not change its state in ways later keys would notice).
function Host:probes(cmds, opts)
  local keys = {}
  for k in pairs(cmds) do keys[#keys + 1] = k end
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
  local res = {}
  for k, body, status in out:gmatch("\30cs%-begin:([^\n]*)\n(.-)\30cs%-end:[^\n:]*:(%d+)\n") do
    res[k] = { out = body, code = tonumber(status) }
  end
  for _, k in ipairs(keys) do
    if not res[k] then return nil, self.name .. ": probe " .. k .. ": no answer", "closed" end
  end
  return res
end

-- host:read_file(path) -> content | nil, msg, "notfound"|code
function Host:read_file(path)
  local out, err, code = self:probe(shell.fmt("if [ -e %s ]; then cat -- %s; else exit 44; fi", path, path))
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
  self.writes_sent = self.writes_sent + 1
  return need_conn(self):exec(cmd, with_sudo(opts, M.WRITE_TIMEOUT))
end

-- host:check(cmd, opts) -> stdout, stderr | nil, msg, code: a non-zero exit is an error.
function Host:check(cmd, opts)
  refuse(self, "run: " .. cmd:sub(1, 120))
  self.writes_sent = self.writes_sent + 1
  return need_conn(self):check(cmd, with_sudo(opts, M.WRITE_TIMEOUT))
end

-- host:write_file(path, content, {mode, owner, group}) -> true | nil, msg, code
-- Written beside the target and renamed into place, so a failure leaves the old file.
function Host:write_file(path, content, opts)
  refuse(self, "write " .. path)
  opts = opts or {}
  self.writes_sent = self.writes_sent + 1
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
  self.writes_sent = self.writes_sent + 1
  -- an hour: image tarballs of an air-gapped install can be gigabytes on a slow link
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  if o.timeout == nil then o.timeout = 3600 end
  return need_conn(self):upload(local_path, remote, o)
end

function Host:remove(path)
  refuse(self, "remove " .. path)
  self.writes_sent = self.writes_sent + 1
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
local function write_script(a)
  return table.concat({
    "set -e",
    shell.fmt("dst=%s; mode=%s; user=%s; grp=%s", a.path, stat_mode(a.mode) or "", a.owner or "", a.group or ""),
    "IFS= read -r want",
    'if [ -f "$dst" ] && [ ! -L "$dst" ]; then',
    '  set -- $(sha256sum -- "$dst"); sum=$1',
    [[  set -- $(stat -c '%a %U %G' -- "$dst")]],
    '  if [ "$sum" = "$want" ] && { [ -z "$mode" ] || [ "$1" = "$mode" ]; } &&'
      .. ' { [ -z "$user" ] || [ "$2" = "$user" ]; } && { [ -z "$grp" ] || [ "$3" = "$grp" ]; }; then',
    "    cat >/dev/null; echo cs-skipped; exit 0",
    "  fi",
    "fi",
    a.dir_mode and shell.fmt('d=$(dirname -- "$dst"); [ -d "$d" ] || mkdir -p -m %s -- "$d"', a.dir_mode) or ":",
    'tmp=$(dirname -- "$dst")/.$(basename -- "$dst").cargoship.$$',
    [[trap 'rm -f -- "$tmp"' EXIT]],
    "umask 077",
    'cat > "$tmp"',
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
    sha256 = a.sha256, timeout = a.timeout or 3600 })
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
  local out, err = need_conn(self):check(cmd, with_sudo({ sudo = a.sudo, stdin = stdin, timeout = a.timeout },
    M.WRITE_TIMEOUT))
  if not out then return "failed", err end
  return "done"
end

function EXECUTE.service(self, a)
  if not self.os then return "failed", self.name .. ": no OS configurer (was the OS detected?)" end
  local cmd, why = self.os:service(a.verb, a.service)
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

-- host:apply(actions, {ctx = context, steps = phase.steps}) -> outcomes, err
-- Executes the records in order; outcomes[i] = {status = "done"|"skipped"|"failed"|"not_run",
-- error = msg|nil}: "skipped" when the host already had it (same content, mode and owner),
-- "not_run" for every action after the first failure, which stops the list; err is that
-- failure's message. A dry run refuses it as a whole, like every write.
function Host:apply(actions, opts)
  opts = opts or {}
  refuse(self, string.format("apply %d action%s", #actions, #actions == 1 and "" or "s"))
  local outcomes = {}
  for i, a in ipairs(actions) do
    action.check(a)
    if a.kind ~= "step" and a.kind ~= "note" then self.writes_sent = self.writes_sent + 1 end
    local status, err
    if a.on == "local" then
      status, err = "failed", self.name .. ": " .. a.say .. ": a record for the operator's machine, not a host"
    else
      status, err = EXECUTE[a.kind](self, a, opts)
    end
    outcomes[i] = { status = status, error = err }
    if status == "failed" then
      if self.log then self.log:debug("%s: failed: %s", a.say, tostring(err)) end
      for j = i + 1, #actions do outcomes[j] = { status = "not_run" } end
      return outcomes, err
    end
    if self.log then self.log:debug("%s: %s", a.say, status) end
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

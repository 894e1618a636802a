-- cargoship.host: the one way phases touch a machine; reads always work, writes are refused during a dry run.
--
-- Reads:  host:probe(cmd, opts), host:probes{key = cmd, ...}, host:read_file(path), host:exists(path)
-- Writes: host:run(cmd, opts), host:check(cmd, opts), host:write_file(path, content, opts),
--         host:upload(local, remote, opts), host:remove(path)
-- Commands run under sudo (when the login user is not root) unless opts.sudo == false.
-- During a dry run every write raises "<host>: dry run: refused to <what>": a phase that
-- writes while it should only report is caught here, by the transport, not by convention.
local shell = require "cargoship.shell"

local M = {}

local Host = {}
Host.__index = Host

-- M.new{config = host entry of the loaded cluster, log = logger, dry_run = bool}
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

-- Reads a local file through the connection of a downloaded copy (a read).
function Host:download(remote, local_path, opts)
  return need_conn(self):download(remote, local_path, opts)
end

M.Host = Host
return M

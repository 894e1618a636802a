-- cargoship.transport.openssh: the system's ssh as a session kind: one ControlMaster per host, children on the loop.
--
-- A host's session is one `ssh -M -N` master (a child of ours, its own process group) whose
-- control socket lives in a 0700 directory of the run; every exec, put and get is a new
-- `ssh -S <socket>` client: a channel over the master, no handshake. The clients' pipes are
-- polled by the event loop and their exits reaped by it (cargoship.proc); nothing blocks.
-- ssh_config, ProxyCommand/ProxyJump, RSA keys, certificates and host-key checking are
-- OpenSSH's own: we pass the cluster file's configPath (-F), keyPath (-i), port, user and
-- options (-o), `--known-hosts` as UserKnownHostsFile, and a non-default
-- `--host-key-policy` as StrictHostKeyChecking, after the host's own options (ssh keeps the
-- first value it is given, so the cluster file wins).
--
-- disableMultiplexing: no master; every command pays its own handshake (the session is
-- checked once at open with `true`).
--
-- Masters' lifecycle: Kind:close_all (the end of every run, exec, repl, unlock) sends each
-- master TERM (it closes its channels and unlinks its socket) and removes the run's
-- directory. At exit (Ctrl-C and every handled signal end there) a finalizer kills what is
-- left. A run killed with SIGKILL leaves its directory behind, with the pid and start time
-- of its owner: the next run that opens an OpenSSH session finds it, sees its owner gone,
-- asks every master there to exit (`ssh -O exit`), TERMs the ones that do not answer, and
-- removes the directory.
local loop = require "cargoship.loop"
local proc = require "cargoship.proc"
local util = require "cargoship.util"
local subprocess = require "cargoship.subprocess"
local pacer = require "cargoship.transport.pacer"

local M = {}

-- What the master prints on stdout once it is authenticated and listening (LocalCommand runs
-- after the control socket is bound).
M.READY = "cargoship-master-ready"
-- What a connection of its own (disableMultiplexing) prints on stderr once authenticated
-- (LocalCommand runs then, before the command): its pacer slot is given back at that line.
M.AUTHENTICATED = "cargoship-authenticated"

local POLICY = { strict = "yes", ["accept-new"] = "accept-new", off = "no" }
M.KEEPALIVE, M.KEEPALIVE_COUNT_MAX = 10, 3
-- Channels at once per host: sshd's MaxSessions default.
M.MAX_SESSIONS = 10

local function expand_home(path, env)
  if path and path:sub(1, 2) == "~/" then
    local home = env("HOME")
    if home then return home .. path:sub(2) end
  end
  return path
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

local function has_option(c, name)
  for k in pairs(c.options or {}) do
    if k:lower() == name then return true end
  end
  return false
end

-- M.argv(c, o) -> the argv of one ssh invocation (no shell in between: each value is one
-- argument as it is; only the remote command line, o.command, is read by the remote shell,
-- and it arrives already quoted by the protocols).
-- c: the host's openSSH block {address, user, port, key_path, config_path, options}.
-- o: {mode = "master"|"client"|"direct"|"config", socket, command, known_hosts, policy,
--     timeout, keepalive, keepalive_count_max, env, program}
function M.argv(c, o)
  local env = o.env or os.getenv
  local a = { o.program or "ssh" }
  local function add(...) for _, v in ipairs { ... } do a[#a + 1] = v end end
  local function opt(k, v) add("-o", k .. "=" .. tostring(v)) end
  if c.config_path then add("-F", expand_home(c.config_path, env)) end
  if c.key_path then add("-i", expand_home(c.key_path, env)) end
  if c.port then add("-p", tostring(c.port)) end
  if c.user then add("-l", c.user) end
  for _, k in ipairs(sorted_keys(c.options)) do opt(k, c.options[k]) end
  -- ours come after the host's: ssh keeps the first value of each option
  opt("BatchMode", "yes")
  if o.known_hosts then opt("UserKnownHostsFile", expand_home(o.known_hosts, env)) end
  if o.policy and o.policy ~= "strict" then opt("StrictHostKeyChecking", POLICY[o.policy] or o.policy) end
  if o.timeout then opt("ConnectTimeout", math.max(1, math.floor(o.timeout))) end
  if o.keepalive and o.keepalive > 0 then
    opt("ServerAliveInterval", math.max(1, math.floor(o.keepalive)))
    opt("ServerAliveCountMax", o.keepalive_count_max or M.KEEPALIVE_COUNT_MAX)
  end
  if o.mode == "master" then
    add("-M", "-N", "-S", o.socket)
    opt("ControlPersist", "no")
    opt("PermitLocalCommand", "yes")
    opt("LocalCommand", "echo " .. M.READY)
  elseif o.mode == "client" then
    add("-T", "-S", o.socket)
    opt("ControlMaster", "no")
    -- a client whose master is gone would quietly log in on its own: make that fail instead
    if not has_option(c, "proxycommand") and not has_option(c, "proxyjump") then opt("ProxyCommand", "false") end
  elseif o.mode == "direct" then
    add("-T")
    opt("ControlMaster", "no")
    opt("ControlPath", "none")
    opt("PermitLocalCommand", "yes")
    opt("LocalCommand", "echo " .. M.AUTHENTICATED .. " >&2")
  elseif o.mode == "config" then
    add("-G")
  else
    error("openssh.argv: unknown mode " .. tostring(o.mode), 2)
  end
  add("--", c.address)
  if o.command then add(o.command) end
  return a
end

-- M.put_command(remote, mode, fsync) -> the remote command line that writes its stdin to
-- remote (created or truncated, then given mode), fsync'd when asked, and prints its size.
function M.put_command(remote, mode, fsync)
  local steps = { "umask 077", "f=" .. util.quote(remote), 'cat >"$f"', string.format('chmod %o -- "$f"', mode or 384) }
  if fsync ~= false then steps[#steps + 1] = '{ sync -- "$f" 2>/dev/null || sync; }' end
  steps[#steps + 1] = 'wc -c <"$f"'
  return table.concat(steps, " && ")
end

-- M.get_command(remote) -> the remote command line that writes remote to stdout.
function M.get_command(remote)
  return "cat -- " .. util.quote(remote)
end

-- The error code for what a failed ssh said on stderr.
function M.classify(stderr)
  local s = stderr or ""
  if s:find("Host key verification failed", 1, true) or s:find("IDENTIFICATION HAS CHANGED", 1, true)
    or s:find("host key is known", 1, true) or s:find("Host key for", 1, true) then
    return "hostkey"
  end
  if s:find("Permission denied", 1, true) or s:find("Too many authentication failures", 1, true) then return "auth" end
  if s:find("Connection refused", 1, true) then return "refused" end
  if s:find("timed out", 1, true) then return "timeout" end
  return "closed"
end

-- What ssh said, in a few lines: its warning boxes and advice dropped, the facts kept.
local NOISE = { "^@", "^IT IS POSSIBLE", "^Someone could be", "^It is also possible", "^Please contact",
  "^Add correct host key", "^%s*remove with", "^%s*ssh%-keygen %-f" }
local function summary(stderr)
  local lines = {}
  for l in (stderr or ""):gmatch("[^\r\n]+") do
    local keep = l:find("%S") ~= nil
    for _, pat in ipairs(NOISE) do keep = keep and not l:find(pat) end
    if keep then
      if #lines > 0 and lines[#lines]:find(" is$") then lines[#lines] = lines[#lines] .. " " .. l
      else lines[#lines + 1] = l end
    end
  end
  if #lines > 6 then lines = { lines[1], "...", table.unpack(lines, #lines - 3) } end
  return #lines > 0 and table.concat(lines, "; ") or "ssh said nothing"
end
M.summary = summary

-- ---- the run's directory ---------------------------------------------------------------------

-- One per process, created at the first session, removed when the last master is closed.
local RUN = { dir = nil, seq = 0, live = {}, nlive = 0 }
M._run = RUN

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- Our own start time (field 22 of /proc/<pid>/stat): with the pid it names this process
-- and no other, even after the pid is reused.
local function start_time()
  local stat = read_file("/proc/self/stat") or ""
  local rest = stat:match("^.*%) (.*)$") or ""
  local i = 2
  for field in rest:gmatch("%S+") do
    i = i + 1
    if i == 22 then return field end
  end
  return "0"
end

local function uid()
  local status = read_file("/proc/self/status") or ""
  return status:match("\nUid:%s*(%d+)") or "0"
end

-- The home directory OpenSSH means by ~ (the passwd entry's, not $HOME); "" when unknown.
function M.passwd_home()
  local me = uid()
  for line in (read_file("/etc/passwd") or ""):gmatch("[^\n]+") do
    local id, home = line:match("^[^:]*:[^:]*:(%d+):[^:]*:[^:]*:([^:]*):")
    if id == me then return home end
  end
  return ""
end

-- The directory of every run's masters: the user's runtime directory, else a 0700 one in /tmp.
function M.base_dir(env)
  env = env or os.getenv
  local xdg = env("XDG_RUNTIME_DIR")
  if xdg and xdg:sub(1, 1) == "/" and #xdg < 60 then return xdg .. "/cargoship-ssh" end
  local tmp = env("TMPDIR")
  if not tmp or tmp:sub(1, 1) ~= "/" or #tmp > 60 then tmp = "/tmp" end
  return tmp .. "/cargoship-ssh-" .. uid()
end

-- Sweeps the directories of dead runs (their masters asked to exit, or TERMed), then makes ours.
-- $1 base, $2 our directory's name, $3 "pid starttime", $4 ssh.
M.SETUP = [[
set -u
base=$1 me=$2 owner=$3 ssh=$4
umask 077
mkdir -p -- "$base" || exit 1
[ -O "$base" ] || { echo "$base belongs to another user" >&2; exit 1; }
chmod 700 -- "$base" || exit 1
for d in "$base"/*/; do
  d=${d%/}
  [ -d "$d" ] || continue
  pid= st=
  [ -r "$d/owner" ] && read -r pid st <"$d/owner"
  if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
    # alive (not a zombie) and the same process (its start time): a live run's
    set -f; set -- $(sed 's/^.*) //' "/proc/$pid/stat"); set +f
    [ "$1" != Z ] && [ "${20}" = "$st" ] && continue
  fi
  for s in "$d"/*.sock; do
    [ -S "$s" ] && "$ssh" -F /dev/null -S "$s" -O exit cargoship-stale >/dev/null 2>&1
  done
  for f in "$d"/*.pid; do
    [ -f "$f" ] || continue
    read -r mp <"$f" || continue
    if [ -n "$mp" ] && tr '\0' '\n' <"/proc/$mp/cmdline" 2>/dev/null | grep -qxF -- "${f%.pid}.sock"; then
      kill -TERM "$mp" 2>/dev/null
    fi
  done
  echo "closed the ssh masters of a dead run: $d"
  rm -rf -- "$d"
done
# ours appears whole, owner file and all (a rename): a run sweeping at the same moment never
# sees it ownerless, which it would take for a dead run's and remove
rm -rf -- "${base:?}/$me" "${base:?}/.$me.new"
mkdir -- "$base/.$me.new" && printf '%s\n' "$owner" >"$base/.$me.new/owner" && mv -- "$base/.$me.new" "$base/$me"
]]

-- The run's directory (made at the first call; every task waits for the one making it).
local function run_dir(kind)
  if RUN.dir then return RUN.dir end
  if RUN.making then
    local sem = RUN.making
    sem:acquire()
    sem:release()   -- the next one waiting
    if RUN.dir then return RUN.dir end
    return nil, RUN.err
  end
  RUN.making = loop.semaphore(0)
  local base = M.base_dir(kind.env)
  local me = tostring(util.getpid())
  local out, err, code = subprocess.run({ "sh", "-c", M.SETUP, "sh", base, me,
    me .. " " .. start_time(), kind.program }, { timeout = 30 })
  local sem = RUN.making
  RUN.making = nil
  if out and code == 0 then
    RUN.dir = base .. "/" .. me
    for line in out:gmatch("[^\n]+") do kind.log(line) end
  else
    RUN.err = "ssh masters' directory " .. base .. ": " .. ((out and summary(err)) or tostring(err))
  end
  sem:release()
  if RUN.dir then return RUN.dir end
  return nil, RUN.err
end

local function remove_run_dir()
  if not RUN.dir or RUN.nlive > 0 then return end
  os.remove(RUN.dir .. "/owner")
  os.remove(RUN.dir)
  RUN.dir = nil
end

-- At exit (lua_close, also after Ctrl-C): every master still up is killed, its files go.
M._sentinel = setmetatable({}, { __gc = function()
  for s in pairs(RUN.live) do
    pcall(s.master.close, s.master)
    os.remove(s.socket)
    os.remove(s.pidfile)
    os.remove(s.logfile)
  end
  RUN.live, RUN.nlive = {}, 0
  remove_run_dir()
end })

-- ---- sessions --------------------------------------------------------------------------------

local Session = {}
Session.__index = Session

local function argv_for(self, mode, command)
  local k = self.kind
  return M.argv(self.c, { mode = mode, socket = self.socket, command = command, known_hosts = k.known_hosts,
    policy = k.policy, timeout = k.timeout, keepalive = self.keepalive, keepalive_count_max = self.count_max,
    env = k.env, program = k.program })
end

local function client_mode(self)
  return self.master and "client" or "direct"
end

-- Why the session cannot run commands, or nil.
local function broken(self, op)
  if self.closed then return self.name .. ": " .. op .. ": session closed" end
  if self.lost then return self.name .. ": " .. op .. ": " .. self.lost end
end

-- The master's log (ssh -E): what it says about a failed connect, a lost host.
local function master_log(self)
  return read_file(self.logfile) or ""
end

-- Why the master is gone, once it is: ServerAlive's words become the keepalive's.
local function lost_reason(self, status)
  local log = master_log(self)
  if log:find("not responding", 1, true) then
    return string.format("connection lost: no answer from the host for %d s (keepalive every %d s, %d missed)",
      self.keepalive * self.count_max, self.keepalive, self.count_max)
  end
  if log:find("closed by remote host", 1, true) or log:find("Connection reset", 1, true)
    or log:find("Broken pipe", 1, true) then
    return "connection closed by the host"
  end
  return "connection lost: the ssh master exited (" .. tostring(status) .. "): " .. summary(log)
end

-- After a client failed (255): has the master ended? It is given a second to end (its
-- channels close before it exits). Shielded: a cancelled wait on a process kills it.
local function check_master(self)
  local p = self.master
  if not p or self.lost or self.closed then return end
  local ok, status = pcall(loop.shield, p.wait, p, 1)
  if ok and status then self.lost = lost_reason(self, status) end
end

-- A session the master asked for and sshd refused: ssh says so and exits 255 before the command
-- ran. The gate below keeps MaxSessions clients at once, but a client that ended has not always
-- freed its channel on the host yet (the master's close is still on its way), so the next one
-- can meet an eleventh session (seen in the CI-like run: 30 commands at once on one session).
-- It is tried again, a little later, up to M.REFUSED_TRIES times.
M.REFUSED = "Session open refused by peer"
M.REFUSED_TRIES = 10

-- ssh's own words for it start so (OpenSSH's mux client names its function)
local REFUSED_BY = "mux_client_request_session: "

-- One client behind the session's gate -> {pcall's results of subprocess.run}, refused. When the
-- caller streams stderr, only a beginning that could be ssh's refusal is held back (until it
-- is whole or the client ends), so a refused attempt (tried again unless `last`) says nothing
-- to the caller and a command's own stderr flows as it comes.
local function gated_client(self, argv, opts, last)
  local o = { stdin = opts.stdin, timeout = opts.timeout ~= 0 and opts.timeout or nil, on_stdout = opts.on_stdout }
  local held, flowing = "", false
  local function flush()
    if flowing then return end
    flowing = true
    if held ~= "" then opts.on_stderr(held) end
  end
  if opts.on_stderr then
    function o.on_stderr(chunk)
      if flowing then return opts.on_stderr(chunk) end
      held = held .. chunk
      local n = math.min(#held, #REFUSED_BY)
      if held:sub(1, n) ~= REFUSED_BY:sub(1, n) or #held > 4096 then flush() end
    end
    if opts.on_stdout then
      function o.on_stdout(chunk)
        flush()
        return opts.on_stdout(chunk)
      end
    end
  end
  -- sshd opens at most MaxSessions (10) channels per connection and refuses the rest: the
  -- others wait here for a free one, as libssh2's control gate makes them wait
  self.gate:acquire()
  self.nchannels = self.nchannels + 1
  local r = table.pack(pcall(subprocess.run, argv, o))
  self.nchannels = self.nchannels - 1
  self.gate:release()
  if not r[1] or not r[2] then return r, false end
  -- r = ok, out, err, status, signal (err is "" when streamed: then the held text is ssh's)
  local err = opts.on_stderr and held or r[3]
  local no = r[4] == 255 and r[2] == "" and not flowing and err:find(M.REFUSED, 1, true) ~= nil
  if opts.on_stderr and (last or not no) then flush() end
  return r, no and not last
end

-- Runs one ssh client to its end; a failure of ssh itself (exit 255 with the master gone)
-- becomes "closed" with ssh's words.
local function run_client(self, op, argv, opts)
  local why = broken(self, op)
  if why then return nil, why, "closed" end
  local r, again
  for attempt = 1, M.REFUSED_TRIES do
    r, again = gated_client(self, argv, opts, attempt == M.REFUSED_TRIES)
    if not again then break end
    self.kind.log(string.format("%s: %s: sshd refused the session (MaxSessions): try %d of %d next", self.name, op,
      attempt + 1, M.REFUSED_TRIES))
    loop.sleep(0.02 * attempt)
  end
  if not r[1] then error(r[2], 0) end
  local out, err, status, signal = table.unpack(r, 2, r.n)
  if not out then
    if status == "timeout" then
      return nil, string.format("%s: %s: timed out after %s s", self.name, op, opts.timeout), "timeout"
    end
    return nil, self.name .. ": " .. op .. ": " .. tostring(err), status
  end
  -- the master may be gone or going (its channels close first): say why, rather than "no exit status"
  if status == 255 then check_master(self) end
  why = status == 255 and broken(self, op)
  if why then return nil, why, "closed" end
  return out, err, status, signal
end

-- A client on a connection of its own (disableMultiplexing): its handshake is paced as a
-- master's is (transport/pacer.lua), holding the endpoint's slot until ssh's LocalCommand
-- says it is in (M.AUTHENTICATED on stderr, taken out of what the caller sees); a handshake
-- sshd dropped, before the command could start, is tried again.
local function run_direct(self, op, argv, opts)
  local mark = M.AUTHENTICATED .. "\n"
  return self.kind.pacer:open(M.endpoint(self.c), function(_, release)
    local errs, head, seen = {}, "", false
    local function keep(chunk)
      if chunk == "" then return end
      if opts.on_stderr then opts.on_stderr(chunk) else errs[#errs + 1] = chunk end
    end
    local o = { stdin = opts.stdin, timeout = opts.timeout, on_stdout = opts.on_stdout }
    function o.on_stderr(chunk)
      if seen then return keep(chunk) end
      head = head .. chunk
      local i, j = head:find(mark, 1, true)
      if i then
        seen = true
        release()
        keep(head:sub(1, i - 1) .. head:sub(j + 1))
      end
    end
    local out, err, status, signal = run_client(self, op, argv, o)
    if not seen then keep(head) end
    if not out then return nil, err, status end
    err = table.concat(errs)
    if status == 255 and not seen and M.dropped("closed", err) then
      return nil, self.name .. ": " .. op .. ": " .. summary(err), "closed"
    end
    return out, err, status, signal
  end, M.dropped)
end

local function client(self, op, argv, opts)
  if self.master then return run_client(self, op, argv, opts) end
  return run_direct(self, op, argv, opts)
end

function Session:exec(cmd, opts)
  opts = opts or {}
  local out, err, status, signal = client(self, "exec", argv_for(self, client_mode(self), cmd), opts)
  if not out then return nil, err, status end
  return out, err, status, signal
end

local function file_size(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local n = f:seek("end")
  f:close()
  return n
end

-- The file goes to ssh's stdin straight from the disk (a shell redirect): it never passes
-- through the loop; the master encrypts it, in its own process, on its own core.
function Session:put(local_path, remote, opts)
  opts = opts or {}
  local size, serr = file_size(local_path)
  if not size then return nil, "localhost: read " .. local_path .. ": " .. tostring(serr), "io" end
  local argv = argv_for(self, client_mode(self), M.put_command(remote, opts.mode, opts.fsync))
  table.insert(argv, 1, local_path)
  for i, v in ipairs { "sh", "-c", 'f=$1; shift; exec "$@" <"$f"', "sh" } do table.insert(argv, i, v) end
  local out, err, status = client(self, "put " .. remote, argv, { timeout = opts.timeout })
  if not out then return nil, err, status end
  if status ~= 0 then
    return nil, string.format("%s: put %s: %s", self.name, remote, summary(err)), status == 255 and "closed" or "io"
  end
  local n = tonumber(out:match("(%d+)%s*$"))
  if n ~= size then
    return nil, string.format("%s: put %s: %s of %d bytes arrived", self.name, remote, tostring(n), size), "io"
  end
  return size
end

function Session:get(remote, local_path, opts)
  opts = opts or {}
  local tmp = local_path .. ".cs-" .. util.getpid() .. ".tmp"
  local argv = argv_for(self, client_mode(self), M.get_command(remote))
  table.insert(argv, 1, tmp)
  for i, v in ipairs { "sh", "-c", 'f=$1; shift; exec "$@" >"$f"', "sh" } do table.insert(argv, i, v) end
  local ok, out, err, status = pcall(client, self, "get " .. remote, argv, { timeout = opts.timeout })
  if not ok then os.remove(tmp) error(out, 0) end
  if not out then os.remove(tmp) return nil, err, status end
  if status ~= 0 then
    os.remove(tmp)
    return nil, string.format("%s: get %s: %s", self.name, remote, summary(err)), status == 255 and "closed" or "io"
  end
  local size = file_size(tmp)
  local rok, rerr = os.rename(tmp, local_path)
  if not rok then os.remove(tmp) return nil, "localhost: " .. tostring(rerr), "io" end
  return size
end

function Session:state()
  if self.closed then return "closed" end
  if self.lost then return "lost" end
  return "ready"
end

-- What the transport reports about the session (not part of the interface).
function Session:info()
  return { kind = "openssh", state = self:state(), socket = self.socket, channels = self.nchannels,
    master_pid = self.master and self.master_pid, multiplexing = self.master ~= nil }
end

local function forget(self)
  if RUN.live[self] then
    RUN.live[self] = nil
    RUN.nlive = RUN.nlive - 1
  end
  if self.socket then os.remove(self.socket) end
  if self.pidfile then os.remove(self.pidfile) end
  if self.logfile then os.remove(self.logfile) end
end

-- TERM to the master (it ends its channels and unlinks its socket); one that has not ended
-- 0.5 s later is killed (a master TERMed just as a channel closes sometimes goes on: seen
-- taking the whole 3 s a longer wait gave it), and its socket removed here.
M.CLOSE_GRACE = 0.5
function Session:close()
  if self.closed then return end
  self.closed = true
  local p = self.master
  if p then
    if loop.current() then
      pcall(loop.shield, function()
        if p:kill("TERM") then p:wait(M.CLOSE_GRACE) end
      end)
    end
    p:close()
  end
  forget(self)
end

-- Starts the host's master and waits until it listens -> true | nil, msg, code.
-- No task waits on the master while it runs (a run's cancel-everything would cancel that
-- wait, and cancelling a wait on a process kills it): it logs to a file (-E), and its end
-- is learnt when a client fails, or at close.
local function start_master(self)
  local argv = argv_for(self, "master")
  table.insert(argv, 2, "-E")
  table.insert(argv, 3, self.logfile)
  local p, err, code = proc.spawn { argv = argv, stdin = "null", stdout = "pipe", stderr = "null" }
  if not p then return nil, self.name .. ": connect: " .. err, code end
  self.master, self.master_pid = p, p:pid()
  RUN.live[self] = true
  RUN.nlive = RUN.nlive + 1
  local f = io.open(self.pidfile, "w")
  if f then f:write(self.master_pid, "\n") f:close() end
  local limit = (self.kind.timeout or 30) * 2 + 5
  local deadline = loop.now() + limit
  local ended   -- the master closed its stdout (it exited) before it was ready
  local ok, ready = pcall(function()
    local buf = ""
    while not buf:find(M.READY, 1, true) do
      local chunk = p:read("stdout", nil, math.max(0, deadline - loop.now()))
      if chunk == "" then ended = true end
      if not chunk or chunk == "" then return false end
      buf = buf .. chunk
    end
    return true
  end)
  if ok and ready then return true end
  -- it ended (or hung), or our task was cancelled: no master
  if ok then pcall(loop.shield, p.wait, p, 2) end
  local log = master_log(self)
  self.closed = true
  p:close()
  forget(self)
  if not ok then error(ready, 0) end
  local said = log:find("%S") and summary(log)
    or (ended and "the ssh master exited before it was ready, saying nothing")
    or ("the ssh master did not start within " .. limit .. " s")
  return nil, self.name .. ": connect: " .. said, M.classify(log)
end

-- What ssh says when sshd dropped the handshake (MaxStartups, load): worth another try.
local DROPPED = { "kex_exchange_identification", "ssh_exchange_identification", "banner exchange",
  "Connection reset by peer", "Connection closed by remote host" }
function M.dropped(code, msg)
  if code == "refused" then return "refused" end
  for _, d in ipairs(DROPPED) do
    if (msg or ""):find(d, 1, true) then return true end
  end
  return false
end

-- The endpoint whose sshd sees this host's handshakes: its jump host when it has one (every
-- master logs in there too), else its address (one sshd may listen on several ports).
function M.endpoint(c)
  for k, v in pairs(c.options or {}) do
    local key = k:lower()
    if (key == "proxyjump" and tostring(v):lower() ~= "none")
      or (key == "proxycommand" and tostring(v):lower() ~= "none") then
      return "via " .. tostring(v)
    end
  end
  return tostring(c.address)
end

-- ---- uploads of libssh2 hosts through a master (--upload-transport) -----------------------------

-- Files at least this big go through the system's ssh under --upload-transport auto:
-- libssh2 encrypts on the loop's one thread, ssh in a process per host, on every core.
M.AUTO_MIN_BYTES = 32 * 1024 * 1024

-- An ssh: block as an openSSH: one (libssh2's own options dropped); nil for a host behind a
-- bastion (its jump is libssh2's).
function M.block_of(c)
  if c.bastion then return nil end
  local options = {}
  for k, v in pairs(c.options or {}) do
    if k:lower() ~= "identitypassphraseenv" then options[k] = v end
  end
  return { kind = "openssh", address = c.address, user = c.user or "root", port = c.port, key_path = c.key_path,
    options = options }
end

local Via = {}
Via.__index = function(self, k)
  local m = rawget(Via, k)
  if m then return m end
  local inner = rawget(self, "inner")
  local f = inner[k]
  if type(f) == "function" then return function(_, ...) return f(inner, ...) end end
  return f
end

-- The host's master for uploads, opened at the first put (hosts with nothing to upload pay nothing).
local function via_session(self)
  if self.session then return self.session end
  if self.err then return nil, self.err, self.code end
  if self.opening then
    self.opening:acquire()
    self.opening:release()
    return self.session, self.err, self.code
  end
  self.opening = loop.semaphore(0)
  local s, err, code = self.kind:open(self.block, self.name)
  self.session, self.err, self.code = s, err, code
  self.opening:release()
  return s, err, code
end

function Via:put(local_path, remote, opts)
  if self.mode == "auto" then
    local size = file_size(local_path)
    if not self.block or not size or size < M.AUTO_MIN_BYTES then return self.inner:put(local_path, remote, opts) end
    local s = via_session(self)
    if not s then return self.inner:put(local_path, remote, opts) end   -- auto: libssh2 is always there
    return s:put(local_path, remote, opts)
  end
  if not self.block then
    return nil, self.name .. ": put: --upload-transport openssh cannot reach a host behind a bastion", "io"
  end
  local s, err, code = via_session(self)
  if not s then return nil, err, code end
  return s:put(local_path, remote, opts)
end

function Via:close()
  if self.session then self.session:close() end
  self.inner:close()
end

-- M.via(inner, kind, c, name, mode) -> a session that is inner but puts through an openssh
-- session of kind (mode "openssh": every file; "auto": files of AUTO_MIN_BYTES and more,
-- libssh2 when the master cannot start).
function M.via(inner, kind, c, name, mode)
  return setmetatable({ inner = inner, kind = kind, block = M.block_of(c), name = name, mode = mode,
    user = inner.user }, Via)
end

-- ---- the kind --------------------------------------------------------------------------------

local Kind = {}
Kind.__index = Kind

-- M.new(transport options): known_hosts (passed as UserKnownHostsFile unless it is the file
-- OpenSSH reads anyway, ~/.ssh/known_hosts of the passwd home, so that ssh_config's own
-- setting stays in force when --known-hosts was not given),
-- host_key_policy, timeout, env, keepalive, keepalive_count_max, log (function), ssh_program,
-- pacer (or max_startups, max_unauthenticated: transport/pacer.lua).
function M.new(opts)
  opts = opts or {}
  local env = opts.env or os.getenv
  local kh = opts.known_hosts and expand_home(opts.known_hosts, env)
  if kh and kh == M.passwd_home() .. "/.ssh/known_hosts" then kh = nil end
  return setmetatable({
    env = env, known_hosts = kh, policy = opts.host_key_policy, timeout = opts.timeout or 30,
    keepalive = opts.keepalive or M.KEEPALIVE,
    keepalive_count_max = opts.keepalive_count_max or M.KEEPALIVE_COUNT_MAX,
    program = opts.ssh_program or "ssh", log = opts.log or function() end, sessions = {},
    pacer = opts.pacer or pacer.new { per_endpoint = opts.max_startups, total = opts.max_unauthenticated },
  }, Kind)
end

local function option(c, name)
  for k, v in pairs(c.options or {}) do
    if k:lower() == name then return tostring(v) end
  end
end

-- The login user ssh_config decides when the cluster file names none (`ssh -G`, no connection).
local function config_user(self, c, name)
  local out, err, code = subprocess.run(M.argv(c, { mode = "config", env = self.env, program = self.program }),
    { timeout = 10 })
  if not out or code ~= 0 then
    return nil, name .. ": ssh -G: " .. (out and summary(err) or tostring(err)), "io"
  end
  return out:match("\nuser ([^\n]+)") or out:match("^user ([^\n]+)") or "root"
end

-- kind:open(c, name) -> session | nil, msg, code; c is the host's openSSH block.
function Kind:open(c, name)
  name = name or c.address
  local s = setmetatable({ kind = self, c = c, name = name, gate = loop.semaphore(M.MAX_SESSIONS), nchannels = 0 },
    Session)
  s.keepalive = tonumber(option(c, "serveraliveinterval") or self.keepalive) or M.KEEPALIVE
  s.count_max = tonumber(option(c, "serveralivecountmax") or self.keepalive_count_max) or M.KEEPALIVE_COUNT_MAX
  if c.user then
    s.user = c.user
  else
    local user, err, code = config_user(self, c, name)
    if not user then return nil, err, code end
    s.user = user
  end
  -- paced, and tried again when sshd drops the handshake (transport/pacer.lua)
  local ok, err, code = self.pacer:open(M.endpoint(c), function()
    if c.disable_multiplexing then
      -- every command its own connection: check this one works now, once
      local out, rerr, rcode = run_client(s, "connect", argv_for(s, "direct", "true"), { timeout = self.timeout * 2 })
      if not out then return nil, rerr, rcode end
      rerr = rerr:gsub(M.AUTHENTICATED .. "\n", "")
      if rcode ~= 0 then return nil, name .. ": connect: " .. summary(rerr), M.classify(rerr) end
      return true
    end
    local dir, derr = run_dir(self)
    if not dir then return nil, name .. ": connect: " .. derr, "io" end
    RUN.seq = RUN.seq + 1
    s.closed = nil
    s.socket = dir .. "/" .. RUN.seq .. ".sock"
    s.pidfile = dir .. "/" .. RUN.seq .. ".pid"
    s.logfile = dir .. "/" .. RUN.seq .. ".log"
    return start_master(s)
  end, M.dropped)
  if not ok then return nil, err, code end
  self.sessions[#self.sessions + 1] = s
  return s
end

-- Closes every master this kind started that is still up, then the run's directory when no
-- other transport of the run holds one.
function Kind:close_all()
  for i = #self.sessions, 1, -1 do self.sessions[i]:close() end
  self.sessions = {}
  remove_run_dir()
end

return M

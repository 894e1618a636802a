-- cargoship.transport.libssh2: the libssh2 session kind (host keys, keys, agents, bastions, caps, retries, keepalive).
--
-- It opens authenticated sessions and hands them over with the session interface of
-- transport/init.lua (exec, put, get, close, state); everything else about libssh2 stays here.
--
-- Dead hosts: a keepalive task per session asks the host for an answer every `keepalive`
-- seconds (default 10; ServerAliveInterval in the host's ssh options); after
-- `keepalive_count_max` (default 3; ServerAliveCountMax) silent rounds while a command
-- waits, the session is broken and every command on it fails "closed".
local loop = require "cargoship.loop"
local ssh = require "cargoship.ssh"
local keys = require "cargoship.ssh.keys"
local agent = require "cargoship.ssh.agent"
local pacer = require "cargoship.transport.pacer"

local M = {}

-- Keepalive defaults: a silent host fails after 3 x 10 s.
M.KEEPALIVE, M.KEEPALIVE_COUNT_MAX = 10, 3

local Kind = {}
Kind.__index = Kind

-- A libssh2 session as the protocols see it: the runtime's ssh session, plus the keepalive
-- task and the bastion tunnel's pumps that live and die with it.
local Session = {}
Session.__index = Session

function Session:exec(cmd, opts) return self.ssh:exec(cmd, opts) end
function Session:put(local_path, remote, opts) return self.ssh:sftp_put(local_path, remote, opts) end
function Session:get(remote, local_path, opts) return self.ssh:sftp_get(remote, local_path, opts) end
function Session:state() return self.ssh:info().state end
-- libssh2's own figures (channels, bytes received, algorithms): not part of the interface
function Session:info() return self.ssh:info() end

function Session:close()
  if self.keepalive_task then self.keepalive_task:cancel() end
  self.ssh:close()
  if self.pumps then for _, t in ipairs(self.pumps) do t:cancel() end end
end

local function expand_home(path, env)
  if path and path:sub(1, 2) == "~/" then
    local home = env("HOME")
    if home then return home .. path:sub(2) end
  end
  return path
end
M.expand_home = expand_home

-- M.new{known_hosts = path, host_key_policy = "strict", timeout = 30, env = os.getenv,
--       passphrase = function(key_path) -> string|nil, pacer (or max_startups = 10,
--       max_unauthenticated = 16), keepalive = seconds (0: none), keepalive_count_max = n}
-- (the transport's options, transport/init.lua)
function M.new(opts)
  opts = opts or {}
  local env = opts.env or os.getenv
  return setmetatable({
    env = env,
    known_hosts_path = expand_home(opts.known_hosts or "~/.ssh/known_hosts", env),
    policy = opts.host_key_policy or "strict",
    timeout = opts.timeout or 30,
    passphrase = opts.passphrase,
    keepalive = opts.keepalive or M.KEEPALIVE,
    keepalive_count_max = opts.keepalive_count_max or M.KEEPALIVE_COUNT_MAX,
    -- each command opens the next one's channel while it runs (runtime/ssh_exec.c); false: not
    spare_channel = opts.spare_channel ~= false,
    -- sshd drops unauthenticated connections beyond MaxStartups (10 by default): handshakes
    -- are paced per endpoint and overall, and dropped ones tried again (transport/pacer.lua)
    pacer = opts.pacer or pacer.new { per_endpoint = opts.max_startups, total = opts.max_unauthenticated },
    key_info = {},
    bastions = {},
    collections = {},
    agents = {},
  }, Kind)
end

-- known_hosts files are read once per run and shared by every host that uses them.
function Kind:known_hosts(path)
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
function Kind:key(path, passphrase_env)
  local info = self.key_info[path]
  if info and info.pending then
    -- another host's task is reading it (starting its agent yields): one read, one passphrase
    info.pending:acquire()
    info.pending:release()
    return self:key(path, passphrase_env)   -- read, or left unread by a cancelled task: again
  end
  if info then return info end
  local pending = loop.semaphore(0)
  self.key_info[path] = { pending = pending }
  local ok, got = pcall(self.read_key, self, path, passphrase_env)
  self.key_info[path] = ok and got or nil
  pending:release()
  if not ok then error(got, 0) end
  return got
end

function Kind:read_key(path, passphrase_env)
  local info
  local text, err = keys.read(path)
  if not text then
    info = { err = err }
  else
    local k, why = keys.inspect(text)
    if not k then info = { err = "key " .. path .. ": " .. why }
    elseif k.type == "rsa" or k.type == "dsa" then info = { err = "key " .. path .. ": " .. keys.RSA_MESSAGE }
    else info = k end
    if not info.err then info.pub_path = keys.public_file(path, info.public) end
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
  return info
end

-- One authenticated session, one try (the pacer holds the startup slots and retries).
local function open_session(params)
  local s, err, code = ssh.connect(params)
  if s and not params.key_path then
    local ok, aerr, acode = s:agent_auth(params.user, params.timeout, params.agent_socket)
    if not ok then
      s:close()
      s, err, code = nil, aerr, acode
    end
  end
  return s, err, code
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
    spare_channel = self.spare_channel,
  }
  if c.key_path then
    local path = expand_home(c.key_path, self.env)
    local info = self:key(path, option(c, "identitypassphraseenv"))
    if info.err then return nil, name .. ": auth: " .. info.err, "auth" end
    if info.agent then
      p.agent_socket = info.agent.socket
    else
      p.key_path, p.passphrase, p.pub_path = path, info.passphrase, info.pub_path
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
          else p.key_path, p.passphrase, p.pub_path = path, info.passphrase, info.pub_path end
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
-- The session is opened (paced as its own endpoint) before any host behind it takes a slot.
function Kind:bastion_session(b, name)
  local bkey = string.format("%s@%s:%d", b.user or "root", b.address, b.port or 22)
  local entry = self.bastions[bkey]
  if not entry then
    entry = { ready = loop.semaphore(0) }
    self.bastions[bkey] = entry
    local s, err, code = self:open(b, "bastion " .. b.address)
    entry.session, entry.err, entry.code = s, err, code
    entry.done = true
    for _ = 1, 1000 do entry.ready:release() end
  elseif not entry.done then
    entry.ready:acquire()
  end
  if not entry.session then return nil, name .. ": via " .. tostring(entry.err), entry.code end
  return entry.session
end

function Kind:bastion_fd(bs, target, name)
  local tunnel, err, code = bs.ssh:forward(target.address, target.port or 22, self.timeout)
  if not tunnel then return nil, name .. ": bastion tunnel: " .. err, code end
  local down = loop.spawn(tunnel.pump, tunnel, "down")
  local up = loop.spawn(tunnel.pump, tunnel, "up")
  return tunnel, { down, up }
end

-- kind:open(connection_config, name) -> session | nil, msg, code
-- connection_config: { address, port, user, key_path, options, bastion = {...} } (config's
-- ssh block); the session logs in as c.user or root.
function Kind:open(c, name)
  name = name or c.address
  local params, err, code = params_for(self, c, name)
  if not params then return nil, err, code end
  -- a host behind a bastion: each try gets a new tunnel (a dropped handshake ends its channel)
  local endpoint = c.bastion and ("via " .. c.bastion.address) or params.address
  local pumps, bs
  if c.bastion then
    local berr, bcode
    bs, berr, bcode = self:bastion_session(c.bastion, name)
    if not bs then return nil, berr, bcode end
  end
  local s, serr, scode = self.pacer:open(endpoint, function()
    if bs then
      local tunnel, extra, tcode = self:bastion_fd(bs, c, name)
      if not tunnel then return nil, extra, tcode end
      params.fd, params.tunnel, pumps = tunnel:fd(), tunnel, extra
    end
    local got, gerr, gcode = open_session(params)
    if not got and pumps then
      for _, t in ipairs(pumps) do t:cancel() end
      pumps = nil
    end
    return got, gerr, gcode
  end)
  if not s then return nil, serr, scode end
  local session = setmetatable({ ssh = s, pumps = pumps }, Session)
  local interval = tonumber(option(c, "serveraliveinterval") or self.keepalive) or M.KEEPALIVE
  local count = tonumber(option(c, "serveralivecountmax") or self.keepalive_count_max) or M.KEEPALIVE_COUNT_MAX
  if interval > 0 then
    interval = math.max(1, math.floor(interval))
    session.keepalive_task = loop.spawn(function()
      while true do
        loop.sleep(interval)
        local ok, kerr = s:keepalive(interval, count)
        if not ok then
          session.lost = kerr
          return
        end
      end
    end)
  end
  return session
end

-- Closes what the kind holds beyond the hosts' sessions: the bastion sessions (after the
-- sessions through them, which the transport closed first) and the private agents.
function Kind:close_all()
  for _, entry in pairs(self.bastions) do
    if entry.session and not entry.closed then
      entry.closed = true
      entry.session:close()
    end
  end
  for _, a in ipairs(self.agents) do a:stop() end
  self.agents = {}
  for path, info in pairs(self.key_info) do
    if info.agent then self.key_info[path] = nil end
  end
end

return M

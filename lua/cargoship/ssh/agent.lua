-- cargoship.ssh.agent: a private ssh-agent per run, so an encrypted key is decrypted once, not once per host.
--
-- libssh2 1.10 decrypts a passphrase-protected key (bcrypt KDF) on every authentication,
-- about 200 ms of CPU per host (notes/libssh2.md §4). Instead, OpenSSH's ssh-agent is started
-- on a socket in a private directory, ssh-add decrypts the key into it once, and every host
-- signs through the agent (0.15 ms each). The passphrase never reaches a command line or an
-- environment: ssh-add asks for it through an askpass helper that reads it from a FIFO in
-- that directory, which only we write to, once. A watchdog ends the agent and removes the
-- directory when this process is gone, however it ends. Every program here runs through the
-- proc primitive, so the task starting the agent yields while ssh-add decrypts.
local fs = require "cargoship.fs"
local proc = require "cargoship.proc"
local subprocess = require "cargoship.subprocess"
local util = require "cargoship.util"

local M = {
  program = "ssh-agent",   -- the agent started (a spec puts a slow starter here)
}

local Agent = {}
Agent.__index = Agent

local q = util.quote

-- What the private directory ever holds: removed by name, no rm -rf, no process.
local FILES = { "agent.sock", "pass", "askpass", "asked" }

local function remove_dir(dir)
  for _, name in ipairs(FILES) do os.remove(dir .. "/" .. name) end
  os.remove(dir)
end

-- A program's output when it exited 0 -> out | nil, why
local function sh(argv)
  local out, err, code = subprocess.run(argv, { stderr = "stdout", timeout = 30 })
  if out and code == 0 then return out end
  return nil, (out or err):gsub("%s+$", "")
end

-- A socket exists: opening it fails, but not with ENOENT.
local function exists(path)
  local f, _, errno = io.open(path, "r")
  if f then f:close() end
  return f ~= nil or errno ~= 2
end

-- The agent answers on its socket (up to 5 s). The socket's file appears at bind(), before
-- the agent listens, and a connection in between is refused; `ssh-add -l` exits 2 only when it
-- cannot talk to the agent (1: no identities yet). -> true | false
local function listening(self, sock)
  for _ = 1, 100 do
    if self.agent:wait(0.05) then return false end   -- the agent ended
    if exists(sock) then
      local _, _, code = subprocess.run({ "ssh-add", "-l" }, { stderr = "stdout", timeout = 10,
        env = { SSH_AUTH_SOCK = sock } })
      if code == 0 or code == 1 then return true end
    end
  end
  return false
end

-- Fills the private directory, starts the agent and its watchdog, has ssh-add decrypt the key
-- -> self | nil, why (the caller stops self on either)
local function launch(self, key_path, passphrase)
  local dir, sock = self.dir, self.socket
  local fifo, askpass, used = dir .. "/pass", dir .. "/askpass", dir .. "/asked"
  -- the helper answers once: a second question means the passphrase was wrong
  local ok, err = fs.replace(askpass, "#!/bin/sh\n[ -e " .. q(used) .. " ] && exit 1\n: > " .. q(used)
    .. "\nexec head -n 1 " .. q(fifo) .. "\n", tonumber("700", 8))
  if ok then ok, err = sh({ "mkfifo", "-m", "600", fifo }) end
  if ok then
    self.agent, err = proc.spawn { argv = { M.program, "-D", "-a", sock }, stdout = "null", stderr = "null" }
  end
  if not self.agent then return nil, "cannot start ssh-agent: " .. tostring(err) end
  self.pid = self.agent:pid()
  -- the watchdog: when we are gone, so is the agent and the directory
  local watch = "while kill -0 " .. util.getpid() .. " 2>/dev/null; do sleep 2; done; kill " .. self.pid
    .. "; rm -rf " .. q(dir)
  self.watchdog = proc.spawn { argv = { "sh", "-c", watch }, stdout = "null", stderr = "null" }
  if not listening(self, sock) then return nil, "cannot start ssh-agent: ssh-agent did not start" end
  -- opened read-write, the FIFO never blocks us: the line waits in it until the helper
  -- reads it, and if ssh-add fails before asking, nobody waits on anybody
  local w <close> = io.open(fifo, "r+")
  if not w then return nil, "cannot open the passphrase FIFO in " .. dir end
  w:write(passphrase, "\n")
  w:flush()
  -- its own session (proc.spawn's): no terminal to ask on, so it asks the helper
  local out, aerr, code = subprocess.run({ "ssh-add", "-q", key_path }, { stderr = "stdout", timeout = 120,
    env = { SSH_AUTH_SOCK = sock, SSH_ASKPASS = askpass, SSH_ASKPASS_REQUIRE = "force", DISPLAY = "none" } })
  if not out or code ~= 0 then
    local msg = (out or aerr):gsub("%s+$", "")
    return nil, "ssh-add " .. key_path .. ": " .. (msg ~= "" and msg or "failed (wrong passphrase?)")
  end
  return self
end

-- M.start(key_path, passphrase) -> agent | nil, why
-- Yields while ssh-add decrypts the key (once per key and run); must run in a task. However
-- it fails, cancelled included, nothing is left running and the directory is gone.
function M.start(key_path, passphrase)
  if passphrase:find("[\n\r]") then return nil, "a passphrase with a line break cannot be handed to ssh-add" end
  local dir, why = sh({ "mktemp", "-d", "--tmpdir", "cargoship-agent.XXXXXX" })   -- mode 0700
  if not dir then return nil, "cannot make a private directory: " .. tostring(why) end
  dir = dir:gsub("%s+$", "")
  local self = setmetatable({ dir = dir, socket = dir .. "/agent.sock" }, Agent)
  local ok, started, err = pcall(launch, self, key_path, passphrase)
  if ok and started then return started end
  self:stop()
  if not ok then error(started, 0) end
  return nil, err
end

-- Ends the agent and its watchdog and removes the directory (idempotent). Never waits, so
-- it serves destructors and the collector too.
function Agent:stop()
  if self.stopped then return end
  self.stopped = true
  if self.watchdog then self.watchdog:close() end
  if self.agent then self.agent:close() end
  remove_dir(self.dir)
end

Agent.__gc = Agent.stop

return M

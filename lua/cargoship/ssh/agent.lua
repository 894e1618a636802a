-- cargoship.ssh.agent: a private ssh-agent per run, so an encrypted key is decrypted once, not once per host.
--
-- libssh2 1.10 decrypts a passphrase-protected key (bcrypt KDF) on every authentication,
-- about 200 ms of CPU per host (notes/libssh2.md §4). Instead, OpenSSH's ssh-agent is started
-- on a socket in a private directory, ssh-add decrypts the key into it once, and every host
-- signs through the agent (0.15 ms each). The passphrase never reaches a command line or an
-- environment: ssh-add asks for it through an askpass helper that reads it from a FIFO in
-- that directory, which only we write to, once. A watchdog ends the agent and removes the
-- directory when this process is gone, however it ends.
local util = require "cargoship.util"

local M = {}

local Agent = {}
Agent.__index = Agent

local q = util.quote

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1", "r")
  if not p then return nil, "cannot run " .. cmd end
  local out = p:read("a")
  local ok = p:close()
  return ok and out or nil, out
end

-- M.start(key_path, passphrase) -> agent | nil, why
-- Blocks while ssh-add decrypts the key (once per key and run).
function M.start(key_path, passphrase)
  if passphrase:find("[\n\r]") then return nil, "a passphrase with a line break cannot be handed to ssh-add" end
  local dir, why = sh("umask 077 && mktemp -d \"${TMPDIR:-/tmp}/cargoship-agent.XXXXXX\"")
  if not dir then return nil, "cannot make a private directory: " .. tostring(why) end
  dir = dir:gsub("%s+$", "")
  local sock, fifo, askpass, used = dir .. "/agent.sock", dir .. "/pass", dir .. "/askpass", dir .. "/asked"
  -- the helper answers once: a second question means the passphrase was wrong
  local f = assert(io.open(askpass, "w"))
  f:write("#!/bin/sh\n[ -e ", q(used), " ] && exit 1\n: > ", q(used), "\nexec head -n 1 ", q(fifo), "\n")
  f:close()
  local pid, err = sh(table.concat({
    "umask 077 && chmod 700 " .. q(askpass) .. " && mkfifo " .. q(fifo),
    "ssh-agent -D -a " .. q(sock) .. " >/dev/null 2>&1 </dev/null & a=$!",
    -- the watchdog: when we are gone, so is the agent and the directory
    "( while kill -0 " .. util.getpid() .. " 2>/dev/null; do sleep 2; done; kill $a; rm -rf " .. q(dir)
      .. " ) >/dev/null 2>&1 </dev/null &",
    "i=0; while [ ! -S " .. q(sock) .. " ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done",
    "[ -S " .. q(sock) .. " ] || { echo 'ssh-agent did not start'; kill $a; exit 1; }",
    "echo $a",
  }, "\n"))
  if not pid then
    os.execute("rm -rf " .. q(dir))
    return nil, "cannot start ssh-agent: " .. tostring(err):gsub("%s+$", "")
  end
  local self = setmetatable({ dir = dir, socket = sock, pid = tonumber(pid:match("%d+")) }, Agent)
  -- opened read-write, the FIFO never blocks us: the line waits in it until the helper
  -- reads it, and if ssh-add fails before asking, nobody waits on anybody
  local w = io.open(fifo, "r+")
  if not w then
    self:stop()
    return nil, "cannot open the passphrase FIFO in " .. dir
  end
  w:write(passphrase, "\n")
  w:flush()
  local add = io.popen(table.concat({
    "SSH_AUTH_SOCK=" .. q(sock), "SSH_ASKPASS=" .. q(askpass), "SSH_ASKPASS_REQUIRE=force", "DISPLAY=none",
    "setsid -w ssh-add -q " .. q(key_path) .. " </dev/null 2>&1",
  }, " "), "r")
  local out = add:read("a")
  local ok = add:close()
  w:close()
  if not ok then
    self:stop()
    local msg = out:gsub("%s+$", "")
    return nil, "ssh-add " .. key_path .. ": " .. (msg ~= "" and msg or "failed (wrong passphrase?)")
  end
  return self
end

-- Ends the agent and removes its directory (idempotent).
function Agent:stop()
  if self.stopped then return end
  self.stopped = true
  if self.pid then os.execute("kill " .. self.pid .. " 2>/dev/null") end
  os.execute("rm -rf " .. q(self.dir))
end

return M

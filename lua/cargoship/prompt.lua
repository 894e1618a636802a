-- cargoship.prompt: asks the person at the terminal a question, echo off for secrets.
local util = require "cargoship.util"

local M = {}

-- M.ask(question, {secret = bool}) -> answer | nil, why
-- Reads /dev/tty, not stdin: stdin may carry a script while a person still sits at the terminal.
function M.ask(question, opts)
  opts = opts or {}
  local tty = io.open("/dev/tty", "r+")
  if not tty then return nil, "no terminal to ask on" end
  tty:write(question)
  tty:flush()
  local quiet = opts.secret and os.execute("stty -echo < /dev/tty 2>/dev/null")
  local answer = tty:read("l")
  if quiet then
    os.execute("stty echo < /dev/tty 2>/dev/null")
    tty:write("\n")
  end
  tty:close()
  if not answer then return nil, "no answer" end
  return answer
end

-- M.passphrase_source(env, isatty) -> function(key_path) -> passphrase | nil
-- CARGOSHIP_SSH_PASSPHRASE first; otherwise, on a terminal, asked once per key file (the
-- transport caches the answer for the run).
function M.passphrase_source(env, isatty)
  return function(key_path)
    local v = env("CARGOSHIP_SSH_PASSPHRASE")
    if v and v ~= "" then return v end
    if not (isatty and util.isatty("stdin")) then return nil end
    return (M.ask("Passphrase for " .. key_path .. ": ", { secret = true }))
  end
end

return M

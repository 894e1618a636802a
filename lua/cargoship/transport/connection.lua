-- cargoship.transport.connection: one host's session, of any kind, under the command and transfer protocols.
local command = require "cargoship.transport.command"
local transfer = require "cargoship.transport.transfer"

local M = {}

local Connection = {}
Connection.__index = Connection
for k, f in pairs(command.methods) do Connection[k] = f end
for k, f in pairs(transfer.methods) do Connection[k] = f end
M.Connection = Connection

-- M.new(session, {name, user, run_id, seq}) -> Connection
-- session: an open session of some kind (the interface in transport/init.lua); user: the
-- login user (root needs no sudo); run_id and seq name the run and this connection in every
-- command's tag and in the upload's temporary names.
function M.new(session, o)
  return setmetatable({
    session = session, name = o.name, user = o.user, root = o.user == "root",
    run_id = o.run_id, temps = {},
    tag_base = (tostring(o.run_id):gsub("[^%w.-]", "_")) .. "." .. o.seq, commands = {}, ncommands = 0,
  }, Connection)
end

-- Ends the commands still running (when the session can still carry the kill), then the session.
function Connection:close()
  if self.ncommands > 0 and self.session:state() == "ready" then self:kill_all() end
  self.session:close()
end

return M

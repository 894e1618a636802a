-- Phase "Reload service manager": after units were removed, the service manager reads them again (daemon-reload).
--
-- On each targeted host where an earlier reset phase planned work (the units went with the
-- packages and the manifest's files: phases.lib.reset_node.noted, set by their assess in the
-- plan and in the run alike), so a host with nothing reset has nothing to do. runit and openrc rescan by
-- themselves (their reload is `true`).
local action = require "cargoship.action"
local reset_node = require "cargoship.phases.lib.reset_node"

local M = {
  id = "reload_services",
  title = "Reload service manager",
  reads = { "connection", "os" },
  creates = {},
}

function M.prepare(ctx) return reset_node.targets(ctx) end

function M.assess(ctx, host)
  if not host.os or not reset_node.has_noted(ctx, host) then return {} end
  local cmd = host.os:service("reload", "-")
  if not cmd or cmd == "true" then return {} end
  return { action.run { cmd = cmd, say = "reload the service manager (" .. cmd .. ")" } }
end

return M

-- Phase 29 as `cargoship engine-config-sync` walks it: no install phase comes before it, so it reads what 1-6 found.
--
-- The same phase (cargoship.phases.label_nodes); in apply it reads "controllers" and
-- "workers" (a dry run that would install nodes cannot list them yet: unassessed), here no
-- node is installed by the run.
local phase = require "cargoship.phases.label_nodes"

local M = {}
for k, v in pairs(phase) do M[k] = v end
M.reads = { "connection", "facts", "engine_version" }

return M

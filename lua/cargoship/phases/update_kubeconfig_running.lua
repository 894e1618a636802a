-- Phase 28 as `cargoship kubeconfig` walks it: no install phase comes before it, so it reads what 1-5 found.
--
-- The same phase (cargoship.phases.update_kubeconfig); in apply it reads "controllers" (a
-- dry run that would install the leader cannot read its kubeconfig yet: unassessed), here
-- the cluster runs already or the leader's missing kubeconfig is the error to show.
local phase = require "cargoship.phases.update_kubeconfig"

local M = {}
for k, v in pairs(phase) do M[k] = v end
M.reads = { "connection", "facts", "engine_version" }

return M

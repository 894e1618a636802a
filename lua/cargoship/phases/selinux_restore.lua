-- Phase "Remove the SELinux policy cargoship applied": the state record of phase 11 undone on each targeted host.
--
-- Reset has no package, so the state record (/var/lib/cargoship/selinux/cargoship-state.json)
-- says what to undo (engines.md §5.3): file contexts deleted and relabelled, booleans back to
-- their value before cargoship, modules removed at their priority, then the directory with
-- the CIL files and the record. Every step only warns, so reset can be re-run
-- (cargoship.os.selinux_policy.removal, next to what writes the record). A host without
-- the directory has nothing to do.
local policy = require "cargoship.os.selinux_policy"
local reset_node = require "cargoship.phases.lib.reset_node"

local M = {
  id = "selinux_restore",
  title = "Remove the SELinux policy cargoship applied",
  reads = { "connection", "os" },
  creates = { "selinux_restored" },
}

function M.prepare(ctx) return reset_node.targets(ctx) end

function M.assess(ctx, host)
  local res, err = host:probes(policy.REMOVAL_PROBES)
  if not res then error(err, 0) end
  return reset_node.noted(ctx, host, policy.removal(res))
end

return M

-- Phase "Check the hosts to reset": with --target-hosts, refuse a reset that leaves the rest without a controller.
--
-- Runs after phase "Gathering facts about the distro installed" (which controllers run) and
-- before the lock, reading only: a refusal touches no host (engines.md §4.4). Refused:
--   every running controller targeted while hosts that are not targeted stay (they would
--   be left without a control plane: reset the whole cluster instead);
--   more than one running controller in one run (each removal changes the quorum; one at a
--   time, each run checking what is left).
-- Host names the cluster file does not know are refused earlier, before any connection
-- (cargoship.commands.reset). Without --target-hosts the whole cluster goes: nothing to check.
local M = {
  id = "check_targets",
  title = "Check the hosts to reset",
  dry_run = "read_only",
  reads = { "connection", "facts", "engine_version" },
  creates = {},
}

function M.prepare(ctx) return ctx.hosts end

-- -> nil | the reason the run is refused. Pure: hosts with facts.engine.running, targets a set of names.
function M.refusal(hosts, targets)
  if not targets then return nil end
  local running, targeted, staying = {}, {}, false
  for _, h in ipairs(hosts) do
    local up = h.role == "controller" and h.facts and h.facts.engine and h.facts.engine.running
    if up then running[#running + 1] = h.name end
    if up and targets[h.name] then targeted[#targeted + 1] = h.name end
    if not targets[h.name] then staying = true end
  end
  if #targeted > 1 then
    return string.format("refusing to reset more than one running controller in one run (%s): reset them one "
      .. "at a time, so each run checks the controllers that are left", table.concat(targeted, ", "))
  end
  if #running > 0 and #targeted == #running and staying then
    return string.format("refusing to reset every running controller (%s) while other hosts stay: they would be "
      .. "left without a control plane; reset the whole cluster (no --target-hosts) instead",
      table.concat(running, ", "))
  end
  return nil
end

function M.run(ctx, hosts)
  local why = M.refusal(hosts, ctx.options and ctx.options.target_hosts)
  if why then return nil, why .. "; nothing was changed" end
  return true
end

return M

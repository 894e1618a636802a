-- cargoship.pipeline.policy: the dry-run rules: which phase runs, which is reported, and which host is unassessed.
--
-- spec/apply-phases.txt and docs/dry-run.md: in a dry run a "read_only" phase runs (the
-- hosts refuse its writes), a phase with its own dry-run function runs that, and every
-- other phase is only assessed and reported. A reported phase with pending work on a host
-- has not created there what it `creates`; a later phase that `reads` such state cannot be
-- assessed on that host (its check would read state that does not exist yet): it is
-- unassessed, and its assess is not called. A real run runs every phase.
local contract = require "cargoship.pipeline.contract"

local M = {}

-- What the runner does with a phase: "run" (its work, for real or with writes refused),
-- "own" (its own dry-run function) or "report" (assess and report, run nothing).
function M.mode(dry_run, phase)
  if not dry_run then return "run" end
  local p = contract.policy(phase)
  if p == contract.READ_ONLY then return "run" end
  if p == contract.OWN then return "own" end
  return "report"
end

-- The verdict of a reported phase that did not fail: work on some host, else unassessed
-- somewhere, else nothing to do.
function M.report_verdict(hosts_with_work, any_unassessed)
  if hosts_with_work > 0 then return "would_act" end
  if any_unassessed then return "unassessed" end
  return "nothing_to_do"
end

-- The state reported phases would create, per host, over one dry run.
local Pending = {}
Pending.__index = Pending

function M.pending()
  return setmetatable({ by_state = {} }, Pending)
end

-- -> why phase cannot be assessed on host (a sentence), or nil when it can.
function Pending:reason(phase, host)
  for _, state in ipairs(phase.reads or {}) do
    local by = self.by_state[state] and self.by_state[state][host]
    if by then return string.format("reads %s, which %s would create", state, by) end
  end
  return nil
end

-- After a reported phase (title), given its host entries ({_host =, actions =, reason =}):
-- what it would create does not exist yet where it has work, nor where it could not even
-- be assessed.
function Pending:note(phase, title, entries)
  for _, e in ipairs(entries) do
    if #e.actions > 0 or e.reason then
      for _, state in ipairs(phase.creates or {}) do
        self.by_state[state] = self.by_state[state] or {}
        self.by_state[state][e._host] = self.by_state[state][e._host] or title
      end
    end
  end
end

return M

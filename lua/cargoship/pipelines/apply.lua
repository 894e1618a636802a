-- cargoship.pipelines.apply: the phases of `cargoship apply`, in order (spec/apply-phases.txt).
--
-- Only phases 1-7, 30 and 31 are in this build. Phases 8-29 (preparing hosts, uploads,
-- installing and upgrading engines) are not written yet; the report and `apply --help` say
-- so instead of pretending they ran.
local M = {}

M.name = "apply"

-- Module names, in the order the runner walks them.
M.phases = {
  "cargoship.phases.connect",
  "cargoship.phases.detect_os",
  "cargoship.phases.gather_facts",
  "cargoship.phases.validate_hosts",
  "cargoship.phases.distro_facts",
  "cargoship.phases.removed_nodes",
  "cargoship.phases.acquire_lock",
  "cargoship.phases.release_lock",
  "cargoship.phases.disconnect",
}

-- Each phase's number in spec/apply-phases.txt, so reports and operators speak of the same
-- "phase 30" whatever is missing in between.
M.numbers = { 1, 2, 3, 4, 5, 6, 7, 30, 31 }

M.not_in_build = {
  first = 8,
  last = 29,
  text = "phases 8-29 (preparing hosts, uploads, installing and upgrading engines) are not in this build",
}

return M

-- cargoship.pipelines.apply: the phases of `cargoship apply`, in order (spec/apply-phases.txt).
--
-- Phases 1-13 (up to and including host preparation: environment, sysctl, kernel modules,
-- container-selinux, fapolicyd, SELinux policy, /etc/hosts, firewall), 30 and 31 are in this
-- build. Phases 14-29 (uploads, installing and upgrading engines) are not written yet; the
-- report and `apply --help` say so instead of pretending they ran.
local M = {}

M.name = "apply"

-- {spec number, module}, in the order the runner walks them: the number is each phase's in
-- spec/apply-phases.txt, so reports and operators speak of the same "phase 30" whatever is
-- missing in between, and one list cannot drift the way a parallel array of numbers can.
M.phases = {
  { 1, "cargoship.phases.connect" },
  { 2, "cargoship.phases.detect_os" },
  { 3, "cargoship.phases.gather_facts" },
  { 4, "cargoship.phases.validate_hosts" },
  { 5, "cargoship.phases.distro_facts" },
  { 6, "cargoship.phases.removed_nodes" },
  { 7, "cargoship.phases.acquire_lock" },
  { 8, "cargoship.phases.prepare_hosts" },
  { 9, "cargoship.phases.enterprise_linux" },
  { 10, "cargoship.phases.fapolicyd" },
  { 11, "cargoship.phases.selinux_policy" },
  { 12, "cargoship.phases.update_hosts" },
  { 13, "cargoship.phases.update_firewall" },
  { 30, "cargoship.phases.release_lock" },
  { 31, "cargoship.phases.disconnect" },
}

M.not_in_build = {
  first = 14,
  last = 29,
  text = "phases 14-29 (uploads, installing and upgrading engines) are not in this build",
}

return M

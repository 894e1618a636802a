-- cargoship.pipelines.prepare: the phases of `cargoship prepare` (engines.md §4.3), numbered as that list.
--
-- Hosts readied ahead of a maintenance window: what apply's phases 8-11 write (environment,
-- sysctl, container-selinux, fapolicyd rules with -f, SELinux policy), the kernel modules in a
-- phase of their own behind --enable-kernel-modules; no facts gathered, no engine touched.
-- Its numbers are its own list's (apply has no phase "Enable the requested kernel modules").
local M = {}

M.name = "prepare"
M.command = "prepare"

M.phases = {
  { 1, "cargoship.phases.connect" },
  { 2, "cargoship.phases.detect_os" },
  { 3, "cargoship.phases.acquire_lock" },
  { 4, "cargoship.phases.prepare_env" },
  { 5, "cargoship.phases.enterprise_linux" },
  { 6, "cargoship.phases.fapolicyd" },
  { 7, "cargoship.phases.selinux_policy" },
  { 8, "cargoship.phases.kernel_modules" },
  { 9, "cargoship.phases.release_lock" },
  { 10, "cargoship.phases.disconnect" },
}

M.required = { 1, 2, 3, 9, 10 }
M.required_why = "connect, detect the OS, lock, unlock and disconnect"

return M

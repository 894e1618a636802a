-- cargoship.pipelines.reset: the phases of `cargoship reset`: nodes out, engines and cargoship's state off the hosts.
--
-- engines.md §4.4, with the check of --target-hosts (which needs to know which controllers
-- run) before the lock, so a refused reset writes nothing, and one phase more than the Go
-- tool's: what cargoship itself left on the hosts (engines.md §6 gap 8). Reset loads no
-- package: what to remove is read from the hosts (phase 6's engine, the upload manifest,
-- the SELinux state record). Numbers are this pipeline's own, in walking order.
local M = {}

M.name = "reset"
M.command = "reset"

M.phases = {
  { 1, "cargoship.phases.connect" },
  { 2, "cargoship.phases.detect_os" },
  { 3, "cargoship.phases.gather_facts" },
  { 4, "cargoship.phases.validate_hosts" },
  { 5, "cargoship.phases.distro_facts" },
  { 6, "cargoship.phases.check_targets" },
  { 7, "cargoship.phases.acquire_lock" },
  { 8, "cargoship.phases.reset_worker" },
  { 9, "cargoship.phases.reset_controller" },
  { 10, "cargoship.phases.uninstall_engine" },
  { 11, "cargoship.phases.selinux_restore" },
  { 12, "cargoship.phases.remove_host_state" },
  { 13, "cargoship.phases.reload_services" },
  { 14, "cargoship.phases.release_lock" },
  { 15, "cargoship.phases.disconnect" },
}

M.required = { 1, 2, 3, 4, 5, 6, 7, 14, 15 }
M.required_why = "connect, check, lock, unlock and disconnect"

return M

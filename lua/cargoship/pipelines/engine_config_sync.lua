-- cargoship.pipelines.engine_config_sync: `cargoship engine-config-sync`'s phases (engines.md §4.2), apply's numbers.
--
-- Apply's reads (1-6), its lock (7), the config sync (26-27), kubeconfig and labels when
-- asked (28-29), unlock and disconnect (30-31): no engine version installed or upgraded, no
-- upload. Beyond §4.2's list, phase 6 lists the nodes as in apply: the drain needs each
-- host's node name, the Ready wait its last heartbeat, and a node the cluster file lost
-- stops this run as it stops apply (--allow-unmanaged-nodes).
local M = {}

M.name = "engine-config-sync"
M.command = "engine-config-sync"

M.phases = {
  { 1, "cargoship.phases.connect" },
  { 2, "cargoship.phases.detect_os" },
  { 3, "cargoship.phases.gather_facts" },
  { 4, "cargoship.phases.validate_hosts" },
  { 5, "cargoship.phases.distro_facts" },
  { 6, "cargoship.phases.removed_nodes" },
  { 7, "cargoship.phases.acquire_lock" },
  { 26, "cargoship.phases.sync_controller" },
  { 27, "cargoship.phases.sync_worker" },
  { 28, "cargoship.phases.update_kubeconfig_running" },
  { 29, "cargoship.phases.label_nodes_running" },
  { 30, "cargoship.phases.release_lock" },
  { 31, "cargoship.phases.disconnect" },
}

M.required = { 1, 2, 3, 4, 5, 6, 7, 30, 31 }
M.required_why = "connect, check, lock, unlock and disconnect"

return M

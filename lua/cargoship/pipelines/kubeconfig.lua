-- cargoship.pipelines.kubeconfig: the phases of `cargoship kubeconfig`: find the leader, merge its kubeconfig.
--
-- Phases 1-3 and 5 find the leader (the first controller whose service runs) and its engine,
-- 28 reads its admin kubeconfig and merges it into the operator's file, 31 disconnects.
-- No host lock (the Go tool takes one): nothing here writes on a host, and a lock would be
-- the only write the command made there; the operator's file is written atomically.
local M = {}

M.name = "kubeconfig"
M.command = "kubeconfig"

M.phases = {
  { 1, "cargoship.phases.connect" },
  { 2, "cargoship.phases.detect_os" },
  { 3, "cargoship.phases.gather_facts" },
  { 5, "cargoship.phases.distro_facts" },
  { 28, "cargoship.phases.update_kubeconfig_running" },
  { 31, "cargoship.phases.disconnect" },
}

M.required = { 1, 2, 3, 5, 28, 31 }
M.required_why = "connect, find the leader, read its kubeconfig and disconnect"

return M

-- cargoship.pipelines.apply: the phases of `cargoship apply`, in order (spec/apply-phases.txt).
--
-- All 31: connect and check (1-6), lock (7), prepare the hosts (8-13), upload (14-17),
-- import images, configure, initialize and apply manifests (18-22), upgrade (23-24), install
-- staged files (25), sync drifted engine config (26-27), kubeconfig and labels (28-29),
-- unlock and disconnect (30-31).
local M = {}

M.name = "apply"

-- The command that walks this pipeline: the host lock's record names it ("apply c.yaml"),
-- so `cargoship unlock` can say which run holds a host.
M.command = "apply"

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
  { 14, "cargoship.phases.upload_files" },
  { 15, "cargoship.phases.upload_rpm" },
  { 16, "cargoship.phases.upload_apt" },
  { 17, "cargoship.phases.upload_binaries" },
  { 18, "cargoship.phases.import_images" },
  { 19, "cargoship.phases.configure_engine" },
  { 20, "cargoship.phases.initialize_controller" },
  { 21, "cargoship.phases.apply_manifests" },
  { 22, "cargoship.phases.initialize_worker" },
  { 23, "cargoship.phases.upgrade_controller" },
  { 24, "cargoship.phases.upgrade_worker" },
  { 25, "cargoship.phases.install_staged" },
  { 26, "cargoship.phases.sync_controller" },
  { 27, "cargoship.phases.sync_worker" },
  { 28, "cargoship.phases.update_kubeconfig" },
  { 29, "cargoship.phases.label_nodes" },
  { 30, "cargoship.phases.release_lock" },
  { 31, "cargoship.phases.disconnect" },
}

-- Phases --skip-phases may not leave out: without them the others have no hosts to act on
-- (the runner reads this list; it knows no pipeline's numbers).
M.required = { 1, 2, 3, 4, 5, 6, 7, 30, 31 }
M.required_why = "connect, check, lock, unlock and disconnect"

return M

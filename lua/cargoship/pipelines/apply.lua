-- cargoship.pipelines.apply: the phases of `cargoship apply`, in order (spec/apply-phases.txt).
--
-- Phases 1-7, 18-22 (importing images, configuring the engine, initializing controllers,
-- applying manifests, initializing workers), 30 and 31 are in this build. Phases 8-17
-- (preparing hosts, uploads) and 23-29 (upgrades, config sync, kubeconfig, labels) are not
-- written yet; the report and `apply --help` say so instead of pretending they ran.
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
  { 18, "cargoship.phases.import_images" },
  { 19, "cargoship.phases.configure_engine" },
  { 20, "cargoship.phases.initialize_controller" },
  { 21, "cargoship.phases.apply_manifests" },
  { 22, "cargoship.phases.initialize_worker" },
  { 30, "cargoship.phases.release_lock" },
  { 31, "cargoship.phases.disconnect" },
}

-- One gap is shown (between 7 and 18); its text names the other too.
M.not_in_build = {
  first = 8,
  last = 17,
  text = "phases 8-17 (preparing hosts, uploads) and 23-29 (upgrades, config sync, kubeconfig, labels)"
    .. " are not in this build",
}

return M

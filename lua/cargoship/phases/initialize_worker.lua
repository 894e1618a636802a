-- Phase "Initialize Worker": workers not running yet are installed and started, in per-profile batches.
return require("cargoship.phases.lib.initialize").make {
  id = "initialize_worker", title = "Initialize Worker", role = "worker", order = "batches" }

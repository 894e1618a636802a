-- Phase "Sync Registry Config Worker": workers whose engine config drifted, synced in per-profile batches.
return require("cargoship.phases.lib.sync").make {
  id = "sync_worker", title = "Sync Registry Config Worker", role = "worker", order = "batches" }

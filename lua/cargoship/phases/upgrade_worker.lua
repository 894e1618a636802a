-- Phase "Upgrade Worker": workers at another version than the package's, upgraded in per-profile batches.
return require("cargoship.phases.lib.upgrade").make {
  id = "upgrade_worker", title = "Upgrade Worker", role = "worker", order = "batches" }

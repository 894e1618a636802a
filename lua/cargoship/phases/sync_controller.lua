-- Phase "Sync Registry Config Controller": controllers whose engine config drifted, synced one at a time.
return require("cargoship.phases.lib.sync").make {
  id = "sync_controller", title = "Sync Registry Config Controller", role = "controller", order = "serial" }

-- Phase "Reset Worker": targeted workers drained, their engine stopped, their nodes deleted, in per-profile batches.
return require("cargoship.phases.lib.reset_node").make { id = "reset_worker", title = "Reset Worker", role = "worker" }

-- Phase "Reset Controller": targeted controllers reset one at a time, in reverse config order, the leader last.
return require("cargoship.phases.lib.reset_node").make {
  id = "reset_controller", title = "Reset Controller", role = "controller" }

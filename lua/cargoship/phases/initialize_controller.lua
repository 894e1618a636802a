-- Phase "Initialize Controller": controllers not running are installed and started, the leader first, one at a time.
return require("cargoship.phases.lib.initialize").make {
  id = "initialize_controller", title = "Initialize Controller", role = "controller", order = "serial" }

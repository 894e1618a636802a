-- Phase "Upgrade Controller": controllers at another version than the package's, upgraded one at a time.
return require("cargoship.phases.lib.upgrade").make {
  id = "upgrade_controller", title = "Upgrade Controller", role = "controller", order = "serial" }

-- Phase "Prepare hosts" of `cargoship prepare`: /etc/environment and sysctl, as apply's phase 8 writes them.
return require("cargoship.phases.lib.prepare_parts").make {
  id = "prepare_hosts", title = "Prepare hosts", env = true, kernel = false }

-- cargoship.os.alma: AlmaLinux, an Enterprise Linux rebuild; everything comes from rhel.
local rhel = require "cargoship.os.rhel"

return rhel:extend {
  id = "alma",
  title = "AlmaLinux",
  ids = { "almalinux" },
}

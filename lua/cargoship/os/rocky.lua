-- cargoship.os.rocky: Rocky Linux, an Enterprise Linux rebuild; everything comes from rhel.
local rhel = require "cargoship.os.rhel"

return rhel:extend {
  id = "rocky",
  title = "Rocky Linux",
  ids = { "rocky" },
}

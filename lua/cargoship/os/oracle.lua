-- cargoship.os.oracle: Oracle Linux, an Enterprise Linux rebuild; everything comes from rhel.
local rhel = require "cargoship.os.rhel"

return rhel:extend {
  id = "oracle",
  title = "Oracle Linux",
  ids = { "ol" },
}

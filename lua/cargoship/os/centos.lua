-- cargoship.os.centos: CentOS, an Enterprise Linux rebuild; everything comes from rhel.
local rhel = require "cargoship.os.rhel"

return rhel:extend {
  id = "centos",
  title = "CentOS",
  ids = { "centos" },
}

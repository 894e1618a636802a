-- cargoship.os.opensuse: openSUSE Leap and Tumbleweed; SLES's tooling under another name.
local sles = require "cargoship.os.sles"

return sles:extend {
  id = "opensuse",
  title = "openSUSE",
  ids = { "opensuse-leap", "opensuse-tumbleweed", "opensuse-microos", "opensuse" },
}

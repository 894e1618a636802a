-- cargoship.os.ubuntu: Ubuntu; everything is Debian's, only the name differs so far.
local debian = require "cargoship.os.debian"

return debian:extend {
  id = "ubuntu",
  title = "Ubuntu",
  ids = { "ubuntu" },
}

-- cargoship.cli: command line entry point (placeholder until the CLI lands).
local M = {}
function M.main(_argv)
  io.stdout:write("cargoship ", require("cargoship.build").version, "\n")
  return 0
end
return M

-- cargoship.commands.create: the Go tool's `create`, the same as `cargoship package create`.
local package_cmd = require "cargoship.commands.package"

local M = {}

M.name = "create"
M.summary = "build a distro package (the Go tool's spelling of `package create`)"
M.usage = [[
Usage: cargoship create DIR [-o OUT] [--file-override URL-PREFIX=DIR ...]

The same as `cargoship package create DIR`: see `cargoship package --help`.]]
M.options = package_cmd.options
M.arguments = { { name = "DIR" } }

function M.run(ctx, a)
  return package_cmd.run(ctx, { positional = { "create", a.positional[1] }, options = a.options })
end

return M

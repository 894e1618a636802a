-- cargoship.commands.verify: the Go tool's `verify`, the same as `cargoship package verify`.
local package_cmd = require "cargoship.commands.package"

local M = {}

M.name = "verify"
M.summary = "check a built distro package whole (the Go tool's spelling of `package verify`)"
M.usage = [[
Usage: cargoship verify PKG

The same as `cargoship package verify PKG`: see `cargoship package --help`.]]
M.options = {}
M.arguments = { { name = "PKG" } }

function M.run(ctx, a)
  return package_cmd.run(ctx, { positional = { "verify", a.positional[1] }, options = {} })
end

return M

-- target_distro.lua - fuzz target: the distro.yaml loader (cargoship.package.read on a package directory).
-- Fine: a package, or nil + a message naming the file. A finding: any raise.
local package = require "cargoship.package"

local function run(_, path, scratch)
  local pkg, why = package.read(path)
  if pkg then
    assert(type(pkg.files) == "table" and type(pkg.architectures) == "table", "a package without files")
  else
    assert(type(why) == "string" and why:find(scratch, 1, true), "error names no file: " .. tostring(why))
  end
end

return { file = "distro.yaml", run = run }

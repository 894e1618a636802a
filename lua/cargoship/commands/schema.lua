-- cargoship.commands.schema: prints the JSON Schema of the cluster file, generated from the loader's rules.
local M = {}

M.name = "schema"
M.summary = "print the JSON Schema of the cluster file (generated from the loader's own rules)"
M.usage = [[
Usage: cargoship schema [cluster]

Prints the JSON Schema (draft 2020-12) of the cluster file. It is generated from the
loader's own field lists, enums and constants (lua/cargoship/config/fields.lua and the rule
modules), so an editor or CI validator sees the same fields, required fields, types and
enum values as `cargoship validate`. Rules checked in code only (one connection block,
unique logins and hostnames, PEM and RE2 syntax, DNS names, ${VAR} under --expand-env) are
not in the schema: `cargoship validate` remains the full check.

IN THIS BUILD: `schema distro` (the distro file's schema) is not available (exit 2).]]
M.options = {}
M.arguments = { { name = "KIND", optional = true } }

function M.run(ctx, a)
  local kind = a.positional[1] or "cluster"
  if kind ~= "cluster" then
    ctx.stderr:write("cargoship schema: ", kind == "distro" and "the distro file's schema is not available in "
      .. "this build" or ("unknown kind '" .. kind .. "': expected cluster"), "\n")
    return ctx.exit.usage
  end
  ctx.stdout:write(require("cargoship.json").encode(require("cargoship.config.schema").cluster()), "\n")
  return ctx.exit.ok
end

return M

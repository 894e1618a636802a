-- cargoship.commands.schema: prints the JSON Schema of the cluster or the distro file, from the loaders' own rules.
local args = require "cargoship.cli.args"

local M = {}

M.name = "schema"
M.summary = "print the JSON Schema of the cluster file or the distro file (generated from the loaders' rules)"
M.usage = [[
Usage: cargoship schema [KIND] [-o FILE]

Prints the JSON Schema (draft 2020-12) of one of cargoship's files. KIND is
  cluster   the cluster file (kind: ZarfCluster); the Go tool calls it `inventory`,
            which is accepted too. The default when KIND is left out (the Go tool
            requires a KIND: a script written for it always names one).
  distro    the distro file, distro.yaml (kind: ZarfDistro); the Go tool's `package`,
            accepted too.
The Go tool's third kind, `config` (its own settings file), has no counterpart: cargoship
reads no settings file (exit 2).

Each schema is generated from its loader's own rules, so an editor or a CI validator sees
the same fields, required fields, types, enums and patterns as cargoship: the cluster
file's from lua/cargoship/config/fields.lua and the rule modules, the distro file's from
the rule tree in lua/cargoship/package/schema.lua that also checks every distro.yaml cargoship loads
(`validate`, `package create|inspect|verify`, `apply`). Rules checked in code only are not
in a schema, so cargoship remains the full check: for the cluster file one connection
block, unique logins and hostnames, PEM and RE2 syntax, DNS names, ${VAR} under
--expand-env; for the distro file absolute targets without "..", the owner digit of a
perm, a spec.version that parses, a file entry with `source` or `data`.

With -o FILE the schema is written to FILE instead (and "Wrote FILE" to stderr).]]
M.options = {
  { long = "output", short = "o", value = "FILE", check = args.checks.nonempty,
    help = "write the schema to FILE instead of stdout" },
}
M.arguments = { { name = "KIND", optional = true, choices = { "cluster", "distro", "inventory", "package" } } }

-- kind (ours or the Go tool's) -> the function that builds that schema
local KINDS = {
  cluster = function() return require("cargoship.config.schema").cluster() end,
  distro = function() return require("cargoship.package.schema").json_schema() end,
}
KINDS.inventory, KINDS.package = KINDS.cluster, KINDS.distro

function M.run(ctx, a)
  local kind = a.positional[1] or "cluster"
  local build = KINDS[kind]
  if not build then
    ctx.stderr:write("cargoship schema: ", kind == "config"
      and "the Go tool's `config` schema describes its settings file; cargoship reads no settings file"
      or ("unknown kind '" .. kind .. "': expected cluster (or inventory) or distro (or package)"), "\n")
    return ctx.exit.usage
  end
  local text = require("cargoship.json").encode(build()) .. "\n"
  local out = a.options.output
  if not out then
    ctx.stdout:write(text)
    return ctx.exit.ok
  end
  local f, err = io.open(out, "wb")
  if not f or not f:write(text) or not f:close() then
    ctx.stderr:write("cargoship schema: cannot write ", out, ": ", tostring(err), "\n")
    return ctx.exit.failure
  end
  ctx.stderr:write("Wrote ", out, "\n")
  return ctx.exit.ok
end

return M

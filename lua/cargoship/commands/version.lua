-- cargoship.commands.version: prints the versions of cargoship and of what it runs on.
local M = {}

M.name = "version"
M.aliases = { "v" }   -- the Go tool's
M.summary = "print the versions of cargoship, Lua and libssh2, and where the Lua files are"
M.usage = [[
Usage: cargoship version [-o json]
       cargoship v [-o json]       (the Go tool's short name)
       cargoship --version

Prints "cargoship <version>", the Lua version, the libssh2 version it was linked with,
and where its Lua files were found (the installed share/cargoship, else the source tree).
With -o json (the Go tool's spelling): one object {"version", "lua", "libssh2", "luaFiles"}.]]
M.options = {
  { long = "output", short = "o", value = "FORMAT", check = { "text", "json" }, default = "text",
    help = "text, or json for machines" },
}
M.arguments = {}

-- The ssh family is not in every build yet: without it there is no libssh2 version to
-- report, and printing the one on this machine would be a guess. A module that exists but
-- fails to load is a bug, so only "not found" is quietly skipped.
local function libssh2_version()
  local ok, ssh = pcall(require, "cargoship.ssh")
  if not ok then
    if tostring(ssh):find("module 'cargoship.ssh' not found", 1, true) then return nil end
    error(ssh, 0)
  end
  local v = type(ssh) == "table" and ssh.version
  if type(v) == "function" then v = v() end
  return type(v) == "string" and v or nil
end

function M.run(ctx, a)
  local build = require "cargoship.build"
  local ssh = libssh2_version()
  if a and a.options and a.options.output == "json" then
    ctx.stdout:write(require("cargoship.json").encode({ version = build.version, lua = _VERSION,
      libssh2 = ssh, luaFiles = build.root }), "\n")
    return ctx.exit.ok
  end
  ctx.stdout:write("cargoship ", build.version, "\n")
  ctx.stdout:write(_VERSION, "\n")
  if ssh then ctx.stdout:write("libssh2 ", ssh, "\n") end
  if build.root then ctx.stdout:write("lua files: ", build.root, "\n") end
  return ctx.exit.ok
end

return M

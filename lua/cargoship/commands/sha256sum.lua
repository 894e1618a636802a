-- cargoship.commands.sha256sum: prints the sha256 of local files, as a distro.yaml `shasum` wants it.
local M = {}

M.name = "sha256sum"
M.summary = "print the sha256 of files (for distro.yaml shasum fields)"
M.usage = [[
Usage: cargoship sha256sum FILE [FILE...]

Prints "HASH  FILE" for each FILE, as coreutils sha256sum does. Only local files: nothing
is downloaded (the Go tool also takes URLs; here fetch them first). Exit 1 when a file
cannot be read (the others are still printed).]]
M.options = {}
M.arguments = { { name = "FILE" }, { name = "FILE...", optional = true, rest = true } }

function M.run(ctx, a)
  local util = require "cargoship.util"
  local code = ctx.exit.ok
  for _, path in ipairs(a.positional) do
    local ok, hash, err = pcall(util.sha256_file, path)
    if ok and hash then
      ctx.stdout:write(hash, "  ", path, "\n")
    else
      ctx.stderr:write("cargoship sha256sum: ", tostring(ok and err or hash), "\n")
      code = ctx.exit.failure
    end
  end
  return code
end

return M

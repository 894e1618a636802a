-- cargoship.commands.sha256sum: prints the sha256 of files or http(s) URLs, as a distro.yaml `shasum` wants it.
local M = {}

M.name = "sha256sum"
M.summary = "print the sha256 of files or http(s) URLs (for distro.yaml shasum fields)"
M.usage = [[
Usage: cargoship sha256sum FILE|URL [FILE|URL...]

Prints the sha256 of each local FILE or http:// / https:// URL. With one operand the
output is the bare hash, as the Go tool prints it (so `shasum: $(cargoship sha256sum URL)`
works as it did there); with several, one "HASH  NAME" line each, as coreutils sha256sum
prints them (so `sha256sum -c` can check the list).

A URL is fetched on this machine (hosts are air-gapped; this is the operator's side) by
Debian's curl, and its body is hashed as it arrives, never held whole. Redirects are
followed (to http and https only); the operator's proxy variables and CA store apply.
A status of 400 or more, a host name that does not resolve, a refused connection or a
TLS failure is an error naming the URL (user-info in a URL is never printed). A hash
taken from the network only says what was served this time: prefer a published checksum.

Exit 1 when any operand cannot be hashed (the others are still printed).]]
M.options = {}
M.arguments = { { name = "FILE|URL" }, { name = "FILE|URL...", optional = true, rest = true } }

-- operand -> hex | nil, why
local function hash(ctx, operand)
  local util = require "cargoship.util"
  local fetch = require "cargoship.fetch"
  if fetch.is_url(operand) then
    local h = util.sha256_hasher()
    local ok, why = fetch.stream(operand, function(chunk) h:update(chunk) end)
    if not ok then return nil, why end
    -- as the Go tool warns: what a server sends now is not a published checksum
    ctx.log:warn("%s: a remote source; if a published checksum exists, prefer it to one computed from "
      .. "what the server sent now", fetch.redact(operand))
    return (h:finish())
  end
  local ok, sum, err = pcall(util.sha256_file, operand)
  if ok and sum then return sum end
  return nil, tostring(ok and err or sum)
end

function M.run(ctx, a)
  local code, names = ctx.exit.ok, #a.positional > 1
  for _, operand in ipairs(a.positional) do
    local sum, why = hash(ctx, operand)
    if sum and names then
      ctx.stdout:write(sum, "  ", require("cargoship.fetch").redact(operand), "\n")
    elseif sum then
      ctx.stdout:write(sum, "\n")
    else
      ctx.stderr:write("cargoship sha256sum: ", why, "\n")
      code = ctx.exit.failure
    end
  end
  return code
end

return M

-- cargoship.commands.sha256sum: prints the sha256 of files or http(s) URLs, as a distro.yaml `shasum` wants it.
local M = {}

M.name = "sha256sum"
M.summary = "print the sha256 of files or http(s) URLs (for distro.yaml shasum fields)"
M.usage = [[
Usage: cargoship sha256sum [-e MEMBER] FILE|URL [FILE|URL...]

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

With -e/--extract-path MEMBER, the hash is of that member of the archive (tar, tar.gz,
tar.zst, ...: what a distro.yaml's `extractPath` names); a URL is then downloaded to a
temporary file first, removed afterwards.

Exit 1 when any operand cannot be hashed (the others are still printed).]]
M.options = {
  { long = "extract-path", short = "e", value = "MEMBER", check = require("cargoship.cli.args").checks.nonempty,
    help = "hash the member MEMBER of the archive (tar, tar.gz, tar.zst...) instead of the archive itself" },
}
M.arguments = { { name = "FILE|URL" }, { name = "FILE|URL...", optional = true, rest = true } }

local util = require "cargoship.util"
local fetch = require "cargoship.fetch"

local function temp_dir()
  local p = io.popen("mktemp -d \"${TMPDIR:-/tmp}/cargoship-sum.XXXXXX\"")
  local dir = p and p:read("l")
  if p then p:close() end
  return dir
end

-- A URL's body into the file `path`, written as it arrives -> true | nil, why
local function download(url, path)
  local f, err = io.open(path, "wb")
  if not f then return nil, tostring(err) end
  local ok, why = fetch.stream(url, function(chunk) assert(f:write(chunk)) end)
  f:close()
  return ok, why
end

-- operand -> hex | nil, why
local function hash(ctx, operand, member)
  local remote, dir = fetch.is_url(operand), nil
  local function done(sum, why)
    if dir then os.execute("rm -rf " .. util.quote(dir)) end
    -- as the Go tool warns: what a server sends now is not a published checksum
    if sum and remote then
      ctx.log:warn("%s: a remote source; if a published checksum exists, prefer it to one computed from "
        .. "what the server sent now", fetch.redact(operand))
    end
    return sum, why
  end
  local path = operand
  if member then
    dir = temp_dir()
    if not dir then return done(nil, operand .. ": cannot make a temporary directory") end
  end
  if remote and not member then
    local h = util.sha256_hasher()
    local ok, why = fetch.stream(operand, function(chunk) h:update(chunk) end)
    if not ok then return done(nil, why) end
    return done((h:finish()))
  elseif remote then
    path = dir .. "/download"
    local ok, why = download(operand, path)
    if not ok then return done(nil, why) end
  end
  if member then
    local out = dir .. "/member"
    local ok, err = require("cargoship.archive").extract(path, dir, member, out)
    if not ok then return done(nil, string.format("%s: --extract-path %s: %s", fetch.redact(operand), member,
      tostring(err))) end
    path = out
  end
  local ok, sum, err = pcall(util.sha256_file, path)
  if ok and sum then return done(sum) end
  return done(nil, tostring(ok and err or sum))
end

function M.run(ctx, a)
  local code, names = ctx.exit.ok, #a.positional > 1
  for _, operand in ipairs(a.positional) do
    local sum, why = hash(ctx, operand, a.options.extract_path)
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

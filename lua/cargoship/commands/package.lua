-- cargoship.commands.package: builds (create), describes (inspect) and checks (verify) distro packages.
local args = require "cargoship.cli.args"

local M = {}

M.name = "package"
M.summary = "build a distro package from a distro.yaml directory, or inspect or verify one"
M.usage = [[
Usage: cargoship package create DIR [-o OUT] [--file-override URL-PREFIX=DIR ...]
       cargoship package inspect PKG
       cargoship package verify PKG

create   builds the distro.yaml in DIR (or the distro.yaml file named) into
         cargoship-<name>-<arch>[-<version>].tar.zst (.tar when metadata.uncompressed),
         in the current directory or in OUT (a directory, or the archive's path). It stages
         every spec.config.files and spec.config.os.files entry (files/<i>/, os/<i>/) from a
         local source (relative to DIR) or inline data, checks each shasum, copies the
         values files and schema into values/ and checks the mappings, carries the images
         of spec.config.imageConfig.images, then writes checksums.txt and
         metadata.aggregateChecksum. Nothing is downloaded and no registry is pulled from:
         a URL source is read from the local mirror a --file-override maps its prefix to
         (its shasum is then required), and images come from the local OCI layouts or OCI
         archives listed in spec.config.imageConfig.sources (skopeo copy docker://REF
         oci:DIR:REF makes one), for every architecture the package targets.
         spec.actions.onCreate is refused (its actions would fetch from the network).
inspect  prints what PKG holds: engine and version, architectures, the files of each
         upload phase per selector, the images.
verify   checks PKG whole: checksums.txt against metadata.aggregateChecksum, every listed
         file's sha256, no unlisted file, no link, no path leaving the package, values
         paths inside it, every file entry's target and perm.

PKG is a package archive (.tar.zst, .tar, .tar.gz) or an unpacked package directory;
`cargoship apply` takes either as its distro package, and verifies it the same way
before touching a host.
Exit codes: 0 done, 1 the package is invalid (the message names the file), 2 usage.]]

M.options = {
  { long = "output", short = "o", value = "OUT", check = args.checks.nonempty,
    help = "create: where the archive goes (a directory, or a path ending in .tar.zst or .tar)" },
  { long = "file-override", value = "URL-PREFIX=DIR", check = args.checks.nonempty, multiple = true,
    help = "create: read URL sources starting with URL-PREFIX from the local DIR instead" },
}
M.arguments = { { name = "ACTION", choices = { "create", "inspect", "verify" } }, { name = "DIR|PKG" } }

local function fail(ctx, msg)
  ctx.stderr:write("cargoship package: ", msg, "\n")
  return ctx.exit.failure
end

local function selector_text(s)
  local parts = {}
  if s.package then parts[#parts + 1] = "package " .. s.package end
  parts[#parts + 1] = s.profile and ("role " .. s.profile) or "every role"
  parts[#parts + 1] = #s.arch > 0 and ("arch " .. table.concat(s.arch, ",")) or "every arch"
  return table.concat(parts, ", ")
end

-- The inspect text of a loaded package.
function M.describe(p)
  local out = {}
  local function add(fmt, ...) out[#out + 1] = string.format(fmt, ...) end
  add("name:          %s", tostring(p.name))
  add("version:       %s", tostring(require("cargoship.package").field(p.doc, "metadata", "version") or "-"))
  add("engine:        %s %s", p.type, p.version)
  add("architectures: %s", table.concat(p.architectures, ", "))
  add("checksum:      %s%s", p.aggregate or "(not built)",
    p.coverage and (" (" .. require("cargoship.package").COVERAGE[p.coverage] .. ")") or "")
  local function files(title, list)
    add("%s (%d):", title, #list)
    for _, e in ipairs(list) do
      local size
      if e.staged then size = select(2, require("cargoship.util").sha256_file(e.staged)) end
      add("  %s  %s%s  [%s]%s", e.mode, e.target, size and string.format(" (%d bytes)", size) or "",
        selector_text(e.selector), #e.symlinks > 0 and ("  links " .. table.concat(e.symlinks, " ")) or "")
    end
  end
  files("files, uploaded to every host", p.files)
  local by = { rpm = {}, apt = {}, binary = {}, none = {} }
  for _, e in ipairs(p.os_files) do table.insert(by[e.selector.package] or by.none, e) end
  files("os files for RPM hosts", by.rpm)
  files("os files for APT hosts", by.apt)
  files("os files, binaries", by.binary)
  if #by.none > 0 then files("os files no phase ships (no selector.package)", by.none) end
  add("images (%d)%s:", #p.images, p.image_config.path and (", to " .. p.image_config.path) or "")
  for _, ref in ipairs(p.images) do add("  %s", ref) end
  return table.concat(out, "\n") .. "\n"
end

function M.run(ctx, a)
  local action, path = a.positional[1], a.positional[2]
  local package = require "cargoship.package"
  if action == "create" then
    local out, err = require("cargoship.package.build").create(path, { out = a.options.output,
      file_overrides = a.options.file_override,
      warn = function(msg) ctx.stderr:write("cargoship package: warning: ", msg, "\n") end })
    if not out then return fail(ctx, err) end
    ctx.stdout:write(out, "\n")
    return ctx.exit.ok
  elseif action == "inspect" or action == "verify" then
    local p, err = package.read(path)
    if not p then return fail(ctx, err) end
    if not p.built then
      package.release(p)
      return fail(ctx, path .. ": not a built package (no checksums.txt): build it with cargoship package create")
    end
    if action == "inspect" then ctx.stdout:write(M.describe(p))
    else ctx.stdout:write(path, ": ok (", p.aggregate, ": ", package.COVERAGE[p.coverage], ")\n") end
    package.release(p)
    return ctx.exit.ok
  end
  ctx.stderr:write("cargoship package: unknown action '", tostring(action), "': expected create, inspect or verify\n")
  return ctx.exit.usage
end

return M

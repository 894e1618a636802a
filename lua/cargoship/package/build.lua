-- package.build: `cargoship package create`: a distro.yaml directory's files, images and values into a package.
--
-- create(src, {out = path|dir|nil, file_overrides = {"PREFIX=DIR", ...}, now = epoch}) -> archive path | nil, why
-- Offline by design (hosts and build machines are often air-gapped): a file's source is a
-- local path (relative to the distro.yaml's directory), inline `data`, or a URL that one
-- --file-override maps to a local mirror (its shasum is then required); images come from
-- imageConfig.sources (cargoship.package.images). onCreate actions are not run (refused: they would
-- fetch from the network). Layout and names: distro-package.md §8, §10, §11.
local images = require "cargoship.package.images"
local pkg = require "cargoship.package"
local util = require "cargoship.util"

local M = {}

local field, basename = pkg.field, pkg.basename

local function q(s) return util.quote(s) end
local function sh(cmd) return os.execute(cmd) == true end

local function list_of(v)
  if type(v) == "string" then return { v } end
  return type(v) == "table" and v or {}
end

local function parse_overrides(list)
  local out = {}
  for _, o in ipairs(list or {}) do
    local prefix, dir = o:match("^(.-)=(.+)$")
    if not prefix or prefix == "" then return nil, "--file-override " .. o .. ": expected URL-PREFIX=LOCAL-DIR" end
    out[#out + 1] = { prefix = prefix, dir = dir }
  end
  -- the longest prefix wins, as with mirrors nested under one another
  table.sort(out, function(a, b) return #a.prefix > #b.prefix end)
  return out
end

-- The local file a source names -> path, override | nil, why
local function resolve(src, base, overrides, at)
  if type(src) ~= "string" or src == "" then return nil, nil, at .. ".source: missing" end
  if src:match("^%a[%w+.-]*://") then
    for _, o in ipairs(overrides) do
      if src:sub(1, #o.prefix) == o.prefix then
        return o.dir .. "/" .. src:sub(#o.prefix + 1):gsub("^/+", ""), o
      end
    end
    return nil, nil, string.format("%s.source: %s is a URL and nothing is downloaded here: give a local mirror "
      .. "with --file-override %s=DIR", at, src, src:match("^(.*/)") or src)
  end
  return src:sub(1, 1) == "/" and src or (base .. "/" .. src)
end

-- Stages one file entry into stage/<which>/<i>/<name> -> {rel, sha256, source} | nil, why
local function stage_entry(f, i, which, base, stage, overrides, work)
  local key = which == "os" and "spec.config.os.files" or "spec.config.files"
  local at = string.format("%s[%d]", key, i - 1)
  if type(f) ~= "table" then return nil, at .. ": must be a mapping" end
  if not pkg.safe_target(f.target) then
    return nil, string.format("%s.target: %s must be an absolute path without '..'", at, tostring(f.target))
  end
  if f.perm ~= nil then
    local ok, why = pkg.perm(f.perm)
    if not ok then return nil, at .. ".perm: " .. why end
  end
  -- the Go tool's own example packages list an SELinux .rpm as a binary: copied, never installed, its
  -- %post never run (distro-package.md §14.4); refused here rather than shipped broken
  local sel = type(f.selector) == "table" and f.selector or {}
  local ext = tostring(f.target):match("%.(%a+)$")
  if sel.package == "binary" and (ext == "rpm" or ext == "deb") then
    return nil, string.format("%s: a .%s under selector.package binary would only be copied, never installed "
      .. "(its scriptlets would not run): list it under package: %s", at, ext, ext == "rpm" and "rpm" or "apt")
  end
  local one = which == "os" and { os = { files = { f } } } or { files = { f } }
  local entries = pkg.entries_of({ spec = { config = one } }, nil, which)
  if not entries then return nil, at .. ": invalid entry" end
  local name = basename(entries[1].target)
  local rel = string.format("%s/%d/%s", which, i - 1, name)
  local dst = stage .. "/" .. rel
  sh("mkdir -p " .. q(stage .. "/" .. which .. "/" .. (i - 1)))
  local from, override
  if f.data ~= nil then
    local fh = assert(io.open(dst, "wb"))
    fh:write(tostring(f.data))
    fh:close()
  else
    local p, o, why = resolve(f.source, base, overrides, at)
    if not p then return nil, why end
    override = o
    if o and not f.shasum then
      return nil, at .. ".shasum: required when --file-override redirects the source (" .. f.source .. ")"
    end
    if not io.open(p, "rb") then return nil, string.format("%s.source: %s: no such file", at, p) end
    from = p
    if f.extractPath then
      local ok, err = require("cargoship.archive").extract(p, work, f.extractPath, dst)
      if not ok then return nil, string.format("%s.extractPath: %s", at, err) end
    elseif not sh("cp -- " .. q(p) .. " " .. q(dst)) then
      return nil, string.format("%s.source: cannot copy %s", at, p)
    end
  end
  local sum = util.sha256_file(dst)
  if f.shasum and tostring(f.shasum):lower() ~= sum then
    return nil, string.format("%s: %s has sha256 %s, shasum says %s", at, from or "data", sum, tostring(f.shasum))
  end
  return { rel = rel, sha256 = sum, declared = f.source, resolved = from, override = override, shasum = sum }
end

-- Values files merged key by key, later wins (§10).
local function merge(a, b)
  if type(a) ~= "table" or type(b) ~= "table" or #b > 0 then return b end
  local out = {}
  for k, v in pairs(a) do out[k] = v end
  for k, v in pairs(b) do out[k] = merge(out[k], v) end
  return out
end

local function dotted(t, path)
  for part in path:gmatch("[^.]+") do
    if type(t) ~= "table" then return nil end
    t = t[part]
  end
  return t
end

local function stage_values(doc, base, stage, warn)
  local values = field(doc, "spec", "values")
  if type(values) ~= "table" then return true end
  local merged, new_files = {}, {}
  for i, p in ipairs(list_of(values.files)) do
    if type(p) ~= "string" or p:match("^%a[%w+.-]*://") then
      return nil, string.format("spec.values.files[%d]: %s: only local values files are read here", i - 1, tostring(p))
    end
    local from = p:sub(1, 1) == "/" and p or (base .. "/" .. p)
    local text = pkg.read_bytes(from)
    if not text then return nil, string.format("spec.values.files[%d]: %s: no such file", i - 1, p) end
    local docs, err = require("cargoship.yaml").load(text)
    if not docs then return nil, string.format("spec.values.files[%d]: %s: %s", i - 1, p, tostring(err)) end
    merged = merge(merged, docs[1] or {})
    local rel = string.format("values/%d-%s", i - 1, basename(p))
    sh("mkdir -p " .. q(stage .. "/values"))
    sh("cp -- " .. q(from) .. " " .. q(stage .. "/" .. rel))
    new_files[#new_files + 1] = rel
  end
  if values.files then values.files = new_files end
  if values.schema then
    local from = values.schema:sub(1, 1) == "/" and values.schema or (base .. "/" .. values.schema)
    if not io.open(from, "rb") then return nil, "spec.values.schema: " .. values.schema .. ": no such file" end
    local rel = "values/schema-" .. basename(values.schema)
    sh("mkdir -p " .. q(stage .. "/values") .. " && cp -- " .. q(from) .. " " .. q(stage .. "/" .. rel))
    values.schema = rel
  end
  for i, m in ipairs(list_of(values.mappings)) do
    local at = string.format("spec.values.mappings[%d]", i - 1)
    if type(m) ~= "table" or type(m.source) ~= "string" or type(m.target) ~= "string"
      or m.source:sub(1, 1) ~= "." or m.target:sub(1, 1) ~= "." then
      return nil, at .. ": expected {source: .dotted.path, target: .dotted.path}"
    end
    -- an unresolved source keeps the engine's default at apply (§10): worth a warning here
    if dotted(merged, m.source) == nil then warn(at .. ": " .. m.source .. " is not set by the values files") end
  end
  return true
end

local function sorted_files(stage)
  local p = assert(io.popen("cd " .. q(stage) .. " && find . -type f -printf '%P\\n' | LC_ALL=C sort"))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  return out
end

-- What the archive is written as: a zstd-compressed tar, or a plain one when metadata.uncompressed.
local function ext_of(doc)
  return field(doc, "metadata", "uncompressed") and ".tar" or ".tar.zst"
end

function M.artifact_name(doc, arches)
  local name = field(doc, "metadata", "name")
  local arch = #arches == 1 and arches[1] or "multi"
  local version = field(doc, "metadata", "version")
  return string.format("cargoship-%s-%s%s%s", name, arch, version and ("-" .. version) or "", ext_of(doc))
end

-- -o names a directory (the artifact's name is added) or an archive path: where it goes must be a
-- directory that exists, checked before any work (io.open of "dir/." opens only a directory), and
-- an archive path must end as what is written (ext: .tar.zst, or .tar when metadata.uncompressed).
local function out_problem(out, ext)
  if not out then return nil end
  local archive = pkg.is_archive(out)
  if archive and out:sub(-#ext) ~= ext then
    return string.format("-o %s: the archive is written as %s (%s), so its name must end in %s", out,
      ext == ".tar" and "an uncompressed tar" or "a zstd-compressed tar",
      ext == ".tar" and "metadata.uncompressed" or "the default", ext)
  end
  local dir = archive and (out:match("^(.*)/[^/]*$") or ".") or out
  if dir == "" then dir = "/" end
  local f = io.open(dir .. "/.", "r")
  if f then f:close() return nil end
  return string.format("%s: not an existing directory (-o names a directory, or an archive path ending in %s)",
    dir, ext)
end

function M.create(src, opts)
  opts = opts or {}
  local warn = opts.warn or function() end
  local base = src:gsub("/+$", "")
  local yaml_path = base .. "/distro.yaml"
  if base:match("%.ya?ml$") then yaml_path, base = base, (base:match("^(.*)/[^/]*$") or ".") end
  local yaml = require "cargoship.yaml"
  local docs, err = yaml.load_file(yaml_path)
  if not docs then return nil, tostring(err) end
  local doc = pkg.pick(docs)
  if not doc then return nil, yaml_path .. ": no document with kind: ZarfDistro" end
  local bad = pkg.check(docs, yaml_path)
  if bad then return nil, bad end
  local version = field(doc, "metadata", "version")
  if field(doc, "spec", "actions", "onCreate") then
    return nil, yaml_path .. ": spec.actions.onCreate: build actions are not run by this build (they fetch from "
      .. "the network); stage their results as local files instead"
  end
  local overrides, oerr = parse_overrides(opts.file_overrides)
  if not overrides then return nil, oerr end
  local out_err = out_problem(opts.out, ext_of(doc))
  if out_err then return nil, out_err end
  local arches = field(doc, "metadata", "architectures") or { field(doc, "metadata", "architecture") or "amd64" }
  local stage = assert(io.popen("mktemp -d \"${TMPDIR:-/tmp}/cargoship-build.XXXXXX\"")):read("l")
  local work = stage .. ".work"
  sh("mkdir -p " .. q(work))
  local function fail(why)
    sh("rm -rf " .. q(stage) .. " " .. q(work))
    return nil, yaml_path .. ": " .. why
  end
  local sources = {}
  for _, which in ipairs({ "files", "os" }) do
    for i, f in ipairs(list_of(pkg.file_list(doc, which))) do
      local r, why = stage_entry(f, i, which, base, stage, overrides, work)
      if not r then return fail(why) end
      if r.override then
        sources[#sources + 1] = { path = r.rel, declared = r.declared, resolved = r.resolved,
          override = r.override.prefix, shasum = r.shasum }
      end
    end
  end
  local ok, verr = stage_values(doc, base, stage, warn)
  if not ok then return fail(verr) end
  local ic = field(doc, "spec", "config", "imageConfig")
  if type(ic) == "table" and type(ic.images) == "table" and #ic.images > 0 then
    local srcs = list_of(ic.sources)
    local found, why = images.copy(srcs, ic.images, arches, stage .. "/images", base)
    if not found then return fail(why) end
    ic.sources = nil -- build-machine paths mean nothing inside the package
  end
  doc.build = { architectures = arches, version = version,
    timestamp = os.date("!%Y-%m-%dT%H:%M:%SZ", opts.now or os.time()),
    fileOverrides = #overrides > 0 and (function()
      local m = {}
      for _, o in ipairs(overrides) do m[o.prefix] = o.dir end
      return m
    end)() or nil,
    fileSources = #sources > 0 and sources or nil }
  if #arches == 1 then doc.build.architecture = arches[1] end
  -- distro.yaml is written with a placeholder aggregate, hashed into the integrity record,
  -- which checksums.txt lists: the aggregate then covers distro.yaml (all but its own value),
  -- the architectures and the engine (pkg.INTEGRITY, docs/packages.md)
  doc.metadata.aggregateChecksum = pkg.PLACEHOLDER
  local text = yaml.dump(doc)
  local _, n = text:gsub(pkg.PLACEHOLDER, "")
  if n ~= 1 then return fail("metadata.aggregateChecksum: the placeholder appears " .. n .. " times in distro.yaml") end
  local fh = assert(io.open(stage .. "/" .. pkg.INTEGRITY, "wb"))
  fh:write(pkg.integrity_record(doc, util.sha256(text)))
  fh:close()
  -- checksums.txt over every staged file (the record included); the aggregate over its exact bytes
  local lines = {}
  for _, rel in ipairs(sorted_files(stage)) do
    lines[#lines + 1] = util.sha256_file(stage .. "/" .. rel) .. " " .. rel .. "\n"
  end
  local sums = table.concat(lines)
  fh = assert(io.open(stage .. "/checksums.txt", "wb"))
  fh:write(sums)
  fh:close()
  doc.metadata.aggregateChecksum = util.sha256(sums)
  fh = assert(io.open(stage .. "/distro.yaml", "wb"))
  fh:write((text:gsub(pkg.PLACEHOLDER, doc.metadata.aggregateChecksum)))
  fh:close()
  -- the archive: distro.yaml and checksums.txt first, then the listed files
  local out = opts.out
  local artifact = M.artifact_name(doc, arches)
  if not out then out = artifact
  elseif not pkg.is_archive(out) then out = out:gsub("/+$", "") .. "/" .. artifact end
  local entries = { { name = "distro.yaml", path = stage .. "/distro.yaml" },
                    { name = "checksums.txt", path = stage .. "/checksums.txt" } }
  local dirs = {}
  for _, l in ipairs(lines) do
    local rel = l:match("^%x+ (.-)\n$")
    local d = ""
    for part in rel:gmatch("([^/]+)/") do
      d = d .. part .. "/"
      if not dirs[d] then dirs[d] = true entries[#entries + 1] = { name = d, dir = true } end
    end
    local mode = tonumber("644", 8)
    entries[#entries + 1] = { name = rel, path = stage .. "/" .. rel, mode = mode }
  end
  -- executables and directories 0755, the rest 0644 (§8)
  for _, e in ipairs(pkg.entries_of(doc, nil, "files") or {}) do
    if e.executable then for _, x in ipairs(entries) do if x.name == e.rel then x.mode = tonumber("755", 8) end end end
  end
  for _, e in ipairs(pkg.entries_of(doc, nil, "os") or {}) do
    if e.executable then for _, x in ipairs(entries) do if x.name == e.rel then x.mode = tonumber("755", 8) end end end
  end
  local tmp = out .. ".cargoship-" .. util.getpid() .. ".tmp"
  local filter = field(doc, "metadata", "uncompressed") and "none" or "zstd"
  local aok, aerr = require("cargoship.archive").write(tmp, entries, { filter = filter })
  sh("rm -rf " .. q(stage) .. " " .. q(work))
  if not aok then os.remove(tmp) return nil, tostring(aerr) end
  local rok, rerr = os.rename(tmp, out)
  if not rok then os.remove(tmp) return nil, tostring(rerr) end
  return out
end

return M

-- cargoship.package: loads a distro package (archive, directory or bare distro.yaml), verifies it, lists its files.
--
-- read(path) -> pkg | nil, why
--   path: a built package archive (.tar.zst, .tar, .tar.gz: unpacked to a temp directory),
--   an unpacked package directory, or a distro.yaml (or its directory) not built yet.
--   A built package (checksums.txt or metadata.aggregateChecksum present) is verified
--   whole (M.verify) before anything else reads it; an unbuilt distro.yaml gives the engine
--   facts only, and the upload phases refuse it when it lists files (pkg.built = false).
--   pkg = {type, version, architectures, name, file, engine,        -- as before
--          built, dir, temp (dir is ours to remove), doc (the ZarfDistro document),
--          aggregate, coverage ("full" | "files": M.verify; nil unbuilt),
--          files = {entry..}, os_files = {entry..}, images = {ref..},
--          image_config = {path, compression}, values_files = {..},
--          manifests = {path..} (spec.config.manifests: applied from the leader where the engine does not)}
--   entry = {list = "files"|"os", index, name, staged (local path), target (full remote path),
--            mode "0644", owner, group, symlinks = {..}, executable, selector = {package,
--            profile, arch = {..}}}
-- verify(dir, doc?) -> true, coverage | nil, why: every failure names the file (distro-package.md §11,
--   with §14.6 fixed: a listed file that is missing is an error; and distro.yaml, the engine and
--   the architectures covered through M.INTEGRITY when the package has one).
-- Architectures: build.architectures (written by create, authoritative), else
-- build.architecture, else metadata.architectures, else metadata.architecture, else amd64.
-- os: spec.config.os checked and normalized (cargoship.package.os_config).
local errors = require "cargoship.config.errors"
local schema = require "cargoship.package.schema"
local util = require "cargoship.util"
local yaml = require "cargoship.yaml"

local M = {}

M.ARCHIVE_SUFFIXES = { ".tar.zst", ".tar.gz", ".tgz", ".tar" }

local function list_of(v)
  if type(v) == "string" and v ~= "" then return { v } end
  if type(v) == "table" and #v > 0 then
    local out = {}
    for i, a in ipairs(v) do
      if type(a) ~= "string" then return nil end
      out[i] = a
    end
    return out
  end
  return nil
end

-- The ZarfDistro document of a file, and its index (where its unplaced errors go).
local function pick(docs)
  for i = 1, docs.n or #docs do
    local d = docs[i]
    if type(d) == "table" and d.kind == schema.KIND then return d, i end
  end
  return nil
end
M.pick = pick

-- Every mistake of the ZarfDistro document of docs (loaded from file), by the rules of
-- cargoship.package.schema -> nil | the errors as text, one "file:line:col: path: problem" a line.
function M.check(docs, file)
  local d, i = pick(docs)
  if not d then return file .. ": no document with kind: ZarfDistro" end
  local list = schema.check(d, file, { yaml.where(docs, i) })
  return list and errors.format(list) or nil
end

-- doc.a.b... -> the value, or nil when a step is missing or not a mapping. A YAML null (`key:`
-- with no value) reads as absent, as the schema allows it: every reader of the file goes through here.
local function field(t, ...)
  for _, k in ipairs({ ... }) do
    if type(t) ~= "table" then return nil end
    t = t[k]
  end
  if yaml.is_null(t) then return nil end
  return t
end
M.field = field

local function read_bytes(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s = f:read("a")
  f:close()
  return s
end
M.read_bytes = read_bytes

local function sh_lines(cmd)
  local p = assert(io.popen(cmd))
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  local ok = p:close()
  return out, ok
end

function M.is_archive(path)
  for _, s in ipairs(M.ARCHIVE_SUFFIXES) do
    if path:sub(-#s) == s then return true end
  end
  return false
end

-- A path inside the package: relative, no "..", no empty or "." component.
function M.safe_relative(p)
  if type(p) ~= "string" or p == "" or p:sub(1, 1) == "/" or p:find("\\", 1, true) then return false end
  for part in (p .. "/"):gmatch("([^/]*)/") do
    if part == ".." or part == "" or part == "." then return false end
  end
  return true
end

-- A target on the host, and a file's perm ("0644" | nil, why): cargoship.package.schema's rules.
M.safe_target = schema.safe_target
M.perm = schema.perm

local function basename(p) return (p:gsub("/+$", "")):match("([^/]*)$") end
M.basename = basename

-- The raw list of config.files (which "files") or config.os.files (which "os"), nil when absent.
-- Not `which == "os" and A or B`: an absent os.files would read as config.files.
local function file_list(doc, which)
  if which == "os" then return field(doc, "spec", "config", "os", "files") end
  return field(doc, "spec", "config", "files")
end
M.file_list = file_list

-- The normalised file entries of a list (config.files or config.os.files) -> entries | nil, why
local function entries_of(doc, dir, which)
  local key = which == "os" and "spec.config.os.files" or "spec.config.files"
  local list = file_list(doc, which)
  local out = {}
  if list == nil then return out end
  if type(list) ~= "table" then return nil, key .. ": must be a list" end
  for i, f in ipairs(list) do
    local at = string.format("%s[%d]", key, i - 1)
    if type(f) ~= "table" then return nil, at .. ": must be a mapping" end
    if not M.safe_target(f.target) then
      return nil, string.format("%s.target: %s must be an absolute path without '..'", at, tostring(f.target))
    end
    local mode, why = M.perm(f.perm)
    if f.perm ~= nil and not mode then return nil, at .. ".perm: " .. why end
    local sel = type(f.selector) == "table" and f.selector or {}
    local arch = list_of(sel.arch) or {}
    local target = f.target
    local src_name = f.source and basename(tostring(f.source)) or nil
    if f.isDirectory then target = target:gsub("/+$", "") .. "/" .. (f.extractPath and basename(f.extractPath)
      or src_name or ("file" .. (i - 1))) end
    local symlinks = {}
    for j, l in ipairs(type(f.symlinks) == "table" and f.symlinks or {}) do
      if not M.safe_target(l) then
        return nil, string.format("%s.symlinks[%d]: %s must be an absolute path without '..'", at, j - 1, tostring(l))
      end
      symlinks[#symlinks + 1] = l
    end
    out[#out + 1] = {
      list = which, index = i - 1, name = f.name, target = target,
      staged = dir and string.format("%s/%s/%d/%s", dir, which, i - 1, basename(target)) or nil,
      rel = string.format("%s/%d/%s", which, i - 1, basename(target)),
      mode = mode or (f.executable and "0755" or "0644"), owner = f.user, group = f.group,
      symlinks = symlinks, executable = f.executable and true or false,
      selector = { package = sel.package, profile = sel.profile, arch = arch },
    }
  end
  return out
end
M.entries_of = entries_of

-- The integrity record: a file cargoship's create adds and lists in checksums.txt, so that
-- metadata.aggregateChecksum (the sha256 of checksums.txt) covers the engine, the
-- architectures and every byte of distro.yaml except the aggregate's own value, which
-- distro.yaml carries as PLACEHOLDER when it is hashed. A Go-tool package has no record:
-- its distro.yaml is covered by nothing (docs/packages.md).
M.INTEGRITY = "cargoship-integrity.txt"
M.PLACEHOLDER = string.rep("0", 64)
local RECORD_HEAD = "cargoship package integrity 1"

-- The architectures a package targets (see the top of this file).
function M.architectures(doc)
  return list_of(field(doc, "build", "architectures")) or list_of(field(doc, "build", "architecture"))
    or list_of(field(doc, "metadata", "architectures")) or list_of(field(doc, "metadata", "architecture"))
    or { "amd64" }
end

local function claims(doc)
  return { type = tostring(field(doc, "spec", "type")), version = tostring(field(doc, "spec", "version")),
           architectures = table.concat(M.architectures(doc), " ") }
end

-- The record's text for doc, whose distro.yaml (aggregate = PLACEHOLDER) hashes to digest.
function M.integrity_record(doc, digest)
  local c = claims(doc)
  return string.format("%s\ntype %s\nversion %s\narchitectures %s\ndistro.yaml %s\n",
    RECORD_HEAD, c.type, c.version, c.architectures, digest)
end

-- distro.yaml's bytes, the engine and the architectures against the record -> true | nil, why
local function check_record(dir, doc, aggregate)
  local rec = read_bytes(dir .. "/" .. M.INTEGRITY) or ""
  local head, rest = rec:match("^([^\n]*)\n(.*)$")
  if head ~= RECORD_HEAD then
    return nil, string.format("%s: not a cargoship integrity record (first line %q)", M.INTEGRITY, head or rec)
  end
  local got = {}
  for k, v in (rest or ""):gmatch("([^ \n]+) ([^\n]*)\n") do got[k] = v end
  local text = read_bytes(dir .. "/distro.yaml") or ""
  local blanked, n = text:gsub(aggregate, M.PLACEHOLDER)
  if n ~= 1 then
    return nil, string.format("distro.yaml: metadata.aggregateChecksum %s appears %d times in the bytes (1 expected)",
      aggregate, n)
  end
  local digest = util.sha256(blanked)
  if got["distro.yaml"] ~= digest then
    return nil, string.format("distro.yaml: sha256 %s (aggregate blanked), %s says %s: distro.yaml was altered "
      .. "after the build", digest, M.INTEGRITY, tostring(got["distro.yaml"]))
  end
  local c = claims(doc)
  for _, k in ipairs({ "type", "version", "architectures" }) do
    if got[k] ~= c[k] then
      return nil, string.format("%s: %s %q, distro.yaml says %q", M.INTEGRITY, k, tostring(got[k]), c[k])
    end
  end
  return true
end

-- What each coverage means, in words (package verify and inspect print it).
M.COVERAGE = {
  full = "every file, distro.yaml, the engine and the architectures covered",
  files = "the files covered; distro.yaml, the engine and the architectures are not (a Go-tool package)",
}

-- verify(dir, doc) -> true, coverage | nil, why
--   coverage: "full" (a cargoship package: every byte, the engine and the architectures under
--   the aggregate) or "files" (a Go-tool package: the files only, distro.yaml uncovered).
function M.verify(dir, doc)
  if not doc then
    local docs, err = require("cargoship.yaml").load_file(dir .. "/distro.yaml")
    if not docs then return nil, tostring(err) end
    doc = pick(docs)
    if not doc then return nil, dir .. "/distro.yaml: no document with kind: ZarfDistro" end
  end
  local sums_path = dir .. "/checksums.txt"
  local text = read_bytes(sums_path)
  if not text then return nil, "checksums.txt: missing from the package" end
  local want = field(doc, "metadata", "aggregateChecksum")
  if type(want) ~= "string" then return nil, "distro.yaml: metadata.aggregateChecksum is missing" end
  local agg = util.sha256(text)
  if agg ~= want then
    return nil, string.format("checksums.txt: sha256 %s is not metadata.aggregateChecksum %s (distro.yaml): "
      .. "one of the two was altered", agg, want)
  end
  local listed, n = {}, 0
  for line in text:gmatch("([^\n]*)\n") do
    n = n + 1
    local sum, rel = line:match("^(%x+) (.+)$")
    if not sum or #sum ~= 64 then return nil, string.format("checksums.txt:%d: not \"<sha256> <path>\"", n) end
    if not M.safe_relative(rel) then
      return nil, string.format("%s: path leaves the package (checksums.txt:%d)", rel, n)
    end
    listed[rel] = sum:lower()
  end
  if text ~= "" and text:sub(-1) ~= "\n" then return nil, "checksums.txt: the last line has no newline" end
  local allowed = { ["distro.yaml"] = true, ["checksums.txt"] = true }
  for _, p in ipairs(list_of(field(doc, "build", "provenanceFiles")) or {}) do allowed[p] = true end
  -- every file of the tree: listed, or one of the few that are not; never a link
  local tree = sh_lines("cd " .. util.quote(dir) .. " && find . -mindepth 1 -printf '%y %P\\n' | LC_ALL=C sort -k2")
  local present = {}
  for _, l in ipairs(tree) do
    local kind, rel = l:match("^(%a) (.*)$")
    if kind == "l" then return nil, rel .. ": a symbolic link (a package holds files and directories only)" end
    if kind == "f" then
      present[rel] = true
      if not listed[rel] and not allowed[rel] then return nil, rel .. ": not listed in checksums.txt" end
    elseif kind ~= "d" then
      return nil, rel .. ": not a regular file or directory"
    end
  end
  local names = {}
  for rel in pairs(listed) do names[#names + 1] = rel end
  table.sort(names)
  for _, rel in ipairs(names) do
    if not present[rel] then return nil, rel .. ": listed in checksums.txt but missing from the package" end
    local got = util.sha256_file(dir .. "/" .. rel)
    if got ~= listed[rel] then
      return nil, string.format("%s: sha256 %s, checksums.txt says %s", rel, tostring(got), listed[rel])
    end
  end
  -- values paths stay inside the package
  for i, p in ipairs(field(doc, "spec", "values", "files") or {}) do
    if not M.safe_relative(p) then
      return nil, string.format("spec.values.files[%d]: %s leaves the package (must be relative, without '..')",
        i - 1, tostring(p))
    end
    if not present[p] then return nil, string.format("spec.values.files[%d]: %s is not in the package", i - 1, p) end
  end
  local values_schema = field(doc, "spec", "values", "schema")
  if values_schema ~= nil and not M.safe_relative(values_schema) then
    return nil, "spec.values.schema: " .. tostring(values_schema)
      .. " leaves the package (must be relative, without '..')"
  end
  -- every file entry's staged copy is there
  for _, which in ipairs({ "files", "os" }) do
    local list, why = entries_of(doc, dir, which)
    if not list then return nil, why end
    for _, e in ipairs(list) do
      if not present[e.rel] then return nil, e.rel .. ": staged file of " .. (which == "os" and "spec.config.os.files"
        or "spec.config.files") .. "[" .. e.index .. "] is missing from the package" end
    end
  end
  -- distro.yaml itself, the engine and the architectures: through the record, when there is one
  if not listed[M.INTEGRITY] then return true, "files" end
  local ok, why = check_record(dir, doc, want)
  if not ok then return nil, why end
  return true, "full"
end

-- What unpacking one package may write (runtime/archive.c limits_t): a member's size, the
-- total, the number of members, and unpacked:compressed past ratio_after bytes. A real
-- package (binaries, debs, image layers) stays far inside; a hostile one is named and stopped.
M.LIMITS = { max_member = 16 << 30, max_total = 64 << 30, max_entries = 1000000,
             max_ratio = 100, ratio_after = 64 << 20 }

-- Unpacks an archive into a fresh temp directory (under parent, default $TMPDIR or /tmp)
-- -> dir | nil, why; on a refusal the directory and all it got are removed.
function M.unpack(path, parent)
  local archive = require "cargoship.archive"
  local dir = sh_lines("mktemp -d " .. (parent and util.quote(parent .. "/cargoship-pkg.XXXXXX")
    or "\"${TMPDIR:-/tmp}/cargoship-pkg.XXXXXX\""))[1]
  if not dir then return nil, "cannot make a temp directory under " .. (parent or os.getenv("TMPDIR") or "/tmp") end
  local ok, err = archive.extract(path, dir, M.LIMITS)
  if not ok then
    os.execute("rm -rf " .. util.quote(dir))
    return nil, path .. ": " .. tostring(err)
  end
  return dir
end

-- Removes a package's temp directory (an unpacked archive); never the operator's directory.
function M.release(pkg)
  if pkg and pkg.temp and pkg.dir then os.execute("rm -rf " .. util.quote(pkg.dir)) end
end

-- read(path[, {tmpdir = parent of the unpacked archive}])
function M.read(path, opts)
  local dir, temp, yaml_path
  if M.is_archive(path) then
    local d, err = M.unpack(path, opts and opts.tmpdir)
    if not d then return nil, err end
    dir, temp, yaml_path = d, true, d .. "/distro.yaml"
  else
    yaml_path = path
  end
  local docs, err = yaml.load_file(yaml_path)
  if not docs and tostring(err):find("directory", 1, true) then
    yaml_path = yaml_path:gsub("/+$", "") .. "/distro.yaml"
    docs, err = yaml.load_file(yaml_path)
  end
  local function fail(why)
    if temp then os.execute("rm -rf " .. util.quote(dir)) end
    return nil, why
  end
  if not docs then return fail(tostring(err)) end
  dir = dir or (yaml_path:match("^(.*)/[^/]*$") or ".")
  local d = pick(docs)
  if not d then return fail(yaml_path .. ": no document with kind: ZarfDistro") end
  -- the whole document by the rules `cargoship schema distro` publishes, every mistake located
  local mistakes = M.check(docs, yaml_path)
  if mistakes then return fail(mistakes) end
  local t, v = field(d, "spec", "type"), field(d, "spec", "version")
  local sums = io.open(dir .. "/checksums.txt", "rb")
  if sums then sums:close() end
  local built = field(d, "metadata", "aggregateChecksum") ~= nil or sums ~= nil
  local coverage
  if built then
    local ok, why = M.verify(dir, d)
    if not ok then return fail((temp and path or dir) .. ": " .. why) end
    coverage = why
  end
  local files, ferr = entries_of(d, built and dir or nil, "files")
  if not files then return fail(yaml_path .. ": " .. ferr) end
  local os_files, oerr = entries_of(d, built and dir or nil, "os")
  if not os_files then return fail(yaml_path .. ": " .. oerr) end
  local arches = M.architectures(d)
  local section = field(d, "spec", "config", "engine")
  local ic = field(d, "spec", "config", "imageConfig") or {}
  -- spec.config.os: checked here, so a bad section stops apply before any host is touched
  local os_section, os_err = require("cargoship.package.os_config").normalize(field(d, "spec", "config", "os"),
    yaml_path:match("^(.*)/[^/]*$") or ".")
  if not os_section then return fail(yaml_path .. ": " .. os_err) end
  return { type = t, version = v, architectures = arches, name = field(d, "metadata", "name"), file = yaml_path,
           engine = type(section) == "table" and section or {}, os = os_section,
           built = built, dir = dir, temp = temp or false, doc = d,
           aggregate = field(d, "metadata", "aggregateChecksum"), coverage = coverage,
           files = files, os_files = os_files,
           images = list_of(ic.images) or {},
           image_config = { path = ic.path, compression = ic.compression or "none" },
           values_files = list_of(field(d, "spec", "values", "files")) or {},
           manifests = list_of(field(d, "spec", "config", "manifests")) or {} }
end

return M

-- package.schema: the distro file's (ZarfDistro) rules as data; they check every distro.yaml and write its schema.
--
-- M.ROOT is the rule tree (cargoship.package.rules) of distro-package.md §2-§10. M.check(doc, file)
-- reports every mistake at file:line:col with its path, as the cluster loader does;
-- M.json_schema() is the JSON Schema of the same tree. Both read only M.ROOT, so a field
-- added here is checked and published at once, and a field missing here is an unknown
-- field in both. Rules only code can say (a target is an absolute path without "..", an
-- octal mode's owner digit, a version that parses, a file entry with `source` or `data`)
-- are `check` functions: checked, not in the schema.
local R = require "cargoship.package.rules"
local errors = require "cargoship.config.errors"

local M = {}

M.API_VERSION = "zarf.dev/v1alpha1"
M.KIND = "ZarfDistro"
M.ARCHES = { "amd64", "arm64", "riscv64" }
M.ENGINES = require("distros.engine").TYPES -- the engine configurers' own list
M.PACKAGES = { "rpm", "apt", "binary" }
M.PROFILES = { "controller", "worker" }
M.COMPRESSIONS = { "none", "gz", "zstd" }
M.FILE_TYPES = { "all", "file", "dir", "symlink", "pipe", "socket", "block", "char" }

-- A target on the host: absolute, and no ".." (a "/etc/../x" is refused rather than guessed).
function M.safe_target(p)
  if type(p) ~= "string" or p:sub(1, 1) ~= "/" or p:find("[%z\n]") then return false end
  for part in p:gmatch("[^/]+") do
    if part == ".." then return false end
  end
  return true
end

-- perm as distro.yaml writes it ("0644", "644" or 644, read as octal digits) -> "0644" | nil, why.
-- Rules (§8): digits 0-7, greater than 0, the owner may at least read (owner digit >= 4).
function M.perm(v)
  if v == nil then return nil end
  local s = type(v) == "number" and math.tointeger(v) and tostring(math.tointeger(v)) or v
  if type(s) ~= "string" or not s:match("^[0-7]?[0-7][0-7][0-7]$") then
    return nil, "must be an octal mode such as \"0644\", got " .. tostring(v)
  end
  if #s == 3 then s = "0" .. s end
  if tonumber(s, 8) == 0 then return nil, "must be greater than 0, got " .. tostring(v) end
  if tonumber(s:sub(2, 2)) < 4 then return nil, "the owner must be able to read the file, got " .. tostring(v) end
  return s
end

local function target_check(v)
  if not M.safe_target(v) then return "must be an absolute path without '..', got " .. errors.describe(v) end
end
local function perm_check(v) return select(2, M.perm(v)) end
local function name_part_check(v)
  if v == ".." or v:find("[/\\]") then return "must not be '..' or contain '/' or '\\', got " .. errors.describe(v) end
end
local function version_check(v)
  if not require("distros.engine").parse(v) then
    return "expected a version like 1.35.4-rke2r1, got " .. errors.describe(v)
  end
end

local STRING = R.string()
local TEXT = R.string({ binary = true })
local SHA256 = R.string({ pattern = "^[0-9a-fA-F]{64}$", expect = "a sha256 (64 hex digits)" })
local PATH = R.string({ nonempty = true, check = target_check })
local ARCH = R.enum(M.ARCHES)
local ARCHES = R.list(ARCH, { unique = true, min = 1 })
local STRINGS = R.list(STRING)
local STRING_MAP = R.map(STRING)

local SELECTOR = R.object({
  { "package", R.enum(M.PACKAGES, { doc = "which upload phase ships an os.files entry" }) },
  { "profile", R.enum(M.PROFILES, { blank = true, doc = "a role (despite the name); empty = both" }) },
  { "arch", R.list(ARCH, { unique = true }), doc = "empty = every architecture the package targets" },
  { "roles", STRINGS },
}, { name = "selector" })

local FILE = R.object({
  { "name", STRING },
  { "source", R.string({ nonempty = true, doc = "URL, or a path relative to distro.yaml, read at build" }) },
  { "target", PATH, required = true },
  { "extractPath", R.string({ nonempty = true }) },
  { "shasum", SHA256 },
  { "executable", R.boolean() },
  { "perm", R.any_of({ R.string({ pattern = "^[0-7]?[0-7]{3}$", expect = "an octal mode such as \"0644\"",
    check = perm_check }), R.integer({ min = 1, max = 7777, check = perm_check }) }) },
  { "user", STRING },
  { "group", STRING },
  { "symlinks", R.list(PATH) },
  { "template", R.boolean() },
  { "isDirectory", R.boolean() },
  { "data", TEXT },
  { "selector", SELECTOR },
}, { name = "file", check = function(ctx, m, path)
  if m.source == nil and m.data == nil then
    ctx.errs:at_node(m, path, "missing required field \"source\" (or inline \"data\")")
  end
end })
local FILES = R.list(FILE)

local SELINUX = R.object({
  { "modules", R.list(R.object({
    { "name", R.string({ pattern = "^[a-zA-Z0-9][a-zA-Z0-9_-]*$", expect = "a module name" }), required = true },
    { "priority", R.integer({ min = 1, max = 999 }) },
    { "cil", R.string({ nonempty = true }), required = true },
  }, { name = "selinux_module" }), { unique_by = "name" }) },
  { "booleans", R.map(R.boolean(), { key_pattern = "^[A-Za-z0-9_]+$", key_expect = "an SELinux boolean name" }) },
  { "fileContexts", R.list(R.object({
    { "path", R.string({ pattern = "^/[^\\n]*$", expect = "an absolute path regex on one line" }), required = true },
    { "type", R.string({ pattern = "^[A-Za-z0-9_]+$", expect = "an SELinux type name" }), required = true },
    { "fileType", R.enum(M.FILE_TYPES) },
  }, { name = "selinux_file_context" })) },
}, { name = "selinux" })

-- sysctl and environment values: one line of text (a number or boolean is taken as its text)
local SCALAR = R.any_of({ R.string({ pattern = "^[^\\n\\r]*$", expect = "a value on one line" }), R.number(),
  R.boolean() })

local OS = R.object({
  { "sysctl", R.map(SCALAR, { key_pattern = "^[A-Za-z0-9_][A-Za-z0-9_./-]*$", key_expect = "a sysctl name" }) },
  { "env", R.map(SCALAR, { key_pattern = "^[A-Za-z_][A-Za-z0-9_]*$", key_expect = "a variable name" }) },
  { "kernel", R.list(R.string({ pattern = "^[A-Za-z0-9_-]+$", expect = "a kernel module name" })) },
  { "fapolicyd", TEXT },
  { "fapolicydExecutable", TEXT },
  { "selinux", SELINUX },
  { "files", FILES },
}, { name = "os" })

local ENGINE = R.object({
  { "config", R.any_map({ doc = "the engine's own configuration: its config file's flags, or its"
    .. " ClusterConfiguration for an engine configured by one" }) },
  { "audit", R.any_map({ doc = "the body of an audit Policy" }) },
  { "podSecurity", R.any_map({ doc = "the body of an AdmissionConfiguration" }) },
  { "manifest", R.map(R.any_of({ R.string(), R.any_map() }), { doc = "chart name -> Helm values" }) },
}, { name = "engine" })

local IMAGE_CONFIG = R.object({
  { "images", R.list(R.string({ nonempty = true }), { unique = true }) },
  { "compression", R.enum(M.COMPRESSIONS) },
  { "path", PATH },
  { "sources", STRINGS, doc = "build machine only: local OCI layouts or archives (removed at build)" },
}, { name = "image_config" })

local CONFIG = R.object({
  { "engine", ENGINE },
  { "manifests", R.list(PATH) },
  { "os", OS },
  { "files", FILES },
  { "imageConfig", IMAGE_CONFIG },
}, { name = "config" })

local DOTTED = R.string({ pattern = "^\\.", expect = "a dotted path with a leading dot, like .a.b" })
local VALUES = R.object({
  { "files", STRINGS },
  { "schema", R.string({ nonempty = true }) },
  { "mappings", R.list(R.object({ { "source", DOTTED, required = true }, { "target", DOTTED, required = true } },
    { name = "value_mapping" })) },
}, { name = "values" })

local SPEC = R.object({
  { "type", R.enum(M.ENGINES), required = true },
  { "version", R.string({ check = version_check }), required = true },
  { "actions", R.object({ { "onCreate", R.any_map({ doc = "a Zarf action set; refused by create" }) } },
    { name = "actions" }) },
  { "config", CONFIG },
  { "values", VALUES },
}, { name = "spec", hints = { engine = "it belongs inside spec.config", os = "it belongs inside spec.config",
  files = "it belongs inside spec.config" } })

local METADATA = R.object({
  { "name", R.string({ pattern = "^[a-z0-9][a-z0-9-]*$",
    expect = "lower-case letters, digits and '-', starting with a letter or digit" }), required = true },
  { "version", R.string({ nonempty = true, check = name_part_check }) },
  { "description", STRING },
  { "architecture", ARCH },
  { "architectures", ARCHES },
  { "uncompressed", R.boolean() },
  { "annotations", STRING_MAP },
  { "url", STRING }, { "documentation", STRING }, { "source", STRING }, { "vendor", STRING },
  { "athors", STRING }, -- sic: the key as Zarf spells it
  { "aggregateChecksum", SHA256 },
}, { name = "metadata" })

local BUILD = R.object({
  { "architecture", ARCH },
  { "architectures", ARCHES },
  { "timestamp", STRING },
  { "version", STRING },
  { "registryOverrides", STRING_MAP },
  { "fileOverrides", STRING_MAP },
  { "fileSources", R.list(R.object({ { "path", STRING }, { "declared", STRING }, { "resolved", STRING },
    { "override", STRING }, { "shasum", SHA256 } }, { name = "file_source" })) },
  { "signed", R.boolean() },
  { "reproducible", R.boolean() },
  { "provenanceFiles", STRINGS },
}, { name = "build" })

M.ROOT = R.object({
  { "apiVersion", R.const(M.API_VERSION) },
  { "kind", R.const(M.KIND), required = true },
  { "metadata", METADATA, required = true },
  { "spec", SPEC, required = true },
  { "build", BUILD },
}, { hints = { type = "it belongs inside spec", version = "it belongs inside spec or metadata",
  name = "it belongs inside metadata" },
  doc = "a cargoship distro package definition (distro.yaml)" })

-- Every mistake of one ZarfDistro document -> nil | sorted list of {file, line, col, path, message, text}.
-- fallback: {line, col} of the document's start (where an error with no node of its own goes).
function M.check(doc, file, fallback)
  local ctx = { file = file, errs = errors.collector(file) }
  ctx.errs:set_fallback(fallback and fallback[1] or 1, fallback and fallback[2] or 1)
  if errors.kind_of(doc) ~= "mapping" then
    ctx.errs:at_node(doc, "", "expected a mapping at the top of the document, got " .. errors.describe(doc))
  else
    R.check_object(ctx, doc, "", M.ROOT)
  end
  if #ctx.errs.list == 0 then return nil end
  return ctx.errs:sorted()
end

-- The JSON Schema of the distro file, as a Lua table.
function M.json_schema()
  return R.schema(M.ROOT, { id = "https://cargoship.invalid/schema/distro.json",
    title = "cargoship distro package (kind: " .. M.KIND .. ")" })
end

return M

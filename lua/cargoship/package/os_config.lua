-- package.os_config: spec.config.os of a distro package, checked and normalized for the prepare phases (8-11).
--
-- M.normalize(section, dir) -> os | nil, why       (section: spec.config.os as parsed; nil = {})
--   os = { sysctl = {key = "text"}, env = {NAME = "text"}, kernel = {"br_netfilter", ..},
--          fapolicyd = rules text | nil, fapolicyd_executable = rules text | nil,
--          selinux = { modules = {{name, priority (default 400), cil}},
--                      booleans = {name = bool}, file_contexts = {{path, type, file_type}} },
--          files = {{index (1-based), target, source (local staged path), sha256, package,
--                    basename}} }
-- Field rules (distro-package.md §7) are lua/cargoship/package/schema.lua's; `fapolicydExecutable` is our name for the
-- executable-rules text the Go tool's newest phase writes to 32-cargoship-executable.rules
-- (the Go tool names no source field). Staged files sit at <dir>/os/<index-1>/<basename(target)>.
local M = {}

local function scalar(v)
  if type(v) == "string" then return v end
  if type(v) == "number" then return tostring(v) end
  if type(v) == "boolean" then return v and "1" or "0" end
  return nil
end

local function map_of(t)
  local out = {}
  for k, v in pairs(type(t) == "table" and t or {}) do out[k] = scalar(v) end
  return out
end

local function list(t) return type(t) == "table" and t or {} end

local function selinux_of(s)
  s = type(s) == "table" and s or {}
  local out = { modules = {}, booleans = {}, file_contexts = {} }
  for _, m in ipairs(list(s.modules)) do
    out.modules[#out.modules + 1] = { name = m.name, priority = m.priority or 400, cil = m.cil }
  end
  for k, v in pairs(list(s.booleans)) do out.booleans[k] = v end
  for _, c in ipairs(list(s.fileContexts)) do
    out.file_contexts[#out.file_contexts + 1] = { path = c.path, type = c.type, file_type = c.fileType or "all" }
  end
  return out
end

local function basename(p) return (p:match("([^/]+)/*$")) end

-- The section must have passed cargoship.package.schema's rules (cargoship.package.read checks them
-- first: every mistake located, by the rules `cargoship schema distro` publishes); this
-- only shapes it. A section that is not a mapping is still refused, for callers with none.
function M.normalize(section, dir)
  local o = section or {}
  if type(o) ~= "table" then return nil, "spec.config.os must be a mapping" end
  local out = { sysctl = map_of(o.sysctl), env = map_of(o.env), kernel = {},
    fapolicyd = o.fapolicyd, fapolicyd_executable = o.fapolicydExecutable, selinux = selinux_of(o.selinux),
    files = {} }
  for _, m in ipairs(list(o.kernel)) do out.kernel[#out.kernel + 1] = m end
  for i, f in ipairs(list(o.files)) do
    if type(f) == "table" and type(f.target) == "string" then
      local b = basename(f.target)
      out.files[#out.files + 1] = {
        index = i, target = f.target, basename = b, sha256 = f.shasum,
        package = type(f.selector) == "table" and f.selector.package or nil,
        source = dir and string.format("%s/os/%d/%s", dir, i - 1, b) or nil,
      }
    end
  end
  return out
end

-- M.file_sha256(f) -> hex sha256, size | nil: a staged file's digest, the recorded shasum
-- when the package has one, else read from the staged copy once (the package is local).
function M.file_sha256(f)
  if f.sha256 then return f.sha256, f.size end
  local fh = f.source and io.open(f.source, "rb")
  if not fh then return nil end
  local data = fh:read("a")
  fh:close()
  f.sha256, f.size = require("cargoship.util").sha256(data), #data
  return f.sha256, f.size
end

-- The os section of a package read by cargoship.package, or the empty one without a package.
function M.of(pkg)
  if pkg and pkg.os then return pkg.os end
  return assert(M.normalize(nil, nil))
end

return M

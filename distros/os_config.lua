-- distros.os_config: spec.config.os of a distro package, checked and normalized for the prepare phases (8-11).
--
-- M.normalize(section, dir) -> os | nil, why       (section: spec.config.os as parsed; nil = {})
--   os = { sysctl = {key = "text"}, env = {NAME = "text"}, kernel = {"br_netfilter", ..},
--          fapolicyd = rules text | nil, fapolicyd_executable = rules text | nil,
--          selinux = { modules = {{name, priority (default 400), cil}},
--                      booleans = {name = bool}, file_contexts = {{path, type, file_type}} },
--          files = {{index (1-based), target, source (local staged path), sha256, package,
--                    basename}} }
-- Field rules as distro-package.md §7 states them; `fapolicydExecutable` is our name for the
-- executable-rules text the newest upstream phase writes to 32-cargoship-executable.rules
-- (upstream names no source field). Staged files sit at <dir>/os/<index-1>/<basename(target)>.
local M = {}

local FILE_TYPES = { all = true, file = true, dir = true, symlink = true, pipe = true, socket = true,
                     block = true, char = true }

local function scalar(v)
  if type(v) == "string" then return v end
  if math.type(v) == "integer" then return tostring(v) end
  if type(v) == "number" then return tostring(v) end
  if type(v) == "boolean" then return v and "1" or "0" end
  return nil
end

local function map_of(t, where, check)
  local out = {}
  if t == nil then return out end
  if type(t) ~= "table" or (#t > 0) then return nil, where .. " must be a mapping" end
  for k, v in pairs(t) do
    if type(k) ~= "string" then return nil, where .. ": keys must be text" end
    local s = scalar(v)
    if not s then return nil, string.format("%s.%s must be a string or a number", where, k) end
    local why = check and check(k, s)
    if why then return nil, string.format("%s.%s: %s", where, k, why) end
    out[k] = s
  end
  return out
end

local function selinux_of(s)
  local out = { modules = {}, booleans = {}, file_contexts = {} }
  if s == nil then return out end
  local where = "spec.config.os.selinux"
  if type(s) ~= "table" then return nil, where .. " must be a mapping" end
  for k in pairs(s) do
    if k ~= "modules" and k ~= "booleans" and k ~= "fileContexts" then
      return nil, string.format("%s: unknown field %s (modules, booleans, fileContexts)", where, tostring(k))
    end
  end
  local seen = {}
  for i, m in ipairs(s.modules or {}) do
    local at = string.format("%s.modules[%d]", where, i - 1)
    if type(m) ~= "table" then return nil, at .. " must be a mapping" end
    if type(m.name) ~= "string" or not m.name:match("^[%w][%w_-]*$") then
      return nil, at .. ".name must match [a-zA-Z0-9][a-zA-Z0-9_-]*"
    end
    if seen[m.name] then return nil, at .. ".name " .. m.name .. " is listed twice" end
    seen[m.name] = true
    local prio = m.priority == nil and 400 or m.priority
    if math.type(prio) ~= "integer" or prio < 1 or prio > 999 then
      return nil, at .. ".priority must be a whole number from 1 to 999"
    end
    if type(m.cil) ~= "string" or not m.cil:find("%S") then return nil, at .. ".cil must be CIL source text" end
    out.modules[#out.modules + 1] = { name = m.name, priority = prio, cil = m.cil }
  end
  if s.booleans ~= nil and type(s.booleans) ~= "table" then return nil, where .. ".booleans must be a mapping" end
  for k, v in pairs(s.booleans or {}) do
    if type(k) ~= "string" or not k:match("^[%w_]+$") then
      return nil, string.format("%s.booleans: %q is not a boolean name", where, tostring(k))
    end
    if type(v) ~= "boolean" then return nil, string.format("%s.booleans.%s must be true or false", where, k) end
    out.booleans[k] = v
  end
  for i, c in ipairs(s.fileContexts or {}) do
    local at = string.format("%s.fileContexts[%d]", where, i - 1)
    if type(c) ~= "table" then return nil, at .. " must be a mapping" end
    if type(c.path) ~= "string" or c.path:sub(1, 1) ~= "/" or c.path:find("[\n%z]") then
      return nil, at .. ".path must be an absolute path regex"
    end
    if type(c.type) ~= "string" or not c.type:match("^[%w_]+$") then return nil, at .. ".type must be a type name" end
    local ft = c.fileType or "all"
    if not FILE_TYPES[ft] then return nil, at .. ".fileType must be all|file|dir|symlink|pipe|socket|block|char" end
    out.file_contexts[#out.file_contexts + 1] = { path = c.path, type = c.type, file_type = ft }
  end
  return out
end

local function basename(p) return (p:match("([^/]+)/*$")) end

function M.normalize(section, dir)
  local o = section or {}
  if type(o) ~= "table" then return nil, "spec.config.os must be a mapping" end
  local out = {}
  local why
  out.sysctl, why = map_of(o.sysctl, "spec.config.os.sysctl", function(k, v)
    if not k:match("^[%w_][%w._/-]*$") then return "not a sysctl name" end
    if v:find("[\n\r]") then return "a value cannot span lines" end
  end)
  if not out.sysctl then return nil, why end
  out.env, why = map_of(o.env, "spec.config.os.env", function(k, v)
    if not k:match("^[%a_][%w_]*$") then return "not a variable name" end
    if v:find("[\n\r]") then return "a value cannot span lines" end
  end)
  if not out.env then return nil, why end
  out.kernel = {}
  if o.kernel ~= nil and type(o.kernel) ~= "table" then return nil, "spec.config.os.kernel must be a list" end
  for i, m in ipairs(o.kernel or {}) do
    if type(m) ~= "string" or not m:match("^[%w_-]+$") then
      return nil, string.format("spec.config.os.kernel[%d]: %q is not a module name", i - 1, tostring(m))
    end
    out.kernel[#out.kernel + 1] = m
  end
  for _, k in ipairs({ "fapolicyd", "fapolicydExecutable" }) do
    if o[k] ~= nil and type(o[k]) ~= "string" then return nil, "spec.config.os." .. k .. " must be rules text" end
  end
  out.fapolicyd = o.fapolicyd
  out.fapolicyd_executable = o.fapolicydExecutable
  out.selinux, why = selinux_of(o.selinux)
  if not out.selinux then return nil, why end
  out.files = {}
  for i, f in ipairs(type(o.files) == "table" and o.files or {}) do
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

-- The os section of a package read by distros.package, or the empty one without a package.
function M.of(pkg)
  if pkg and pkg.os then return pkg.os end
  return assert(M.normalize(nil, nil))
end

return M

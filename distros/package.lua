-- distros.package: reads what apply needs from a distro.yaml (kind ZarfDistro): engine type, version, architectures.
--
-- read(path) -> {type, version, architectures = {..}, name, file, engine, manifests = {path..},
--   image_config = spec.config.imageConfig | nil} | nil, why
-- engine: spec.config.engine as written ({config, audit, podSecurity, manifest}), which the
-- engine configurers render from.
-- path is a distro.yaml or a directory holding one. Architectures: build.architectures
-- (written by create, authoritative), else build.architecture, else
-- metadata.architectures, else metadata.architecture, else amd64 (the build's default).
local engine = require "distros.engine"

local M = {}

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

local function pick(docs)
  for i = 1, docs.n or #docs do
    local d = docs[i]
    if type(d) == "table" and d.kind == "ZarfDistro" then return d end
  end
  return nil
end

local function field(t, ...)
  for _, k in ipairs({ ... }) do
    if type(t) ~= "table" then return nil end
    t = t[k]
  end
  return t
end

function M.read(path)
  local yaml = require "cargoship.yaml"
  local docs, err = yaml.load_file(path)
  if not docs and tostring(err):find("directory", 1, true) then
    path = path:gsub("/+$", "") .. "/distro.yaml"
    docs, err = yaml.load_file(path)
  end
  if not docs then return nil, err end
  local d = pick(docs)
  if not d then return nil, path .. ": no document with kind: ZarfDistro" end
  local t, v = field(d, "spec", "type"), field(d, "spec", "version")
  if type(t) ~= "string" or not engine.load(t) then
    return nil, string.format("%s: spec.type must be one of %s, got %s", path,
      table.concat(engine.TYPES, ", "), tostring(t))
  end
  if type(v) ~= "string" or not engine.parse(v) then
    return nil, string.format("%s: spec.version must be a version like 1.35.4-rke2r1, got %s", path, tostring(v))
  end
  local arches = list_of(field(d, "build", "architectures")) or list_of(field(d, "build", "architecture"))
    or list_of(field(d, "metadata", "architectures")) or list_of(field(d, "metadata", "architecture"))
    or { "amd64" }
  local section = field(d, "spec", "config", "engine")
  return { type = t, version = v, architectures = arches, name = field(d, "metadata", "name"), file = path,
           engine = type(section) == "table" and section or {},
           manifests = list_of(field(d, "spec", "config", "manifests")) or {},
           image_config = type(field(d, "spec", "config", "imageConfig")) == "table"
             and field(d, "spec", "config", "imageConfig") or nil }
end

return M

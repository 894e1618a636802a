-- cargoship.package.meta: what a package file (.deb) declares about itself, read locally before it reaches a host.
--
-- M.deb(path) -> {package, version, architecture, depends, pre_depends, installed_size} | nil, why
--   The control file of a .deb (an ar archive holding control.tar.{gz,xz,zst}) parsed as
--   Debian's deb-control(5) says: one paragraph of "Field: value" lines, continuation lines
--   start with a space. depends / pre_depends are the fields' text as written ("a (>= 1) | b,
--   c"), nil when absent; installed_size in bytes (the field is in KiB).
-- M.parse_control(text) -> {[lower-case field] = value}
-- M.relations(text) -> { {alternatives = { {name, rel, version}, ... }, text}, ... }: a
--   Depends field split into its clauses, each a list of alternatives, arch qualifiers dropped.
-- M.rpm(path) -> cargoship.package.rpm.read's {name, version, release, arch, requires, provides, files}
--   | nil, why: an .rpm file's header, read locally without its payload.
-- Read once per path for the run (a package's files do not change under it).
local archive = require "cargoship.archive"
local rpm = require "cargoship.package.rpm"

local M = {}

function M.parse_control(text)
  local fields, last = {}, nil
  for line in (text or ""):gmatch("[^\n]+") do
    local k, v = line:match("^([%w%-]+):%s*(.-)%s*$")
    if k then
      last = k:lower()
      fields[last] = v
    elseif last and line:match("^%s") then
      fields[last] = fields[last] .. "\n" .. line:gsub("^%s+", "")
    end
  end
  return fields
end

function M.relations(text)
  local out = {}
  for clause in (text or ""):gmatch("[^,]+") do
    local alts = {}
    for alt in clause:gmatch("[^|]+") do
      local name, rest = alt:match("^%s*([%w%.%+%-]+)[%w%-:]*%s*(.-)%s*$")
      if name then
        local rel, ver = rest:match("^%(%s*([<>=]+)%s*([^%s%)]+)%s*%)")
        alts[#alts + 1] = { name = name, rel = rel, version = ver }
      end
    end
    if #alts > 0 then out[#out + 1] = { alternatives = alts, text = clause:gsub("^%s+", ""):gsub("%s+$", "") } end
  end
  return out
end

local cache = {}

function M.deb(path)
  if cache[path] then return cache[path] end
  local ctl, why = archive.member(path, "control.tar", { prefix = true })
  if not ctl then return nil, why end
  local text, terr = archive.member(ctl, "control", { memory = true })
  if not text then return nil, path .. ": " .. tostring(terr) end
  local f = M.parse_control(text)
  if not f.package or not f.version then return nil, path .. ": control has no Package or Version field" end
  local info = { package = f.package, version = f.version, architecture = f.architecture,
    depends = f.depends, pre_depends = f["pre-depends"],
    installed_size = tonumber(f["installed-size"]) and tonumber(f["installed-size"]) * 1024 or nil }
  cache[path] = info
  return info
end

local rpm_cache = {}

function M.rpm(path)
  if rpm_cache[path] then return rpm_cache[path] end
  local info, why = rpm.read(path)
  if not info then return nil, why end
  rpm_cache[path] = info
  return info
end

return M

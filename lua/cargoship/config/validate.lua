-- cargoship.config.validate: walks one ZarfCluster document, reporting every mistake and
-- building the normalized cluster table alongside (used only when nothing was reported).
local check = require "cargoship.config.check"
local FIELDS = require "cargoship.config.fields"
local errors = require "cargoship.config.errors"
local hosts = require "cargoship.config.hosts"
local net = require "cargoship.config.net"
local phases = require "cargoship.config.phases"
local profiles = require "cargoship.config.profiles"
local registries = require "cargoship.config.registries"

local M = {}

local quote, join, describe = errors.quote, errors.join, errors.describe

M.API_VERSION = "zarf.dev/v1alpha1"
M.KIND = "ZarfCluster"

local IN_SPEC = "it belongs inside spec"
local IN_CONFIG = "it belongs inside spec.config"
local ROOT_HINTS = { hosts = IN_SPEC, config = IN_SPEC, name = "it belongs inside metadata" }
local SPEC_HINTS = { loadbalancer = IN_CONFIG, profiles = IN_CONFIG, registries = IN_CONFIG,
                     values = IN_CONFIG }

local function encryption(ctx, meta, mpath)
  local enc = check.mapping(ctx, meta, "encryption", mpath)
  if not enc then return nil end
  local epath = join(mpath, "encryption")
  check.fields(ctx, enc, epath, FIELDS.encryption)
  local age = check.mapping(ctx, enc, "age", epath)
  if not age then return {} end
  local apath = join(epath, "age")
  check.fields(ctx, age, apath, FIELDS.age)
  local out = { recipients = {} }
  local rec = check.sequence(ctx, age, "recipients", apath)
  for i = 1, rec and #rec or 0 do
    -- Advisory only (cluster-yaml.md §2): any non-empty text is kept, no key syntax check.
    local r = check.string(ctx, rec, i, join(apath, "recipients"), { required = true })
    if r then out.recipients[#out.recipients + 1] = r end
  end
  local lm = check.string(ctx, age, "lastModified", apath, { blank_absent = true })
  if lm and not lm:match("^%d%d%d%d%-%d%d%-%d%d[Tt]%d%d:%d%d:%d%d%.?%d*[Zz]$")
         and not lm:match("^%d%d%d%d%-%d%d%-%d%d[Tt]%d%d:%d%d:%d%d%.?%d*[+-]%d%d:%d%d$") then
    ctx.errs:at_value(age, "lastModified", join(apath, "lastModified"),
      "expected an RFC 3339 time like \"2025-01-31T12:00:00Z\", got " .. describe(lm))
    lm = nil
  end
  out.last_modified = lm
  return out
end

local function metadata(ctx, doc, cluster)
  local meta = check.mapping(ctx, doc, "metadata", "", { required = true })
  if not meta then return end
  check.fields(ctx, meta, "metadata", FIELDS.metadata)
  local name = check.string(ctx, meta, "name", "metadata", { required = true })
  if name and not name:match("^[a-z0-9][a-z0-9-]*$") then
    ctx.errs:at_value(meta, "name", "metadata.name",
      "expected lower-case letters, digits and '-', starting with a letter or digit, got " .. describe(name))
    name = nil
  end
  cluster.name = name
  cluster.encryption = encryption(ctx, meta, "metadata")
end

local function loadbalancer(ctx, cfg, path)
  local lb = check.string(ctx, cfg, "loadbalancer", path, { required = true })
  if not lb or net.is_host_or_ip(lb) then return lb end
  local hint = ""
  if lb:find("://", 1, true) then hint = " (without scheme)"
  elseif lb:match(":%d+$") then hint = " (without port)" end
  ctx.errs:at_value(cfg, "loadbalancer", join(path, "loadbalancer"),
    "expected a hostname or IP address" .. hint .. ", got " .. describe(lb))
  return nil
end

local function spec(ctx, doc, cluster)
  local s = check.mapping(ctx, doc, "spec", "", { required = true })
  if not s then return end
  check.fields(ctx, s, "spec", FIELDS.spec, SPEC_HINTS)
  local cfg = check.mapping(ctx, s, "config", "spec", { required = true })
  local cpath = "spec.config"
  if cfg then
    check.fields(ctx, cfg, cpath, FIELDS.config)
    cluster.loadbalancer = loadbalancer(ctx, cfg, cpath)
    cluster.profiles = profiles.decode(ctx, cfg, cpath)
    cluster.registries = registries.decode(ctx, cfg, cpath)
    cluster.values = check.mapping(ctx, cfg, "values", cpath) or {}
  end
  cluster.hosts = hosts.decode(ctx, s, "spec", cluster.profiles)
  cluster.phases = phases.decode(ctx, s, "spec")
end

-- ctx = {file, errs (collector), expanded}. Returns the cluster table (partial when
-- ctx.errs has entries).
function M.document(ctx, doc)
  local cluster = { file = ctx.file, raw = doc, profiles = {}, registries = {}, values = {}, hosts = {},
    phases = {} }
  local k = errors.kind_of(doc)
  if k ~= "mapping" then
    ctx.errs:at_node(doc, "", "expected a mapping at the top of the document, got " .. describe(doc))
    return cluster
  end
  check.fields(ctx, doc, "", FIELDS.root, ROOT_HINTS)
  local api = check.string(ctx, doc, "apiVersion", "")
  if api and api ~= M.API_VERSION then
    ctx.errs:at_value(doc, "apiVersion", "apiVersion",
      string.format("expected %s, got %s", quote(M.API_VERSION), describe(api)))
  end
  cluster.api_version = api or M.API_VERSION
  local kind = check.string(ctx, doc, "kind", "", { required = true })
  if kind and kind ~= M.KIND then
    ctx.errs:at_value(doc, "kind", "kind", string.format("expected %s, got %s%s", quote(M.KIND),
      describe(kind), errors.did_you_mean(kind, { M.KIND })))
  end
  metadata(ctx, doc, cluster)
  spec(ctx, doc, cluster)
  return cluster
end

return M

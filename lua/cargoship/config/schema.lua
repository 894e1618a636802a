-- cargoship.config.schema: the JSON Schema (draft 2020-12) of the cluster file, generated from
-- the loader's own data: field lists (config/fields.lua), enums and constants (exported by the
-- rule modules). Only the types below are written here, and the generator refuses a field list
-- entry without a type or a type for a field the loader does not know, so the two cannot part.
-- Rules the loader checks in code (cross-field, uniqueness, PEM, RE2, DNS syntax) are not in it.
local FIELDS = require "cargoship.config.fields"
local firewall = require "cargoship.config.firewall"
local hosts = require "cargoship.config.hosts"
local kube = require "cargoship.config.kube"
local validate = require "cargoship.config.validate"

local M = {}

local STRING = { type = "string" }
-- map-of-string values: integers and booleans are taken as their text, null as ""
local SCALAR = { type = { "string", "integer", "boolean", "null" } }
local function ref(name) return { ["$ref"] = "#/$defs/" .. name } end
local function array(items) return { type = "array", items = items } end
local function map_of(v) return { type = "object", additionalProperties = v } end
local function enum(values, blank)
  local e = {}
  for i, v in ipairs(values) do e[i] = v end
  if blank then e[#e + 1] = "" end
  return { type = "string", enum = e }
end
-- case-insensitive enum (rule actions): a pattern of [aA][lL]... alternatives
local function enum_ci(values)
  local alts = {}
  for i, v in ipairs(values) do
    alts[i] = v:gsub("%a", function(c) return "[" .. c:lower() .. c:upper() .. "]" end)
  end
  return { type = "string", pattern = "^(" .. table.concat(alts, "|") .. ")$" }
end
local PORT = { anyOf = { { type = "integer", minimum = 1, maximum = 65535 },
  { type = "string", pattern = "^\\s*\\d+(\\s*-\\s*\\d+)?\\s*$" } } }
local SSH_PORT = { type = "integer", minimum = 1, maximum = 65535 }

-- name -> {fields = FIELDS list, types = {field = schema}, required = {...}, extra = {...}}
local DEFS = {
  metadata = { fields = FIELDS.metadata, required = { "name" }, types = {
    name = { type = "string", pattern = "^[a-z0-9][a-z0-9-]*$" }, encryption = ref("encryption") } },
  encryption = { fields = FIELDS.encryption, types = { age = ref("age") } },
  age = { fields = FIELDS.age, types = { recipients = array({ type = "string", minLength = 1 }),
    lastModified = STRING } },
  spec = { fields = FIELDS.spec, required = { "config", "hosts" }, types = {
    config = ref("config"), hosts = { type = "array", minItems = 1, items = ref("host") },
    phases = array(ref("phase")) } },
  config = { fields = FIELDS.config, required = { "loadbalancer" }, types = {
    loadbalancer = { type = "string", minLength = 1 }, profiles = map_of(ref("profile")),
    registries = array(ref("registry")), values = { type = { "object", "null" } } } },
  profile = { fields = FIELDS.profile, types = {
    concurrency = { anyOf = { { type = "integer", minimum = 0 }, { type = "string", pattern = "^\\s*(\\d+%?)?\\s*$" },
      { type = "null" } } },
    engine = ref("engine"), host = ref("hostcfg") } },
  registry = { fields = FIELDS.registry, required = { "name" }, types = {
    name = { type = "string", minLength = 1 }, auth = ref("auth"), proxy = ref("proxy"), tls = ref("tls") } },
  auth = { fields = FIELDS.auth, types = { user = STRING, pass = STRING, token = STRING } },
  proxy = { fields = FIELDS.proxy, required = { "url" }, types = { url = { type = "string", minLength = 1 },
    rewrite = map_of({ type = "string", minLength = 1 }) } },
  tls = { fields = FIELDS.tls, types = { ca = STRING, caFile = STRING, certFile = STRING, keyFile = STRING,
    insecureSkipVerify = { type = "boolean" } } },
  host = { fields = FIELDS.host, required = { "role" }, types = {
    role = enum(hosts.ROLES), profile = STRING, hostname = STRING, privateAddress = STRING,
    privateInterface = STRING, os = STRING, environment = map_of(SCALAR), files = array(ref("file")),
    engine = ref("engine"), host = ref("hostcfg"), ssh = ref("ssh"), openSSH = ref("openssh"),
    localhost = { anyOf = { { type = "boolean" }, ref("localhost") } },
    winRM = false }, -- no Windows support: refused by the loader
    extra = { ["not"] = { required = { "ssh", "openSSH" } } } },
  ssh = { fields = FIELDS.ssh, required = { "address" }, types = {
    address = { type = "string", minLength = 1, maxLength = 253 }, user = STRING, port = SSH_PORT,
    keyPath = STRING, options = map_of(SCALAR), bastion = ref("ssh") } },
  openssh = { fields = FIELDS.openssh, required = { "address" }, types = {
    address = { type = "string", minLength = 1, maxLength = 253 }, user = STRING, port = SSH_PORT,
    keyPath = STRING, configPath = STRING, options = map_of(SCALAR), disableMultiplexing = { type = "boolean" } } },
  localhost = { fields = FIELDS.localhost, types = { enabled = { type = "boolean" } } },
  file = { fields = FIELDS.file, required = { "name" }, types = {
    name = { type = "string", minLength = 1 }, src = STRING, data = STRING, dst = STRING, dstDir = STRING,
    perm = { type = "string", pattern = "^\\s*[0-7]{3,4}\\s*$" }, user = STRING, group = STRING } },
  engine = { fields = FIELDS.engine, types = { labels = map_of(SCALAR),
    taints = array({ type = "string", pattern = ":(" .. table.concat(kube.EFFECTS, "|") .. ")$" }) } },
  hostcfg = { fields = FIELDS.hostcfg, types = { ports = array(ref("port")), firewall = ref("firewall"),
    policy = map_of(ref("policy")) } },
  port = { fields = FIELDS.port, required = { "port", "protocol" }, types = { port = PORT,
    protocol = enum(firewall.PORT_PROTOCOLS) } },
  firewall = { fields = FIELDS.firewall, types = { rules = array(ref("rule")) } },
  rule = { fields = FIELDS.rule, required = { "action" }, types = {
    name = STRING, action = enum_ci(firewall.ACTIONS), direction = enum(firewall.DIRECTIONS, true),
    source = STRING, destination = STRING, ingress = STRING, egress = STRING, port = PORT,
    protocol = enum(firewall.RULE_PROTOCOLS, true) } },
  policy = { fields = FIELDS.policy, types = { target = enum_ci(firewall.TARGETS), ingress = ref("zone"),
    egress = ref("zone"), ports = array({ type = "object", additionalProperties = false,
      required = { "port", "protocol" }, properties = { port = PORT, protocol = enum(firewall.RULE_PROTOCOLS) } }) } },
  zone = { fields = FIELDS.zone, required = { "name" }, types = { name = { type = "string", minLength = 1 } } },
  phase = { fields = FIELDS.phase, required = { "file" }, types = { file = { type = "string", minLength = 1 },
    before = STRING, after = STRING, replace = STRING } },
}

local function object(name, d)
  local props, seen = {}, {}
  for _, f in ipairs(d.fields) do
    assert(d.types[f] ~= nil, "schema: " .. name .. "." .. f .. " has no type")
    props[f], seen[f] = d.types[f], true
  end
  for f in pairs(d.types) do assert(seen[f], "schema: " .. name .. "." .. f .. " is not a field the loader knows") end
  local o = { type = "object", additionalProperties = false, properties = props, required = d.required }
  for k, v in pairs(d.extra or {}) do o[k] = v end
  return o
end

-- The cluster file's schema as a Lua table (json.encode it).
function M.cluster()
  local defs = {}
  for name, d in pairs(DEFS) do defs[name] = object(name, d) end
  local root = object("root", { fields = FIELDS.root, required = { "kind", "metadata", "spec" }, types = {
    apiVersion = { const = validate.API_VERSION }, kind = { const = validate.KIND },
    metadata = ref("metadata"), spec = ref("spec") } })
  root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
  root["$id"] = "https://cargoship.invalid/schema/cluster.json"
  root.title = "cargoship cluster file (kind: " .. validate.KIND .. ")"
  root["$defs"] = defs
  return root
end

return M

-- cargoship.commands.validate: checks a cluster file, lists every mistake or summarises it.
local json_lib = require "cargoship.json"

local M = {}

M.name = "validate"
M.summary = "check a cluster file (or a distro file) and summarise what it describes"
M.usage = [[
Usage: cargoship validate [options] FILE [FILE...]

Loads the cluster file CLUSTER (kind: ZarfCluster) and checks it completely, touching no
host. Every mistake is reported, one line each as FILE:LINE:COL: FIELD: problem, followed
by a count; exit code 1. A valid file gets a short summary (cluster name, hosts by role,
profiles, registries); exit code 0. Several files may be given: each is reported, and
the exit code is 1 when any is invalid.

The file is read literally, as the Go tool reads it: "$$", "${" and "${NAME}" are values
like any other. With --expand-env (a global option), ${NAME} is replaced by the
environment variable NAME (unset is an error), "$$" by "$"; apply, exec, repl and unlock
take the same flag and must be given it to see the same values.

Warnings do not fail validation: a host with no ssh, openSSH or localhost block (apply
and exec refuse it before connecting anywhere) is always reported; a host profile that
spec.config.profiles does not define (it only names the node-role label, as in the Go
tool) is reported under --verbose.

A distro file (distro.yaml, kind: ZarfDistro) is checked too, as the Go tool's validate
does, by the rules every distro.yaml cargoship loads is checked by (the same rules
`cargoship schema distro` publishes); its summary is the package name and engine. In JSON
its object is {"file", "kind": "ZarfDistro", "valid", "errors", "distro": {"name", "type",
"version"} | null}.

With --output json, stdout carries one object for machines (a JSON array of them, in
order, when several files are given):
  {"file", "valid": true|false, "errors": [{"file", "line", "col", "path", "message", "text"}...],
   "cluster": {"name", "hosts", "controllers", "workers", "profiles", "registries"} | null}]]
M.options = {
  { long = "output", value = "FORMAT", check = { "text", "json" }, default = "text",
    help = "text for people, json for machines" },
}
M.arguments = { { name = "FILE" }, { name = "FILE...", optional = true, rest = true } }

-- The loader is written alongside this command; until it is in the build, say so instead
-- of failing with a Lua error. A loader that exists but fails to load is a bug, and raises.
local function config_module()
  if not package.loaded["cargoship.config"] and not package.searchpath("cargoship.config", package.path) then
    return nil
  end
  return require "cargoship.config"
end

function M.not_available(ctx, name)
  ctx.stderr:write("cargoship: ", name, " is not available in this build yet (the cluster-file ",
    "loader, cargoship.config, is missing); nothing was done.\n")
  return ctx.exit.usage
end

-- Loads path with the context's environment. -> cluster | nil, errors | nil, nil (no loader)
function M.load(ctx, path)
  local config = config_module()
  if not config then return nil, nil end
  local cluster, errors = config.load(path, { env = ctx.env, expand_env = (ctx.options or {}).expand_env,
    decrypt = require("cargoship.secrets").load_options(ctx) })
  if not cluster and (type(errors) ~= "table" or #errors == 0) then
    error("config.load returned neither a cluster nor errors for " .. path, 0)
  end
  -- what the Go tool accepts and we take too is said, not hidden: an undefined profile
  -- under --verbose, a host without a connection always
  for _, w in ipairs(cluster and cluster.warnings or {}) do
    if w.level == "warn" then ctx.log:warn("%s", w.text) else ctx.log:verbose("%s", w.text) end
  end
  return cluster, errors
end

-- Commands that connect refuse hosts without a connection block before connecting
-- anywhere. -> exit code when refused, else nil.
function M.refuse_unconnected(ctx, name, cluster, hosts)
  local unconnected = require("cargoship.config").unconnected
  if not unconnected then return nil end -- a specs' stand-in loader
  local list, msg = unconnected(cluster, hosts)
  if not list then return nil end
  ctx.stderr:write("cargoship ", name, ": ", msg, "\n")
  return ctx.exit.failure
end

-- Prints every error and the count line to stderr (shared with apply, which fails the same way).
function M.report_errors(ctx, path, errors)
  local text = require("cargoship.config").format_errors(errors)
  if text ~= "" and text:sub(-1) ~= "\n" then text = text .. "\n" end
  ctx.stderr:write(text)
  ctx.stderr:write(string.format("%s: %d error%s\n", path, #errors, #errors == 1 and "" or "s"))
end

local function sorted_keys(map)
  local keys = {}
  for k in pairs(type(map) == "table" and map or {}) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return keys
end

-- The few facts a person checks first: is this the cluster, the hosts and the roles I meant?
function M.summarize(cluster)
  local s = {
    name = cluster.name,
    hosts = 0, controllers = 0, workers = 0,
    profiles = sorted_keys(cluster.profiles),
    registries = {},
  }
  for _, host in ipairs(cluster.hosts or {}) do
    s.hosts = s.hosts + 1
    if host.role == "controller" then s.controllers = s.controllers + 1
    elseif host.role == "worker" then s.workers = s.workers + 1 end
  end
  for _, reg in ipairs(cluster.registries or {}) do s.registries[#s.registries + 1] = reg.name end
  return s
end

local function plural(n, word)
  return string.format("%d %s%s", n, word, n == 1 and "" or "s")
end

local function list_or_none(list)
  return #list > 0 and table.concat(list, ", ") or "none"
end

local function print_summary(ctx, path, s)
  ctx.stdout:write(path, " is valid.\n",
    "cluster:    ", tostring(s.name), "\n",
    "hosts:      ", tostring(s.hosts), " (", plural(s.controllers, "controller"), ", ",
      plural(s.workers, "worker"), ")\n",
    "profiles:   ", list_or_none(s.profiles), "\n",
    "registries: ", list_or_none(s.registries), "\n")
end

-- The JSON writer lives in cargoship.json (apply's report uses it too); these names stay
-- for the callers that already use them.
local json, array, NULL = json_lib.encode, json_lib.array, json_lib.null
M.json, M.json_array, M.json_null = json, array, NULL

function M.json_report(cluster, errors, path)
  local list = array({})
  for _, e in ipairs(errors or {}) do
    list[#list + 1] = { file = e.file, line = e.line, col = e.col, path = e.path, message = e.message,
      text = e.text }
  end
  local summary = NULL
  if cluster then
    summary = M.summarize(cluster)
    summary.profiles, summary.registries = array(summary.profiles), array(summary.registries)
  end
  return json({ file = path, valid = cluster ~= nil and #list == 0, errors = list, cluster = summary }) .. "\n"
end

-- A distro file (a ZarfDistro document and no ZarfCluster one) -> its document and index, or nil.
local function distro_document(path)
  local docs = require("cargoship.yaml").load_file(path)
  if type(docs) ~= "table" then return nil end
  for j = 1, docs.n or #docs do
    if type(docs[j]) == "table" and docs[j].kind == "ZarfCluster" then return nil end
  end
  local d, i = require("cargoship.package").pick(docs)
  if d then return docs, d, i end
end

-- The Go tool's validate takes distro files too, by their kind: checked by the same rules as
-- every distro.yaml cargoship loads (lua/cargoship/package/schema.lua).
local function validate_distro(ctx, path, output, docs, d, i)
  local errors = require("cargoship.package.schema").check(d, path, { require("cargoship.yaml").where(docs, i) }) or {}
  local spec = type(d.spec) == "table" and d.spec or {}
  local summary = #errors == 0 and { name = type(d.metadata) == "table" and d.metadata.name or nil,
    type = spec.type, version = spec.version } or nil
  if output == "json" then
    local list = array({})
    for _, e in ipairs(errors) do
      list[#list + 1] = { file = e.file, line = e.line, col = e.col, path = e.path, message = e.message, text = e.text }
    end
    return #errors == 0, json({ file = path, kind = "ZarfDistro", valid = #errors == 0, errors = list,
      distro = summary or NULL }) .. "\n"
  elseif summary then
    ctx.stdout:write(path, " is valid.\n", "distro:     ", tostring(summary.name), "\n",
      "engine:     ", tostring(summary.type), " ", tostring(summary.version), "\n")
  else
    M.report_errors(ctx, path, errors)
  end
  return #errors == 0
end

local function validate_one(ctx, path, output)
  local docs, d, i = distro_document(path)
  if docs then return validate_distro(ctx, path, output, docs, d, i) end
  local cluster, errors = M.load(ctx, path)
  if not cluster and not errors then return nil end
  local valid = cluster ~= nil and #(errors or {}) == 0
  if output == "json" then
    return valid, M.json_report(valid and cluster or nil, errors, path)
  elseif valid then
    print_summary(ctx, path, M.summarize(cluster))
  else
    M.report_errors(ctx, path, errors)
  end
  return valid
end

function M.run(ctx, a)
  local all_valid, docs = true, {}
  for _, path in ipairs(a.positional) do
    local valid, doc = validate_one(ctx, path, a.options.output)
    if valid == nil then return M.not_available(ctx, "validate") end
    all_valid = all_valid and valid
    docs[#docs + 1] = doc
  end
  if a.options.output == "json" then
    -- one file: the object itself (as before); several: a JSON array of them, in order
    if #docs == 1 then ctx.stdout:write(docs[1])
    else ctx.stdout:write("[", (table.concat(docs, ","):gsub("\n", "")), "]\n") end
  end
  return all_valid and ctx.exit.ok or ctx.exit.failure
end

return M

-- cargoship.commands.validate: checks a cluster file, lists every mistake or summarises it.
local json_lib = require "cargoship.json"

local M = {}

M.name = "validate"
M.summary = "check a cluster file and summarise the cluster it describes"
M.usage = [[
Usage: cargoship validate [options] CLUSTER

Loads the cluster file CLUSTER (kind: ZarfCluster) and checks it completely, touching no
host. Every mistake is reported, one line each as FILE:LINE:COL: FIELD: problem, followed
by a count; exit code 1. A valid file gets a short summary (cluster name, hosts by role,
profiles, registries); exit code 0. Environment variables in the file are expanded as
apply expands them.

With --output json, stdout carries one object for machines:
  {"valid": true|false, "errors": [{"file", "line", "col", "path", "message", "text"}...],
   "cluster": {"name", "hosts", "controllers", "workers", "profiles", "registries"} | null}]]
M.options = {
  { long = "output", value = "FORMAT", check = { "text", "json" }, default = "text",
    help = "text for people, json for machines" },
}
M.arguments = { { name = "CLUSTER" } }

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
  local cluster, errors = config.load(path, { env = ctx.env,
    decrypt = require("cargoship.secrets").load_options(ctx) })
  if not cluster and (type(errors) ~= "table" or #errors == 0) then
    error("config.load returned neither a cluster nor errors for " .. path, 0)
  end
  return cluster, errors
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

function M.json_report(cluster, errors)
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
  return json({ valid = cluster ~= nil and #list == 0, errors = list, cluster = summary }) .. "\n"
end

function M.run(ctx, a)
  local path = a.positional[1]
  local cluster, errors = M.load(ctx, path)
  if not cluster and not errors then return M.not_available(ctx, "validate") end
  local valid = cluster ~= nil and #(errors or {}) == 0
  if a.options.output == "json" then
    ctx.stdout:write(M.json_report(valid and cluster or nil, errors))
  elseif valid then
    print_summary(ctx, path, M.summarize(cluster))
  else
    M.report_errors(ctx, path, errors)
  end
  return valid and ctx.exit.ok or ctx.exit.failure
end

return M

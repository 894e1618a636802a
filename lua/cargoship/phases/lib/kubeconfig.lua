-- phases.lib.kubeconfig: the admin kubeconfig renamed, pointed at the load balancer, merged into the operator's. Pure.
--
-- YAML in, YAML out (cargoship.yaml); no file is read here: the phase reads the leader's
-- admin kubeconfig (and any file it names) and the operator's file, and hands in the text.
--   M.server(loadbalancer) -> "https://<lb>:6443" (an IPv6 address in brackets)
--   M.parse(text, name) -> doc | nil, why: a kubeconfig as a table ({} for an empty file)
--   M.admin(doc, cluster_name, server, read?) -> entries | nil, why: from the admin
--     kubeconfig, the entries to merge: cluster <name> (its CA, server replaced), user
--     <name>-admin (its credentials), context <name>. A path field (certificate-authority,
--     client-certificate, client-key) is embedded as its -data field: read(path) -> content
--     | nil, why gives the file's bytes (from the leader).
--   M.merge(doc|nil, entries) -> doc, changes: doc (a copy) with the three entries set and
--     current-context <name>, every other entry kept; changes = {"add cluster X", "change
--     user X-admin", "set current-context X", ...} (empty: already merged)
--   M.standalone(entries) -> doc: a kubeconfig holding only the three entries
--   M.render(doc) -> text (keys sorted: the same doc always gives the same bytes)
--   M.secrets(entries) -> the credential strings (for the log's redaction)
-- Nothing here says a credential in a message: entries are named, never shown.
local yaml = require "cargoship.yaml"

local M = {}

M.PORT = 6443

function M.server(lb)
  if type(lb) ~= "string" or lb == "" then error("kubeconfig: a load balancer address is needed", 2) end
  if lb:find(":", 1, true) and not lb:find("^%[") then lb = "[" .. lb .. "]" end
  return string.format("https://%s:%d", lb, M.PORT)
end

local function is_null(v) return v == nil or yaml.is_null(v) end

-- A plain copy: no loader metadata, so what render writes is only what the tables hold;
-- an empty list that was loaded as one stays a list (yaml.dump writes a bare {} as a map).
local function copy(v)
  if type(v) ~= "table" then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  local mt = getmetatable(v)
  if next(out) == nil and mt and type(mt.__yaml) == "table" and mt.__yaml.kind == "seq" then
    setmetatable(out, { __yaml = { kind = "seq" } })
  end
  return out
end

function M.parse(text, name)
  if text == nil or not text:find("%S") then return {} end
  local docs, err = yaml.load(text, name or "kubeconfig")
  if not docs then return nil, err end
  if docs.n > 1 then return nil, (name or "kubeconfig") .. ": more than one YAML document" end
  local doc = docs[1]
  if is_null(doc) then return {} end
  if type(doc) ~= "table" or (#doc > 0) then return nil, (name or "kubeconfig") .. ": not a mapping" end
  for _, list in ipairs { "clusters", "users", "contexts" } do
    local v = doc[list]
    if not is_null(v) and type(v) ~= "table" then
      return nil, string.format("%s: %s is not a list", name or "kubeconfig", list)
    end
  end
  return copy(doc)
end

local function find(list, name)
  if type(list) ~= "table" then return nil end
  for i, e in ipairs(list) do
    if type(e) == "table" and e.name == name then return e, i end
  end
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

-- RFC 4648 base64, padded: what kubeconfig's *-data fields hold.
function M.base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local chars = {}
    for j = 1, 4 do
      local k = (n >> (6 * (4 - j))) & 63
      chars[j] = B64:sub(k + 1, k + 1)
    end
    if not b then chars[3] = "=" end
    if not c then chars[4] = "=" end
    out[#out + 1] = table.concat(chars)
  end
  return table.concat(out)
end

-- path fields embedded as data: {path field, data field}
local EMBED = {
  cluster = { { "certificate-authority", "certificate-authority-data" } },
  user = { { "client-certificate", "client-certificate-data" }, { "client-key", "client-key-data" } },
}

local function embed(t, kind, read)
  for _, pair in ipairs(EMBED[kind]) do
    local path = t[pair[1]]
    if type(path) == "string" and path ~= "" then
      if not read then return nil, "the admin kubeconfig names a file (" .. pair[1] .. ") and none can be read" end
      local bytes, why = read(path)
      if not bytes then return nil, string.format("%s %s: %s", pair[1], path, tostring(why)) end
      t[pair[2]] = M.base64(bytes)
      t[pair[1]] = nil
    end
  end
  return true
end

function M.admin(doc, name, server, read)
  if type(doc) ~= "table" then return nil, "the admin kubeconfig is not a mapping" end
  local ctx_entry = find(doc.contexts, doc["current-context"])
    or (type(doc.contexts) == "table" and doc.contexts[1]) or nil
  local c = type(ctx_entry) == "table" and type(ctx_entry.context) == "table" and ctx_entry.context or {}
  local cl = find(doc.clusters, c.cluster) or (type(doc.clusters) == "table" and doc.clusters[1])
  local us = find(doc.users, c.user) or (type(doc.users) == "table" and doc.users[1])
  if type(cl) ~= "table" or type(cl.cluster) ~= "table" then return nil, "the admin kubeconfig has no cluster" end
  if type(us) ~= "table" or type(us.user) ~= "table" then return nil, "the admin kubeconfig has no user" end
  local cluster, user = copy(cl.cluster), copy(us.user)
  cluster.server = server
  local ok, why = embed(cluster, "cluster", read)
  if not ok then return nil, why end
  ok, why = embed(user, "user", read)
  if not ok then return nil, why end
  local context = { cluster = name, user = name .. "-admin" }
  if type(c.namespace) == "string" then context.namespace = c.namespace end
  return {
    name = name,
    cluster = { name = name, cluster = cluster },
    user = { name = name .. "-admin", user = user },
    context = { name = name, context = context },
  }
end

local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= "table" then return a == b end
  for k, v in pairs(a) do
    if not same(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

-- Sets entry in doc[list] by name: -> "add" | "change" | nil (the same already)
local function put(doc, list, entry)
  if type(doc[list]) ~= "table" then doc[list] = {} end
  local have, i = find(doc[list], entry.name)
  if not have then
    table.insert(doc[list], copy(entry))
    return "add"
  end
  if same(have, entry) then return nil end
  doc[list][i] = copy(entry)
  return "change"
end

function M.merge(doc, entries)
  doc = copy(doc or {})
  local changes = {}
  if doc.apiVersion == nil then doc.apiVersion = "v1" end
  if doc.kind == nil then doc.kind = "Config" end
  if is_null(doc.preferences) then doc.preferences = {} end
  for _, part in ipairs { { "clusters", "cluster" }, { "users", "user" }, { "contexts", "context" } } do
    local entry = entries[part[2]]
    local how = put(doc, part[1], entry)
    if how then changes[#changes + 1] = string.format("%s %s %s", how, part[2], entry.name) end
  end
  if doc["current-context"] ~= entries.name then
    doc["current-context"] = entries.name
    changes[#changes + 1] = "set current-context " .. entries.name
  end
  return doc, changes
end

function M.standalone(entries)
  return (M.merge({}, entries))
end

function M.render(doc)
  return yaml.dump(doc)
end

-- The strings that must never reach a log: keys, tokens, passwords, client certificates.
function M.secrets(entries)
  local out = {}
  local u = entries and entries.user and entries.user.user or {}
  for _, k in ipairs { "client-key-data", "client-certificate-data", "token", "password" } do
    if type(u[k]) == "string" and u[k] ~= "" then out[#out + 1] = u[k] end
  end
  return out
end

return M

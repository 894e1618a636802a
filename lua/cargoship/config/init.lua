-- cargoship.config: loads a cluster file (kind: ZarfCluster), expands ${VAR} when asked, validates it
-- whole and returns a normalized table; or every mistake, each with file:line:col and path.
--
-- Normalized cluster (all names snake_case; lists are 1-based Lua lists in file order):
--   cluster.file, cluster.raw (the parsed document, ${VAR} expanded under expand_env),
--   cluster.warnings = {{file, line, col, path, message, text, level = "warn"|"verbose"}}
--       (what the Go tool accepts and we take too: an undefined profile, a host without
--       a connection; see M.unconnected),
--   cluster.api_version, cluster.name,
--   cluster.encryption = nil | {recipients = {..}, last_modified = "RFC 3339" | nil}
--   cluster.loadbalancer
--   cluster.profiles[name] = {name, concurrency = {kind = "fixed"|"percent"|"unlimited"|
--       "default", value = n}, engine = <engine>, host = <hostcfg>, source}
--   cluster.registries[i] = {name, config_host, source,
--       auth = nil | {user, pass, token},          (decrypted when keys were given)
--       proxy = nil | {url (as written), endpoint (scheme added), host (host[:port]),
--                      rewrite = {{pattern, replacement}, ..}},
--       tls = nil | {ca, ca_file, cert_file, key_file, insecure_skip_verify}}
--   cluster.secrets = plaintexts to mask in every log (decrypted values, plain pass/token);
--   cluster.encrypted = {{path, kind}} values left encrypted (no key given; see secrets)
--   cluster.values = the mapping as parsed ({} when absent; yaml.null kept)
--   cluster.hosts[i] = {index = i, name, role = "controller"|"worker", profile, hostname,
--       private_address, private_interface, os (configurer override),
--       environment = {KEY = "value"}, files = {{name, src, data, dst, dst_dir, perm = "0644",
--       mode = 420, user, group}},
--       engine = <engine>, host = <hostcfg>,
--       connection = nil (no block: M.unconnected) | {kind = "ssh"|"openssh"|"localhost",
--           address, port, user, key_path, options = {k = "v"}, bastion = nil | <ssh connection>, config_path,
--           disable_multiplexing},
--       source = {file, line, col, path = "spec.hosts[0]"}}
--   cluster.phases[i] = {file (as written), path (relative to the cluster file's directory),
--       placement = "before"|"after"|"replace", anchor = phase id, source = {file, line, col,
--       path, file_at, anchor_at}}   (config/phases.lua; loaded by cargoship.pipeline.custom)
--   <engine>  = {labels = {k = "v"}, taints = {"key=value:Effect", ..}}
--   <hostcfg> = {ports = {{port = "6443"|"30000-32767", from, to, protocol}},
--       firewall = {rules = {{key, name, action, direction, source, destination, ingress,
--           egress, port, port_from, port_to, protocol}}},
--       policy = {name = {name, target, ingress, egress, ports}}}
-- Defaults: ssh user "root", port 22; openSSH user/port stay nil (ssh_config decides);
-- rule direction "in", source/destination "any"; policy target "CONTINUE".
-- host.name is the hostname, else the address; ":port" and then "user@" are added only
-- when two hosts would otherwise share a name. Profiles are NOT merged into hosts here:
-- merge_profile does that (the Go tool merges in "Gather host facts").
--
-- Errors are {file, line, col, path, message, text}, sorted by line and column; path is
-- JSON-path style with 0-based indices ("spec.hosts[2].ssh.address").
--
-- Where we are stricter than the Go tool, on purpose: unknown fields anywhere; two hosts
-- with one login (address+port+user, or two localhost entries), one hostname or one
-- privateAddress; label/taint/profile-name syntax
-- Kubernetes would refuse at registration; string fields refuse numbers and booleans
-- (YAML already lost their spelling: 0644 is 420), except map-of-string values (labels,
-- environment, ssh options), where integers and booleans are taken as their text; file
-- `perm` must be a quoted octal string; `dst`/`dstDir` must be absolute; no string but file
-- `data` may hold a NUL (C would cut it there: a user "ro\0ot" logs in as "ro"), and
-- identity fields (ssh/openSSH user, address, keyPath, configPath, options, file names and
-- owners, registry names, TLS paths) hold no control character at all; an address is at
-- most 253 characters (the DNS limit); the file itself at most MAX_FILE bytes.
-- Errors never quote the value of a secret field (auth pass/token, file data, environment
-- values) nor a URL's user-info; a quoted value is cut to 60 bytes, on a character
-- boundary, followed by its length. Every error has a line and column: one with no node of
-- its own (a bare-scalar document) is placed at its document's start.
-- Like the Go tool: "" in a plain-string field is unset (check.blank_absent); an undefined
-- host profile only names the node-role label (a verbose warning); a host without a
-- connection block loads with a warning and apply/exec refuse it.
-- Where we are looser: booleans accept YAML 1.1 yes/no/on/off as Go's yaml.v3 does, and
-- under expand_env a value that came from ${VAR} is re-read as an integer/boolean where one
-- is expected (an expanding tool would have expanded before parsing).
local yaml = require "cargoship.yaml"
local errors = require "cargoship.config.errors"
local expand = require "cargoship.config.expand"
local firewall = require "cargoship.config.firewall"
local profiles = require "cargoship.config.profiles"
local validate = require "cargoship.config.validate"

local M = {}

M.merge_profile = profiles.merge_profile
M.resolve_concurrency = profiles.resolve_concurrency
M.parse_concurrency = profiles.parse_concurrency
M.rule_key = firewall.rule_key
M.format_errors = errors.format

local function single_error(file, line, col, message)
  local e = { file = file, line = line, col = col, path = "", message = message }
  e.text = errors.text(e)
  return { e }
end

-- The YAML layer reports "name:line:col: message" or "path: read: ..."; keep its text and
-- split it into fields.
local function load_error(name, msg)
  local rest = msg:sub(1, #name + 1) == name .. ":" and msg:sub(#name + 2) or nil
  local line, col, text = (rest or ""):match("^(%d+):(%d+): (.*)$")
  local e = { file = name, path = "", text = msg }
  if line then
    e.line, e.col, e.message = tonumber(line), tonumber(col), text
  else
    e.message = rest and rest:gsub("^%s+", "") or msg
  end
  return { e }
end

local function is_empty_doc(d)
  return d == nil or yaml.is_null(d) or (type(d) == "table" and next(d) == nil)
end

-- Returns the document to validate and its index in docs (its start is where an error
-- that has no node of its own is reported: a bare-scalar document has no positions).
local function pick_document(docs, name)
  local candidates = {}
  for i = 1, docs.n or #docs do
    if not is_empty_doc(docs[i]) then candidates[#candidates + 1] = i end
  end
  if #candidates == 0 then
    return nil, single_error(name, 1, 1, "empty file: expected a document with kind: ZarfCluster")
  end
  for _, i in ipairs(candidates) do
    local d = docs[i]
    if type(d) == "table" and d.kind == validate.KIND then return d, i end
  end
  -- One document: validate it, so a wrong kind is reported with everything else.
  if #candidates == 1 then return docs[candidates[1]], candidates[1] end
  local line, col = yaml.where(docs, candidates[1])
  return nil, single_error(name, line or 1, col or 1, string.format(
    "none of the %d documents has kind: ZarfCluster", #candidates))
end

local function from_docs(docs, name, opts)
  local doc, index = pick_document(docs, name)
  -- `false` is a document too (a file holding only "false"): only nil means none was found
  if doc == nil then return nil, index end
  local env = (opts and opts.env) or os.getenv
  local ctx = { file = name, errs = errors.collector(name), warns = errors.collector(name) }
  local line, col = yaml.where(docs, index)
  ctx.errs:set_fallback(line or 1, col or 1)
  ctx.warns:set_fallback(line or 1, col or 1)
  -- The Go tool reads its files literally: "$" changes nothing unless the operator asks.
  if opts and opts.expand_env then ctx.expanded = expand.tree(doc, env, ctx.errs) end
  local cluster = validate.document(ctx, doc)
  if #ctx.errs.list > 0 then return nil, ctx.errs:sorted() end
  cluster.warnings = ctx.warns:sorted()
  -- Decrypting is its own step, on a valid file only (cargoship.secrets); opts.decrypt
  -- carries the key options (secrets.load_options), else the environment alone is tried.
  require("cargoship.secrets").decrypt_cluster(ctx, cluster, opts and opts.decrypt)
  if #ctx.errs.list > 0 then return nil, ctx.errs:sorted() end
  return cluster
end

-- Loads `path`. Values are taken literally unless opts.expand_env (--expand-env): then
-- opts.env(name) -> value|nil supplies ${VAR} (default os.getenv);
-- opts.decrypt = cargoship.secrets.load_options(ctx) says how encrypted values are read.
-- Returns the cluster, or nil and a list of errors.
-- The largest cluster file read: far beyond any real one (the full example is 6 KB), small
-- enough that /dev/zero or a runaway generator is refused in a moment, not when memory is gone.
M.MAX_FILE = 32 * 1024 * 1024

-- Reads path whole, or nil and "path: read: why". Pipes work (`validate <(gen)`): the cap
-- is counted while reading, not taken from the file's size.
local function read_file(path)
  local f, err = io.open(path, "rb")
  if not f then
    local detail = err:sub(1, #path + 2) == path .. ": " and err:sub(#path + 3) or err
    return nil, path .. ": read: " .. detail
  end
  local parts, size = {}, 0
  while true do
    local chunk, rerr = f:read(1 << 16)
    if not chunk then
      if rerr then f:close(); return nil, path .. ": read: " .. rerr end
      break
    end
    size = size + #chunk
    if size > M.MAX_FILE then
      f:close()
      return nil, string.format("%s: read: larger than %d bytes, which is no cluster file", path, M.MAX_FILE)
    end
    parts[#parts + 1] = chunk
  end
  f:close()
  return table.concat(parts)
end

function M.load(path, opts)
  local text, err = read_file(path)
  if not text then return nil, load_error(path, err) end
  local docs, msg = yaml.load(text, path)
  if not docs then return nil, load_error(path, msg) end
  return from_docs(docs, path, opts)
end

function M.load_string(text, name, opts)
  name = name or "<string>"
  local docs, msg = yaml.load(text, name)
  if not docs then return nil, load_error(name, msg) end
  return from_docs(docs, name, opts)
end

-- The hosts that have no connection block (apply and exec refuse them before connecting
-- anywhere), and a message naming them, or nil.
function M.unconnected(cluster, hosts)
  local names, list = {}, {}
  for _, h in ipairs(hosts or cluster.hosts or {}) do
    if not h.connection then
      list[#list + 1] = h
      names[#names + 1] = string.format("%s (%s)", h.name, h.source and h.source.path or "?")
    end
  end
  if #list == 0 then return nil end
  return list, string.format("%s: no connection block (ssh, openSSH or localhost: true) for %s; "
    .. "nothing was done", cluster.file or "cluster", table.concat(names, ", "))
end

-- Hosts by name, address or hostname (sel.hosts: "a,b" or a list) and/or sel.role.
-- Returns hosts in file order, or nil and a message naming the valid choices.
function M.select_hosts(cluster, sel)
  sel = sel or {}
  local wanted = sel.hosts
  if type(wanted) == "string" then
    local list = {}
    for part in wanted:gmatch("[^,]+") do
      part = part:match("^%s*(.-)%s*$")
      if part ~= "" then list[#list + 1] = part end
    end
    wanted = list
  end
  if sel.role and sel.role ~= "controller" and sel.role ~= "worker" then
    return nil, string.format("unknown role %s: expected \"controller\" or \"worker\"",
      errors.quote(sel.role))
  end
  local matched = {}
  if wanted and #wanted > 0 then
    local valid = {}
    for _, h in ipairs(cluster.hosts) do valid[#valid + 1] = h.name end
    for _, w in ipairs(wanted) do
      local found = false
      for _, h in ipairs(cluster.hosts) do
        local c = h.connection or {}
        if w == h.name or w == h.hostname or w == c.address then matched[h] = true; found = true end
      end
      if not found then
        local q = {}
        for i, v in ipairs(valid) do q[i] = errors.quote(v) end
        return nil, string.format("unknown host %s%s; valid hosts: %s", errors.quote(w),
          errors.did_you_mean(w, valid), table.concat(q, ", "))
      end
    end
  end
  local out = {}
  for _, h in ipairs(cluster.hosts) do
    if (not wanted or #wanted == 0 or matched[h]) and (not sel.role or h.role == sel.role) then
      out[#out + 1] = h
    end
  end
  return out
end

return M

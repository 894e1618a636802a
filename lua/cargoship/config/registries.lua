-- cargoship.config.registries: `spec.config.registries` (mirrors, credentials, TLS) and the
-- rules the Go tool enforces in code rather than in its schema.
local yaml = require "cargoship.yaml"
local check = require "cargoship.config.check"
local errors = require "cargoship.config.errors"
local net = require "cargoship.config.net"
local regex = require "cargoship.config.regex"

local M = {}

local quote, join, describe = errors.quote, errors.join, errors.describe

-- Ciphertext is told apart by its header, so one file may mix Ansible Vault and age.
function M.is_encrypted(s)
  if type(s) ~= "string" then return false end
  local t = s:match("^%s*(.*)$")
  return t:sub(1, 14) == "$ANSIBLE_VAULT" or t:sub(1, 34) == "-----BEGIN AGE ENCRYPTED FILE-----"
end

-- url with anything between "scheme://" (or the start) and the authority's last "@"
-- replaced by "******".
function M.hide_userinfo(url)
  local head, rest = url:match("^([%a][%w+.-]*://)(.*)$")
  if not head then head, rest = "", url end
  local authority, tail = rest:match("^([^/?#]*)(.*)$")
  local at = authority:match("^.*()@")
  if not at then return url end
  return head .. "******" .. authority:sub(at) .. tail
end

-- What Go's pem.Decode + a CERTIFICATE type check would accept; nil when fine.
-- Like pem.Decode, a BEGIN line that does not end in "-----" is skipped with the rest of its
-- line; plain searches line by line keep this linear (an unanchored pattern retried at every
-- "-----BEGIN " of a long value took minutes).
local function pem_begin(s)
  local pos = 1
  while true do
    local b = s:find("-----BEGIN ", pos, true)
    if not b then return nil end
    local eol = s:find("\n", b, true)
    if not eol then return nil end
    local line = s:sub(b + 11, eol - 1):gsub("[ \t\r]+$", "")
    if #line >= 5 and line:sub(-5) == "-----" then return line:sub(1, -6), eol + 1 end
    pos = eol + 1
  end
end

function M.pem_problem(s)
  local typ, after = pem_begin(s)
  if not typ then return "expected a PEM block (-----BEGIN CERTIFICATE-----)" end
  if typ ~= "CERTIFICATE" then
    return string.format("expected a PEM block of type CERTIFICATE, got %s", quote(typ))
  end
  local stop = s:find("-----END CERTIFICATE-----", after, true)
  if not stop then return "PEM block has no -----END CERTIFICATE----- line" end
  local body = s:sub(after, stop - 1):gsub("%s", "")
  if body == "" or #body % 4 ~= 0 or not body:match("^[A-Za-z0-9+/]+=?=?$") then
    return "PEM block body is not valid base64"
  end
  return nil
end

local function secrets_kind(v)
  return require("cargoship.secrets").kind(v)
end

local function decode_auth(ctx, reg, rpath)
  local a = check.mapping(ctx, reg, "auth", rpath)
  if not a then return nil end
  local apath = join(rpath, "auth")
  check.fields(ctx, a, apath, { "user", "pass", "token" })
  local out = {
    -- an encrypted user is armored over lines: its plain text is checked once decrypted
    user = check.string(ctx, a, "user", apath, { nonempty = true,
      word = not (type(a.user) == "string" and secrets_kind(a.user)) }),
    pass = check.string(ctx, a, "pass", apath, { nonempty = true, secret = true }),
    token = check.string(ctx, a, "token", apath, { nonempty = true, secret = true }),
  }
  local has_user, has_pass = check.present(a, "user"), check.present(a, "pass")
  if has_user ~= has_pass then
    ctx.errs:at_node(a, apath, has_user and "auth.user needs auth.pass" or "auth.pass needs auth.user")
  end
  if not (out.user or out.pass or out.token) then return nil end
  return out
end

local function decode_proxy(ctx, reg, rpath)
  local p = check.mapping(ctx, reg, "proxy", rpath)
  if not p then return nil end
  local ppath = join(rpath, "proxy")
  check.fields(ctx, p, ppath, { "url", "rewrite" })
  local out = { rewrite = {} }
  local url = check.string(ctx, p, "url", ppath, { required = true, word = true })
  if url then
    local u, why = net.parse_url(url)
    if not u then
      -- the URL's user-info is a password more often than not: never print it back
      local shown = M.hide_userinfo(url)
      ctx.errs:at_value(p, "url", join(ppath, "url"),
        string.format("invalid mirror URL %s: %s", quote(shown), shown == url and why or
          "must not carry user-info (put credentials in auth)"))
    else
      out.url, out.endpoint, out.host = url, u.url, u.host
    end
  end
  local rw = check.mapping(ctx, p, "rewrite", ppath)
  if rw then
    local wpath = join(ppath, "rewrite")
    for _, pattern in ipairs(check.keys(rw)) do
      local ok, why = regex.check(pattern)
      if not ok then
        ctx.errs:at_key(rw, pattern, join(wpath, pattern),
          string.format("rewrite pattern does not compile as RE2: %s", why))
      end
      local repl = check.string(ctx, rw, pattern, wpath, { required = true })
      if ok and repl then out.rewrite[#out.rewrite + 1] = { pattern = pattern, replacement = repl } end
    end
  end
  return out
end

local function decode_tls(ctx, reg, rpath)
  local t = check.mapping(ctx, reg, "tls", rpath)
  if not t then return nil end
  local tpath = join(rpath, "tls")
  check.fields(ctx, t, tpath, { "ca", "caFile", "certFile", "keyFile", "insecureSkipVerify" })
  local out = {
    ca = check.string(ctx, t, "ca", tpath, { nonempty = true }),
    ca_file = check.string(ctx, t, "caFile", tpath, { nonempty = true, word = true }),
    cert_file = check.string(ctx, t, "certFile", tpath, { nonempty = true, word = true }),
    key_file = check.string(ctx, t, "keyFile", tpath, { nonempty = true, word = true }),
    insecure_skip_verify = check.boolean(ctx, t, "insecureSkipVerify", tpath),
  }
  if check.present(t, "ca") and check.present(t, "caFile") then
    ctx.errs:at_node(t, tpath, "ca and caFile are mutually exclusive")
  end
  if out.ca and not M.is_encrypted(out.ca) then
    local why = M.pem_problem(out.ca)
    if why then ctx.errs:at_value(t, "ca", join(tpath, "ca"), why) end
  end
  if check.present(t, "certFile") ~= check.present(t, "keyFile") then
    ctx.errs:at_node(t, tpath, "certFile and keyFile must be given together")
  end
  if next(out) == nil then return nil end
  return out
end

-- Credentials compare field by field; two ciphertexts compare equal because their nonces
-- differ even when the secret does not.
local function same_secret(a, b)
  if a == b then return true end
  return M.is_encrypted(a) and M.is_encrypted(b)
end

local AUTH_FIELDS = { "user", "pass", "token" }
local TLS_FIELDS = { "ca", "ca_file", "cert_file", "key_file", "insecure_skip_verify" }

local function same_block(a, b, fields)
  a, b = a or {}, b or {}
  for _, f in ipairs(fields) do
    local x, y = a[f], b[f]
    if f == "insecure_skip_verify" then x, y = x == true, y == true end
    if not same_secret(x, y) then return false end
  end
  return true
end

local function decode_entry(ctx, reg, rpath)
  check.fields(ctx, reg, rpath, { "name", "auth", "proxy", "tls" })
  local out = { source = { file = ctx.file, path = rpath } }
  local name = check.string(ctx, reg, "name", rpath, { required = true, word = true })
  if name then
    if name:find("://", 1, true) or name:find("/", 1, true) or name:find("%s") then
      ctx.errs:at_value(reg, "name", join(rpath, "name"),
        "registry name must be a registry host (like \"docker.io\" or \"reg.example:5000\") or \"*\","
        .. " without scheme, path or spaces, got " .. describe(name))
      name = nil
    end
  end
  out.name = name
  out.auth = decode_auth(ctx, reg, rpath)
  out.proxy = decode_proxy(ctx, reg, rpath)
  out.tls = decode_tls(ctx, reg, rpath)
  local has_proxy = check.present(reg, "proxy")
  local a, t = reg.auth, reg.tls
  local has_auth = check.present(reg, "auth") and type(a) == "table"
    and check.count_present(a, AUTH_FIELDS) > 0
  -- An empty tls block configures nothing, so it does not count.
  local has_tls = check.present(reg, "tls") and type(t) == "table" and next(t) ~= nil
  if not (has_proxy or has_auth or has_tls) then
    ctx.errs:at_node(reg, rpath, "a registry entry needs at least one of proxy.url, auth or tls")
  end
  out.config_host = (out.proxy and out.proxy.host) or name
  return out
end

-- Decodes spec.config.registries into a list; checks names and config-host consistency.
function M.decode(ctx, cfg, path)
  local list = check.sequence(ctx, cfg, "registries", path)
  local out = {}
  if not list then return out end
  local lpath = join(path, "registries")
  local by_name, by_host = {}, {}
  for i = 1, #list do
    local rpath = join(lpath, i)
    local reg = check.mapping(ctx, list, i, lpath, { required = true })
    if reg then
      local r = decode_entry(ctx, reg, rpath)
      local line, col = yaml.where(reg)
      r.source.line, r.source.col = line, col
      out[#out + 1] = r
      if r.name then
        if by_name[r.name] then
          ctx.errs:at_value(reg, "name", join(rpath, "name"),
            string.format("duplicate registry name %s (first at %s)", quote(r.name), by_name[r.name]))
        else
          by_name[r.name] = rpath
        end
      end
      local h = r.config_host
      local first = h and by_host[h]
      if first then
        local same = same_block(first.r.auth, r.auth, AUTH_FIELDS)
          and same_block(first.r.tls, r.tls, TLS_FIELDS)
        if not same then
          ctx.errs:at_node(reg, rpath, string.format("registry config host %s is also used by %s"
            .. " with different auth or tls; entries for one host must agree", quote(h), first.path))
        end
      elseif h then
        by_host[h] = { r = r, path = rpath }
      end
    end
  end
  return out
end

return M

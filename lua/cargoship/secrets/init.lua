-- cargoship.secrets: encrypted cluster-file values (Ansible Vault, age), their keys, the loader decrypt step.
--
-- Encryptable values: spec.config.registries[].auth.{user,pass,token} and .tls.ca. Each
-- is told apart by its header, so one file may mix both formats. Key material:
--   Ansible Vault: --vault-password-file, else CARGOSHIP_VAULT_PASSWORD, else
--                  ANSIBLE_VAULT_PASSWORD (the password itself, not a file);
--   age:           --age-identity-file (repeatable): age identities or an OpenSSH
--                  ed25519 private key.
-- Decrypted text stays in memory: the loader lists it in cluster.secrets so every logger
-- masks it, and nothing here writes it anywhere.
local ansible_vault = require "cargoship.secrets.ansible_vault"
local age = require "cargoship.secrets.age"

local M = {}

M.ansible_vault, M.age = ansible_vault, age

-- Where encryptable values live inside one registries[] entry: block, key, normalized key.
M.FIELDS = {
  { block = "auth", key = "user", norm = "user" },
  { block = "auth", key = "pass", norm = "pass" },
  { block = "auth", key = "token", norm = "token" },
  { block = "tls", key = "ca", norm = "ca" },
}

M.KIND_NAMES = { ["ansible-vault"] = "Ansible Vault", age = "age" }

-- "ansible-vault" | "age" | nil
function M.kind(v)
  if ansible_vault.is(v) then return "ansible-vault" end
  if age.is(v) then return "age" end
  return nil
end

local PASSWORD_HELP = "--vault-password-file, CARGOSHIP_VAULT_PASSWORD or ANSIBLE_VAULT_PASSWORD"
local IDENTITY_HELP = "--age-identity-file"

local Ring = {}
Ring.__index = Ring

-- A key ring reads its files once, when a value first needs them.
-- o = {vault_password_file = path, age_identity_files = {path, ..}, env = function(name)}
function M.keyring(o)
  o = o or {}
  local files = o.age_identity_files
  if type(files) == "string" then files = { files } end
  return setmetatable({ o = o, env = o.env or os.getenv, id_files = files or {} }, Ring)
end

-- Which kinds of ciphertext this ring can try at all.
function Ring:has(kind)
  if kind == "age" then return #self.id_files > 0 end
  if self.o.vault_password_file then return true end
  local e1, e2 = self.env("CARGOSHIP_VAULT_PASSWORD"), self.env("ANSIBLE_VAULT_PASSWORD")
  return (e1 ~= nil and e1 ~= "") or (e2 ~= nil and e2 ~= "")
end

-- -> password | nil, why
function Ring:password()
  if self.pw ~= nil or self.pw_err then return self.pw, self.pw_err end
  local pw, why
  if self.o.vault_password_file then
    pw, why = ansible_vault.read_password_file(self.o.vault_password_file)
  else
    for _, name in ipairs({ "CARGOSHIP_VAULT_PASSWORD", "ANSIBLE_VAULT_PASSWORD" }) do
      local v = self.env(name)
      if v and v ~= "" then pw = v; break end
    end
    if not pw then why = "no vault password was given (" .. PASSWORD_HELP .. ")" end
  end
  self.pw, self.pw_err = pw, why
  return pw, why
end

-- -> list of age identities | nil, why
function Ring:identities()
  if self.ids or self.ids_err then return self.ids, self.ids_err end
  if #self.id_files == 0 then
    self.ids_err = "no age identity was given (" .. IDENTITY_HELP .. ")"
    return nil, self.ids_err
  end
  local all = {}
  for _, path in ipairs(self.id_files) do
    local f, err = io.open(path, "rb")
    if not f then
      self.ids_err = "cannot read the age identity file: " .. tostring(err)
      return nil, self.ids_err
    end
    local text = f:read("a") or ""
    f:close()
    local list, why = age.parse_identities(text)
    if not list then
      self.ids_err = "the age identity file " .. path .. ": " .. why
      return nil, self.ids_err
    end
    for _, id in ipairs(list) do all[#all + 1] = id end
  end
  self.ids = all
  return all
end

-- -> plaintext | nil, why
function M.decrypt(value, ring)
  local kind = M.kind(value)
  if kind == "ansible-vault" then
    local pw, why = ring:password()
    if not pw then return nil, why end
    return ansible_vault.decrypt(value, pw)
  elseif kind == "age" then
    local ids, why = ring:identities()
    if not ids then return nil, why end
    return age.decrypt(value, ids)
  end
  return nil, "not an encrypted value"
end

-- The loader's key options from a command's context: the global flags and the environment.
-- Only apply needs every value decrypted; validate decrypts what it has keys for.
function M.load_options(ctx)
  local o = ctx.options or {}
  return {
    vault_password_file = o.vault_password_file,
    age_identity_files = o.age_identity_file,
    env = ctx.env,
    required = ctx.command == "apply",
  }
end

local function redact_list(cluster, s)
  if type(s) == "string" and s ~= "" then cluster.secrets[#cluster.secrets + 1] = s end
end

-- The loader's decrypt step, run on a valid cluster: replaces each ciphertext in
-- cluster.registries by its plaintext; lists the plaintexts and plain credentials in
-- cluster.secrets (for log redaction) and what stayed encrypted (no key given, not
-- required) in cluster.encrypted = {{path, kind}}. A value that cannot be decrypted is
-- an error at its own file:line. o = M.load_options(..) or nil (environment only).
function M.decrypt_cluster(ctx, cluster, o)
  o = o or { env = ctx.env }
  local ring = M.keyring(o)
  local registries = require "cargoship.config.registries"
  local join = require("cargoship.config.errors").join
  cluster.secrets, cluster.encrypted = {}, {}
  local raw = cluster.raw and cluster.raw.spec and cluster.raw.spec.config
  raw = raw and raw.registries or {}
  for i, reg in ipairs(cluster.registries or {}) do
    for _, f in ipairs(M.FIELDS) do
      local block, container = reg[f.block], raw[i] and raw[i][f.block]
      local value = block and block[f.norm]
      local kind = M.kind(value)
      local path = join(join(join("spec.config.registries", i), f.block), f.key)
      if kind and not o.required and not ring:has(kind) then
        cluster.encrypted[#cluster.encrypted + 1] = { path = path, kind = kind }
      elseif kind then
        local plain, why = M.decrypt(value, ring)
        if not plain then
          ctx.errs:at_value(container, f.key, path, string.format("cannot decrypt this %s value: %s",
            M.KIND_NAMES[kind], why))
        else
          block[f.norm] = plain
          redact_list(cluster, plain)
          local bad = f.key == "ca" and registries.pem_problem(plain)
          -- a ciphertext is armored over lines; the user it hides is one word, as in plain text
          if f.key == "user" then
            bad = require("cargoship.config.check").control_problem(plain, true)
          end
          if bad then ctx.errs:at_value(container, f.key, path, "after decryption: " .. bad) end
        end
      elseif f.key == "pass" or f.key == "token" then
        redact_list(cluster, value)
      end
    end
  end
end

return M

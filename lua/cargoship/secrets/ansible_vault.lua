-- cargoship.secrets.ansible_vault: Ansible Vault 1.1/1.2 AES256 values, encrypted and decrypted in-process.
--
-- The format, as ansible-vault writes it:
--   $ANSIBLE_VAULT;1.1;AES256            (1.2 adds ";<vault id>")
--   hex( hex(salt) "\n" hex(hmac) "\n" hex(ciphertext) ), wrapped at 80 columns
-- PBKDF2-HMAC-SHA256(password, salt, 10000) gives 80 bytes: the AES-256-CTR key, the
-- HMAC-SHA256 key and the 16-byte initial counter. The HMAC covers the ciphertext and is
-- checked, in constant time, before anything is decrypted; the plaintext is PKCS#7 padded.
local crypto = require "cargoship.crypto"

local M = {}

M.ITERATIONS = 10000

local function hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

local function unhex(h)
  if #h % 2 ~= 0 or h:find("[^0-9a-fA-F]") then return nil end
  return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end))
end

-- Whether s carries an Ansible Vault header (leading whitespace allowed, as YAML may leave).
function M.is(s)
  return type(s) == "string" and s:match("^%s*%$ANSIBLE_VAULT;") ~= nil
end

local function keys(password, salt)
  local k = crypto.pbkdf2_sha256(password, salt, M.ITERATIONS, 80)
  return k:sub(1, 32), k:sub(33, 64), k:sub(65, 80)
end

-- Splits a vault text into its header fields and the three binary parts.
-- -> {version, cipher, vault_id, salt, hmac, ciphertext} | nil, why
function M.parse(text)
  local header, rest = text:match("^%s*(%$ANSIBLE_VAULT;[^\r\n]*)\r?\n(.*)$")
  if not header then return nil, "not an Ansible Vault value (no $ANSIBLE_VAULT;... header line)" end
  local fields = {}
  for f in (header .. ";"):gmatch("([^;]*);") do fields[#fields + 1] = f:match("^%s*(.-)%s*$") end
  local version, cipher, vault_id = fields[2], fields[3], fields[4]
  if version ~= "1.1" and version ~= "1.2" then
    return nil, string.format("unsupported Ansible Vault version %q (1.1 and 1.2 are supported)", tostring(version))
  end
  if cipher ~= "AES256" then
    return nil, string.format("unsupported Ansible Vault cipher %q (only AES256 exists)", tostring(cipher))
  end
  if version == "1.2" and (vault_id == nil or vault_id == "") then
    return nil, "an Ansible Vault 1.2 header needs a vault id ($ANSIBLE_VAULT;1.2;AES256;<id>)"
  end
  local inner = unhex((rest:gsub("%s", "")))
  if not inner then return nil, "the Ansible Vault body is not hexadecimal" end
  local salt_h, hmac_h, ct_h = inner:match("^([^\n]*)\n([^\n]*)\n([^\n]*)$")
  local salt, hmac, ct = unhex(salt_h or ""), unhex(hmac_h or ""), unhex(ct_h or "")
  if not (salt and hmac and ct) or #salt == 0 or #hmac ~= 32 or #ct == 0 or #ct % 16 ~= 0 then
    return nil, "the Ansible Vault body is malformed (expected salt, HMAC and ciphertext)"
  end
  return { version = version, cipher = cipher, vault_id = version == "1.2" and vault_id or nil,
    salt = salt, hmac = hmac, ciphertext = ct }
end

-- -> plaintext | nil, why
function M.decrypt(text, password)
  local v, why = M.parse(text)
  if not v then return nil, why end
  local key, mac_key, iv = keys(password, v.salt)
  if not crypto.equal(crypto.hmac_sha256(mac_key, v.ciphertext), v.hmac) then
    return nil, "wrong vault password (the HMAC does not match)"
  end
  local padded = crypto.aes256_ctr(key, iv, v.ciphertext)
  local pad = padded:byte(-1)
  if pad < 1 or pad > 16 or padded:sub(-pad) ~= string.rep(string.char(pad), pad) then
    return nil, "the decrypted value has invalid PKCS#7 padding"
  end
  return padded:sub(1, -pad - 1)
end

-- -> vault text ending in "\n" (version 1.2 when a vault id is given)
function M.encrypt(plaintext, password, vault_id)
  assert(type(password) == "string" and password ~= "", "ansible_vault.encrypt: empty password")
  local salt = crypto.random(32)
  local key, mac_key, iv = keys(password, salt)
  local pad = 16 - #plaintext % 16
  local ct = crypto.aes256_ctr(key, iv, plaintext .. string.rep(string.char(pad), pad))
  local body = hex(hex(salt) .. "\n" .. hex(crypto.hmac_sha256(mac_key, ct)) .. "\n" .. hex(ct))
  local lines = { vault_id and ("$ANSIBLE_VAULT;1.2;AES256;" .. vault_id) or "$ANSIBLE_VAULT;1.1;AES256" }
  for i = 1, #body, 80 do lines[#lines + 1] = body:sub(i, i + 79) end
  return table.concat(lines, "\n") .. "\n"
end

-- The password in a --vault-password-file: ansible-vault strips surrounding whitespace.
-- -> password | nil, why
function M.read_password_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, "cannot read the vault password file: " .. tostring(err) end
  local s = f:read("a") or ""
  f:close()
  s = s:match("^%s*(.-)%s*$")
  if s == "" then return nil, "the vault password file " .. path .. " is empty" end
  return s
end

return M

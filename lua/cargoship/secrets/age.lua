-- cargoship.secrets.age: armored age (age-encryption.org/v1) values for X25519 and ssh-ed25519 keys, in-process.
--
-- A file: "age-encryption.org/v1\n", one stanza per recipient ("-> type args\n" and a base64
-- body wrapped at 64 columns, ending with a shorter line), "--- " and the header MAC, then
-- the payload: a 16-byte nonce and ChaCha20-Poly1305 chunks of 64 KiB (STREAM: an 11-byte
-- big-endian counter and a last-chunk flag byte as the nonce). Every key is HKDF-SHA256.
-- The 16-byte file key is wrapped per recipient:
--   X25519:      wrap = HKDF(X25519(e, R), share || R, "age-encryption.org/v1/X25519")
--   ssh-ed25519: R is the key's Montgomery form, the shared secret is multiplied by
--                tweak = HKDF("", ssh wire key, label), and the stanza names the key by
--                SHA-256(wire key)[:4], label "age-encryption.org/v1/ssh-ed25519".
-- Armor is strict PEM ("AGE ENCRYPTED FILE", padded base64 in 64 columns).
local crypto = require "cargoship.crypto"

local M = {}

local VERSION = "age-encryption.org/v1"
local X25519_LABEL = "age-encryption.org/v1/X25519"
local SSH_LABEL = "age-encryption.org/v1/ssh-ed25519"
local BEGIN = "-----BEGIN AGE ENCRYPTED FILE-----"
local END = "-----END AGE ENCRYPTED FILE-----"
local CHUNK = 64 * 1024
local ZERO_NONCE = string.rep("\0", 12)

-- ---- base64 (RFC 4648; age's header is unpadded, its armor padded) --------------------

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64_INDEX = {}
for i = 1, 64 do B64_INDEX[B64:byte(i)] = i - 1 end

local function b64_encode(s, pad)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = (a << 16) | ((b or 0) << 8) | (c or 0)
    local k = c and 4 or (b and 3 or 2)
    for j = 1, k do
      local idx = (n >> (18 - 6 * (j - 1))) & 63
      out[#out + 1] = B64:sub(idx + 1, idx + 1)
    end
    if pad then out[#out + 1] = string.rep("=", 4 - k) end
  end
  return table.concat(out)
end

-- Canonical decoding only: the re-encoding must give back the same text, so no two texts
-- name one ciphertext (age requires this of its decoders).
local function b64_decode(s, pad)
  local body = s
  if pad then
    if #s % 4 ~= 0 then return nil end
    body = s:gsub("==?$", "", 1)
  end
  local out, bits, nbits = {}, 0, 0
  for i = 1, #body do
    local v = B64_INDEX[body:byte(i)]
    if not v then return nil end
    bits, nbits = (bits << 6) | v, nbits + 6
    if nbits >= 8 then
      nbits = nbits - 8
      out[#out + 1] = string.char((bits >> nbits) & 255)
      bits = bits & ((1 << nbits) - 1)
    end
  end
  local raw = table.concat(out)
  if b64_encode(raw, pad) ~= s then return nil end
  return raw
end
M.b64_encode, M.b64_decode = b64_encode, b64_decode

-- ---- bech32 (BIP 173, no length limit, as age uses it) -------------------------------

local CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
local CHARSET_INDEX = {}
for i = 1, 32 do CHARSET_INDEX[CHARSET:byte(i)] = i - 1 end

local function polymod(values)
  local gen = { 0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3 }
  local chk = 1
  for _, v in ipairs(values) do
    local top = chk >> 25
    chk = ((chk & 0x1ffffff) << 5) ~ v
    for i = 1, 5 do
      if (top >> (i - 1)) & 1 == 1 then chk = chk ~ gen[i] end
    end
  end
  return chk
end

local function hrp_expand(hrp)
  local out = {}
  for i = 1, #hrp do out[#out + 1] = hrp:byte(i) >> 5 end
  out[#out + 1] = 0
  for i = 1, #hrp do out[#out + 1] = hrp:byte(i) & 31 end
  return out
end

local function convert_bits(data, from, to, pad)
  local acc, bits, out, maxv = 0, 0, {}, (1 << to) - 1
  for _, v in ipairs(data) do
    acc, bits = (acc << from) | v, bits + from
    while bits >= to do
      bits = bits - to
      out[#out + 1] = (acc >> bits) & maxv
    end
  end
  if pad then
    if bits > 0 then out[#out + 1] = (acc << (to - bits)) & maxv end
  elseif bits >= from or ((acc << (to - bits)) & maxv) ~= 0 then
    return nil
  end
  return out
end

function M.bech32_encode(hrp, bytes)
  local data = convert_bits({ bytes:byte(1, -1) }, 8, 5, true)
  local values = hrp_expand(hrp)
  for _, v in ipairs(data) do values[#values + 1] = v end
  for _ = 1, 6 do values[#values + 1] = 0 end
  local pm = polymod(values) ~ 1
  for i = 0, 5 do data[#data + 1] = (pm >> (5 * (5 - i))) & 31 end
  local out = {}
  for i, v in ipairs(data) do out[i] = CHARSET:sub(v + 1, v + 1) end
  return hrp .. "1" .. table.concat(out)
end

-- -> hrp (lower case), bytes | nil, why
function M.bech32_decode(s)
  if s:lower() ~= s and s:upper() ~= s then return nil, "mixed case" end
  s = s:lower()
  local pos = s:match("^.*()1")
  if not pos or pos < 2 or #s - pos < 6 then return nil, "no data part" end
  local hrp, values = s:sub(1, pos - 1), {}
  for i = pos + 1, #s do
    local v = CHARSET_INDEX[s:byte(i)]
    if not v then return nil, "invalid character" end
    values[#values + 1] = v
  end
  local check = hrp_expand(hrp)
  for _, v in ipairs(values) do check[#check + 1] = v end
  if polymod(check) ~= 1 then return nil, "bad checksum" end
  local bytes = convert_bits({ table.unpack(values, 1, #values - 6) }, 5, 8, false)
  if not bytes then return nil, "bad padding" end
  return hrp, string.char(table.unpack(bytes))
end

-- ---- SSH keys -------------------------------------------------------------------------

local function ssh_string(s, pos)
  if #s < pos + 3 then return nil end
  local n = string.unpack(">I4", s, pos)
  if #s < pos + 3 + n then return nil end
  return s:sub(pos + 4, pos + 3 + n), pos + 4 + n
end

local function ssh_wire(pub)
  return string.pack(">s4s4", "ssh-ed25519", pub)
end

local function ssh_recipient_of(wire, pub)
  local pk, why = crypto.ed25519_to_x25519(pub)
  if not pk then return nil, why end
  return { kind = "ssh-ed25519", wire = wire, pk = pk, tag = crypto.digest("sha256", wire):sub(1, 4),
    tweak = crypto.hkdf_sha256("", wire, SSH_LABEL, 32) }
end

-- An "ssh-ed25519 AAAA... [comment]" line. -> recipient | nil, why
local function parse_ssh_public(s)
  local typ, b64 = s:match("^%s*(%S+)%s+(%S+)")
  if typ ~= "ssh-ed25519" then
    return nil, "only ssh-ed25519 SSH keys are supported (got " .. tostring(typ) .. ")"
  end
  local wire = b64 and b64_decode(b64, true)
  local name, pos, pub, stop
  if wire then name, pos = ssh_string(wire, 1) end
  if pos then pub, stop = ssh_string(wire, pos) end
  if name ~= "ssh-ed25519" or not pub or #pub ~= 32 or stop ~= #wire + 1 then
    return nil, "malformed ssh-ed25519 public key"
  end
  return ssh_recipient_of(wire, pub)
end

-- An unencrypted OpenSSH private key file (openssh-key-v1). -> identity | nil, why
local function parse_openssh_private(text)
  local b64 = text:match("%-%-%-%-%-BEGIN OPENSSH PRIVATE KEY%-%-%-%-%-(.-)%-%-%-%-%-END OPENSSH PRIVATE KEY%-%-%-%-%-")
  local blob = b64 and b64_decode((b64:gsub("%s", "")), true)
  local magic = "openssh-key-v1\0"
  if not blob or blob:sub(1, #magic) ~= magic then return nil, "malformed OpenSSH private key" end
  local cipher, pos = ssh_string(blob, #magic + 1)
  local kdf, kdfopts, priv
  if cipher then kdf, pos = ssh_string(blob, pos) end
  if kdf then kdfopts, pos = ssh_string(blob, pos) end
  if not kdfopts then return nil, "malformed OpenSSH private key" end
  if cipher ~= "none" or kdf ~= "none" then
    return nil, "the OpenSSH key is passphrase-protected; age identities must be unencrypted here"
      .. " (decrypt a copy with ssh-keygen -p -N '' -f COPY)"
  end
  if #blob < pos + 3 or string.unpack(">I4", blob, pos) ~= 1 then return nil, "expected exactly one key" end
  local _
  _, pos = ssh_string(blob, pos + 4)
  if pos then priv = ssh_string(blob, pos) end
  if not priv or #priv < 8 then return nil, "malformed OpenSSH private key" end
  local c1, c2 = string.unpack(">I4I4", priv)
  if c1 ~= c2 then return nil, "malformed OpenSSH private key (check words differ)" end
  local typ, p = ssh_string(priv, 9)
  if typ ~= "ssh-ed25519" then
    return nil, "only ssh-ed25519 SSH keys are supported as age identities (got " .. tostring(typ) .. ")"
  end
  local pub, sk
  pub, p = ssh_string(priv, p)
  if p then sk = ssh_string(priv, p) end
  if not pub or #pub ~= 32 or not sk or #sk ~= 64 then return nil, "malformed ssh-ed25519 private key" end
  local seed = sk:sub(1, 32)
  if crypto.ed25519_public(seed) ~= pub or sk:sub(33) ~= pub then
    return nil, "the ssh-ed25519 private key does not match its public key"
  end
  local r, why = ssh_recipient_of(ssh_wire(pub), pub)
  if not r then return nil, why end
  r.scalar = crypto.digest("sha512", seed):sub(1, 32)
  return r
end

-- ---- recipients and identities --------------------------------------------------------

-- "age1..." or "ssh-ed25519 AAAA... [comment]". -> recipient | nil, why
function M.parse_recipient(s)
  s = s:match("^%s*(.-)%s*$")
  if s:match("^ssh%-") then return parse_ssh_public(s) end
  local hrp, key = M.bech32_decode(s)
  if hrp ~= "age" or not key or #key ~= 32 then
    return nil, "not an age recipient (age1...) or ssh-ed25519 public key: " .. s:sub(1, 20)
  end
  return { kind = "X25519", pk = key }
end

-- An identity file: AGE-SECRET-KEY-1... lines (# comments), or an OpenSSH ed25519 private
-- key. -> list of identities | nil, why
function M.parse_identities(text)
  if text:find("BEGIN OPENSSH PRIVATE KEY", 1, true) then
    local id, why = parse_openssh_private(text)
    if not id then return nil, why end
    return { id }
  end
  local list, n = {}, 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    line = line:match("^%s*(.-)%s*$")
    if line ~= "" and line:sub(1, 1) ~= "#" then
      local hrp, key = M.bech32_decode(line)
      if hrp ~= "age-secret-key-" or not key or #key ~= 32 then
        return nil, string.format("line %d is not an age identity (AGE-SECRET-KEY-1...)", n)
      end
      list[#list + 1] = { kind = "X25519", scalar = key, pk = crypto.x25519_public(key) }
    end
  end
  if #list == 0 then return nil, "no identity in the file" end
  return list
end

-- The text a person writes for a recipient (age1... or the SSH public key line).
function M.recipient_string(r)
  if r.kind == "X25519" then return M.bech32_encode("age", r.pk) end
  return "ssh-ed25519 " .. b64_encode(r.wire, true)
end

-- ---- wrapping the file key --------------------------------------------------------------

local function wrap(file_key, r)
  local e = crypto.random(32)
  local share = crypto.x25519_public(e)
  local shared = assert(crypto.x25519(e, r.pk))
  local label, args = X25519_LABEL, { "X25519", b64_encode(share) }
  if r.kind == "ssh-ed25519" then
    shared = assert(crypto.x25519(r.tweak, shared))
    label, args = SSH_LABEL, { "ssh-ed25519", b64_encode(r.tag), b64_encode(share) }
  end
  local key = crypto.hkdf_sha256(shared, share .. r.pk, label, 32)
  return { args = args, body = crypto.chacha20_poly1305_seal(key, ZERO_NONCE, file_key) }
end

-- The file key from one stanza, or nil when the stanza is not for this identity.
-- -> file_key | nil, why (why only when the stanza was for it but is broken)
local function unwrap(stanza, id)
  local a = stanza.args
  local share_b64, label
  if id.kind == "X25519" and a[1] == "X25519" then
    if #a ~= 2 then return nil, "malformed X25519 stanza" end
    share_b64, label = a[2], X25519_LABEL
  elseif id.kind == "ssh-ed25519" and a[1] == "ssh-ed25519" then
    if #a ~= 3 then return nil, "malformed ssh-ed25519 stanza" end
    if b64_decode(a[2]) ~= id.tag then return nil end
    share_b64, label = a[3], SSH_LABEL
  else
    return nil
  end
  local share = b64_decode(share_b64)
  if not share or #share ~= 32 then return nil, "malformed stanza share" end
  if #stanza.body ~= 32 then return nil, "malformed stanza body" end
  local shared, why = crypto.x25519(id.scalar, share)
  if not shared then return nil, why end
  if id.kind == "ssh-ed25519" then
    shared, why = crypto.x25519(id.tweak, shared)
    if not shared then return nil, why end
  end
  local key = crypto.hkdf_sha256(shared, share .. id.pk, label, 32)
  -- a stanza for another X25519 key fails authentication: that is "not for us"
  return (crypto.chacha20_poly1305_open(key, ZERO_NONCE, stanza.body))
end

-- ---- the binary format -------------------------------------------------------------------

local function chunk_nonce(i, last)
  return string.rep("\0", 3) .. string.pack(">I8", i) .. (last and "\1" or "\0")
end

local function seal_payload(file_key, plaintext)
  local nonce = crypto.random(16)
  local key = crypto.hkdf_sha256(file_key, nonce, "payload", 32)
  local out, i, pos = { nonce }, 0, 1
  repeat
    local piece = plaintext:sub(pos, pos + CHUNK - 1)
    pos = pos + CHUNK
    local last = pos > #plaintext
    out[#out + 1] = crypto.chacha20_poly1305_seal(key, chunk_nonce(i, last), piece)
    i = i + 1
  until last
  return table.concat(out)
end

local function open_payload(file_key, payload)
  if #payload < 16 + 16 then return nil, "the payload is truncated" end
  local key = crypto.hkdf_sha256(file_key, payload:sub(1, 16), "payload", 32)
  local out, i, pos = {}, 0, 17
  while true do
    local sealed = payload:sub(pos, pos + CHUNK + 16 - 1)
    pos = pos + #sealed
    local last = pos > #payload
    local piece = crypto.chacha20_poly1305_open(key, chunk_nonce(i, last), sealed)
    if not piece then return nil, "the payload does not authenticate (corrupted or truncated)" end
    if last and piece == "" and i > 0 then return nil, "the payload ends with an empty chunk" end
    out[#out + 1] = piece
    if last then return table.concat(out) end
    i = i + 1
  end
end

-- -> {stanzas = {{args, body}}, mac_input, mac, payload} | nil, why
local function parse_header(bin)
  local pos = #VERSION + 2
  if bin:sub(1, pos - 1) ~= VERSION .. "\n" then return nil, "not an age v1 file" end
  local stanzas = {}
  while true do
    local line_end = bin:find("\n", pos, true)
    if not line_end then return nil, "the header is truncated" end
    local line = bin:sub(pos, line_end - 1)
    if line:sub(1, 4) == "--- " then
      local mac = b64_decode(line:sub(5))
      if not mac or #mac ~= 32 then return nil, "malformed header MAC" end
      return { stanzas = stanzas, mac_input = bin:sub(1, pos + 2), mac = mac, payload = bin:sub(line_end + 1) }
    end
    if line:sub(1, 3) ~= "-> " then return nil, "malformed header line" end
    local args = {}
    for a in line:sub(4):gmatch("%S+") do args[#args + 1] = a end
    if #args == 0 or line:find("  ", 1, true) or line:sub(-1) == " " then return nil, "malformed stanza line" end
    pos = line_end + 1
    local body = {}
    repeat
      line_end = bin:find("\n", pos, true)
      if not line_end then return nil, "the header is truncated" end
      local b = bin:sub(pos, line_end - 1)
      if #b > 64 then return nil, "stanza body line longer than 64 columns" end
      body[#body + 1] = b
      pos = line_end + 1
    until #b < 64
    local raw = b64_decode(table.concat(body))
    if not raw then return nil, "stanza body is not canonical base64" end
    stanzas[#stanzas + 1] = { args = args, body = raw }
  end
end

function M.is(s)
  return type(s) == "string" and s:match("^%s*" .. BEGIN:gsub("%-", "%%-")) ~= nil
end

-- Strict armor: whitespace around the block, LF or CRLF, 64-column padded base64.
local function unarmor(text)
  local lines = {}
  for line in (text:match("^%s*(.-)%s*$") .. "\n"):gmatch("([^\n]*)\n") do
    lines[#lines + 1] = line:gsub("\r$", "")
  end
  if lines[1] ~= BEGIN or lines[#lines] ~= END or #lines < 3 then
    return nil, "malformed age armor (expected " .. BEGIN .. " ... " .. END .. ")"
  end
  for i = 2, #lines - 2 do
    if #lines[i] ~= 64 then return nil, "malformed age armor (lines must be 64 columns)" end
  end
  if #lines[#lines - 1] > 64 or #lines[#lines - 1] == 0 then return nil, "malformed age armor" end
  local bin = b64_decode(table.concat(lines, "", 2, #lines - 1), true)
  if not bin then return nil, "malformed age armor (not canonical base64)" end
  return bin
end

-- -> plaintext | nil, why
function M.decrypt(text, identities)
  local bin, why = unarmor(text)
  if not bin then return nil, why end
  local h
  h, why = parse_header(bin)
  if not h then return nil, why end
  local file_key, types = nil, {}
  for _, st in ipairs(h.stanzas) do
    types[#types + 1] = st.args[1]
    for _, id in ipairs(identities) do
      local k, err = unwrap(st, id)
      if err then return nil, err end
      if k then file_key = k; break end
    end
    if file_key then break end
  end
  if not file_key then
    return nil, "no identity matches: the value was encrypted to other recipients (stanzas: "
      .. table.concat(types, ", ") .. ")"
  end
  local mac_key = crypto.hkdf_sha256(file_key, "", "header", 32)
  if not crypto.equal(crypto.hmac_sha256(mac_key, h.mac_input), h.mac) then
    return nil, "the age header MAC does not match (the header was altered)"
  end
  return open_payload(file_key, h.payload)
end

-- -> armored text ending in "\n"
function M.encrypt(plaintext, recipients)
  assert(#recipients > 0, "age.encrypt: no recipients")
  local file_key = crypto.random(16)
  local parts = { VERSION, "\n" }
  for _, r in ipairs(recipients) do
    local st = wrap(file_key, r)
    parts[#parts + 1] = "-> " .. table.concat(st.args, " ") .. "\n"
    local body = b64_encode(st.body)
    for i = 1, #body, 64 do parts[#parts + 1] = body:sub(i, i + 63) .. "\n" end
    if #body % 64 == 0 then parts[#parts + 1] = "\n" end
  end
  parts[#parts + 1] = "---"
  local header = table.concat(parts)
  local mac = crypto.hmac_sha256(crypto.hkdf_sha256(file_key, "", "header", 32), header)
  local bin = header .. " " .. b64_encode(mac) .. "\n" .. seal_payload(file_key, plaintext)
  local b64 = b64_encode(bin, true)
  local lines = { BEGIN }
  for i = 1, #b64, 64 do lines[#lines + 1] = b64:sub(i, i + 63) end
  lines[#lines + 1] = END
  return table.concat(lines, "\n") .. "\n"
end

return M

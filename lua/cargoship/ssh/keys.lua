-- cargoship.ssh.keys: reads what a private key file is (type, encrypted?) before libssh2 sees it.
local M = {}

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local DECODE = {}
for i = 1, #B64 do DECODE[B64:byte(i)] = i - 1 end

-- Plain base64 decoding; characters outside the alphabet (newlines, padding) are skipped.
function M.base64_decode(s)
  local out, acc, bits = {}, 0, 0
  for i = 1, #s do
    local v = DECODE[s:byte(i)]
    if v then
      acc = (acc << 6) | v
      bits = bits + 6
      if bits >= 8 then
        bits = bits - 8
        out[#out + 1] = string.char((acc >> bits) & 0xff)
      end
    end
  end
  return table.concat(out)
end

local PEM_TYPES = {
  ["RSA PRIVATE KEY"] = "rsa", ["EC PRIVATE KEY"] = "ecdsa", ["DSA PRIVATE KEY"] = "dsa",
}

-- openssh-key-v1: magic, cipher, kdf, kdf options, key count, then the public key blob,
-- which is never encrypted, so the type is readable without the passphrase.
local function parse_openssh(blob)
  local magic = "openssh-key-v1\0"
  if blob:sub(1, #magic) ~= magic then return nil end
  local ok, cipher, _, _, _, pub = pcall(string.unpack, ">s4s4s4I4s4", blob, #magic + 1)
  if not ok then return nil end
  local ok2, ktype = pcall(string.unpack, ">s4", pub)
  if not ok2 then return nil end
  return ktype, cipher ~= "none", pub
end

local function kind_of(ktype)
  if ktype == "ssh-rsa" then return "rsa" end
  if ktype == "ssh-ed25519" then return "ed25519" end
  if ktype and ktype:match("^ecdsa%-sha2%-") then return "ecdsa" end
  if ktype == "ssh-dss" then return "dsa" end
  return ktype or "unknown"
end

-- M.inspect(text) -> { type = "ed25519"|"ecdsa"|"rsa"|"dsa"|..., encrypted = bool, public } | nil, why
-- public: the public key blob an OpenSSH-format file carries (PEM files have none).
-- Only the first BEGIN line counts, found by plain search: an unanchored pattern retried at
-- every "-----BEGIN" of a 1 MiB file of them took minutes.
function M.inspect(text)
  local label, body
  local begin = text:find("-----BEGIN ", 1, true)
  if begin then
    local stop
    label, stop = text:match("^([%u ]+)%-%-%-%-%-()", begin + 11)
    local finish = stop and text:find("-----END", stop, true)
    if finish then body = text:sub(stop, finish - 1) end
  end
  if not body then return nil, "not a PEM or OpenSSH private key" end
  if label == "OPENSSH PRIVATE KEY" then
    local ktype, encrypted, public = parse_openssh(M.base64_decode(body))
    if not ktype then return nil, "damaged OpenSSH private key" end
    return { type = kind_of(ktype), encrypted = encrypted, public = public }
  end
  if PEM_TYPES[label] then
    return { type = PEM_TYPES[label], encrypted = body:find("ENCRYPTED", 1, true) ~= nil }
  end
  if label == "ENCRYPTED PRIVATE KEY" then return { type = "unknown", encrypted = true } end
  if label == "PRIVATE KEY" then return { type = "unknown", encrypted = false } end
  return nil, "unsupported key format " .. label
end

-- M.public_file(path, blob) -> path .. ".pub" when that file holds the public key blob, else nil.
-- libssh2 given no public key file derives the key from the private one on every login, and
-- OpenSSL 3 tries each of its decoders on the file first: a third of `exec`'s client CPU
-- (200 hosts: 0.60 s with, 0.40 s without). A .pub that is not this key's would fail every
-- login, so it must match.
function M.public_file(path, blob)
  if not blob then return nil end
  local f = io.open(path .. ".pub", "rb")
  if not f then return nil end
  local line = f:read(16384) or ""
  f:close()
  local b64 = line:match("^%S+%s+([%w+/=]+)")
  if b64 and M.base64_decode(b64) == blob then return path .. ".pub" end
  return nil
end

-- OpenSSH refuses private key files over 1 MiB (authfile.c: MAX_KEY_FILE_SIZE (1024 * 1024),
-- checked in sshkey_load_file against fstat and again while reading); so do we.
M.MAX_FILE = 1024 * 1024

-- M.read(path) -> text | nil, "cannot read key PATH: why". Regular files only: a directory is
-- refused with a reason, a FIFO cannot block the run (every host's task waits on this one
-- process), and /dev/zero is refused before a byte is read.
function M.read(path)
  local text, err = require("cargoship.util").read_regular(path, M.MAX_FILE)
  if not text then
    return nil, "cannot read key " .. path .. ": " .. (err:sub(#path + 1):match("^: read: (.*)$") or err)
  end
  return text
end

-- Why libssh2 1.10 cannot use an RSA key against a current sshd, and the ways out.
M.RSA_MESSAGE = "RSA keys cannot be used: libssh2 1.10 signs only with ssh-rsa (SHA-1), which "
  .. "OpenSSH 8.8 and later refuse. Use an ed25519 or ecdsa key (ssh-keygen -t ed25519), an "
  .. "ssh-agent holding such a key, or the openSSH transport (openSSH: in the cluster file)"

return M

-- Specs of the crypto family against published vectors (RFC 7748, 8439, 5869, 8032, 6070-style
-- PBKDF2, NIST SP 800-38A), so Ansible Vault and age rest on primitives known to be right.
local crypto = require "cargoship.crypto"

local function unhex(h)
  h = h:gsub("%s", "")
  return (h:gsub("..", function(x) return string.char(tonumber(x, 16)) end))
end

local function hex(s)
  return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

describe("crypto.x25519 (RFC 7748)", function()
  it("matches the section 5.2 vectors", function()
    assert.equal("c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552", hex(crypto.x25519(
      unhex("a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4"),
      unhex("e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c"))))
    assert.equal("95cbde9476e8907d7aade45cb4b873f88b595a68799fa152e6f8f7647aac7957", hex(crypto.x25519(
      unhex("4b66e9d4d1b4673c5ad22691957d6af5c11b6421e0ea01d42ca4169e7918ba0d"),
      unhex("e5210f12786811d3f4b7959d0538ae2c31dbe7106fc03c3efc4cd549c715a493"))))
  end)

  it("derives section 6.1's public keys and shared secret", function()
    local a = unhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
    local b = unhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
    assert.equal("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a", hex(crypto.x25519_public(a)))
    assert.equal("de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f", hex(crypto.x25519_public(b)))
    local shared = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"
    assert.equal(shared, hex(crypto.x25519(a, crypto.x25519_public(b))))
    assert.equal(shared, hex(crypto.x25519(b, crypto.x25519_public(a))))
  end)

  it("refuses a low-order point (all-zero secret)", function()
    local r, why = crypto.x25519(crypto.random(32), string.rep("\0", 32))
    assert.is_nil(r)
    assert.matches("all%-zero", why)
  end)

  it("refuses keys of the wrong length", function()
    assert.has_error(function() crypto.x25519("short", string.rep("\0", 32)) end)
  end)
end)

describe("crypto.chacha20_poly1305 (RFC 8439 2.8.2)", function()
  local key = unhex("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f")
  local nonce = unhex("070000004041424344454647")
  local aad = unhex("50515253c0c1c2c3c4c5c6c7")
  local plain = "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future,"
    .. " sunscreen would be it."
  local sealed = unhex([[
    d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b
    1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc
    3ff4def08e4b7a9de576d26586cec64b6116]] .. "1ae10b594f09e26a7e902ecbd0600691")

  it("seals to the RFC's ciphertext and tag", function()
    assert.equal(hex(sealed), hex(crypto.chacha20_poly1305_seal(key, nonce, plain, aad)))
  end)

  it("opens the RFC's ciphertext", function()
    assert.equal(plain, crypto.chacha20_poly1305_open(key, nonce, sealed, aad))
  end)

  it("refuses a flipped bit, a wrong aad or a truncated tag", function()
    local bad = string.char(sealed:byte(1) ~ 1) .. sealed:sub(2)
    local r, why = crypto.chacha20_poly1305_open(key, nonce, bad, aad)
    assert.is_nil(r)
    assert.equal("authentication failed", why)
    assert.is_nil(crypto.chacha20_poly1305_open(key, nonce, sealed, "other"))
    assert.is_nil(crypto.chacha20_poly1305_open(key, nonce, sealed:sub(1, 10)))
  end)

  it("seals and opens the empty message (age's empty final chunk)", function()
    local s = crypto.chacha20_poly1305_seal(key, nonce, "")
    assert.equal(16, #s)
    assert.equal("", crypto.chacha20_poly1305_open(key, nonce, s))
  end)
end)

describe("crypto.hkdf_sha256 (RFC 5869)", function()
  it("matches test case 1", function()
    assert.equal("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
      hex(crypto.hkdf_sha256(string.rep("\11", 22), unhex("000102030405060708090a0b0c"),
        unhex("f0f1f2f3f4f5f6f7f8f9"), 42)))
  end)

  it("matches test case 3 (empty salt and info)", function()
    assert.equal("8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8",
      hex(crypto.hkdf_sha256(string.rep("\11", 22), "", "", 42)))
  end)

  it("accepts an empty key (age's ssh-ed25519 tweak)", function()
    assert.equal(32, #crypto.hkdf_sha256("", "salt", "info", 32))
  end)
end)

describe("crypto.pbkdf2_sha256, hmac_sha256, aes256_ctr, digest", function()
  it("matches the PBKDF2-HMAC-SHA256 vectors", function()
    assert.equal("120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b",
      hex(crypto.pbkdf2_sha256("password", "salt", 1, 32)))
    assert.equal("c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a",
      hex(crypto.pbkdf2_sha256("password", "salt", 4096, 32)))
  end)

  it("matches RFC 4231 test case 2 for HMAC-SHA256", function()
    assert.equal("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
      hex(crypto.hmac_sha256("Jefe", "what do ya want for nothing?")))
  end)

  it("matches NIST SP 800-38A F.5.5 for AES-256-CTR", function()
    local key = unhex("603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4")
    local iv = unhex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
    local pt = unhex("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51")
    local ct = "601ec313775789a5b7a7f504bbf3d228f443e3ca4d62b59aca84e990cacaf5c5"
    assert.equal(ct, hex(crypto.aes256_ctr(key, iv, pt)))
    assert.equal(hex(pt), hex(crypto.aes256_ctr(key, iv, unhex(ct))))
  end)

  it("compares in constant time, lengths included", function()
    assert.is_true(crypto.equal("abc", "abc"))
    assert.is_false(crypto.equal("abc", "abd"))
    assert.is_false(crypto.equal("abc", "ab"))
  end)

  it("digests sha512", function()
    assert.equal("ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a"
      .. "2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f", hex(crypto.digest("sha512", "abc")))
  end)
end)

describe("crypto.ed25519", function()
  it("derives RFC 8032 test 1's public key", function()
    assert.equal("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
      hex(crypto.ed25519_public(unhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"))))
  end)

  it("maps a public key to the X25519 public of the same secret", function()
    for _ = 1, 8 do
      local seed = crypto.random(32)
      local scalar = crypto.digest("sha512", seed):sub(1, 32)
      assert.equal(hex(crypto.x25519_public(scalar)), hex(crypto.ed25519_to_x25519(crypto.ed25519_public(seed))))
    end
  end)

  it("refuses encodings that are no curve point", function()
    local r, why = crypto.ed25519_to_x25519(string.rep("\255", 31) .. "\127")
    assert.is_nil(r)
    assert.matches("canonical", why)
    -- y = 2 has no x on the curve
    r, why = crypto.ed25519_to_x25519("\2" .. string.rep("\0", 31))
    assert.is_nil(r)
    assert.matches("not a point", why)
  end)
end)

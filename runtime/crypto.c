/* crypto.c - libcrypto primitives for encrypted secrets: Ansible Vault and age, in-process. */
#include "cs.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <string.h>

/* Raises with libcrypto's complaint folded into one message: these calls fail only on
 * misuse or exhaustion, never on bad input (bad input is a nil return).  [-0, +0, v] */
static int crypto_error(lua_State *L, const char *what) {
  return luaL_error(L, "crypto: %s: libcrypto failed", what);
}

/* A Lua-owned output buffer of n bytes; the caller fills it and pushes the result. */
static unsigned char *out_buffer(lua_State *L, luaL_Buffer *b, size_t n) {
  return (unsigned char *)luaL_buffinitsize(L, b, n > 0 ? n : 1);
}

static const unsigned char *check_bytes(lua_State *L, int arg, size_t want, const char *what) {
  size_t len;
  const char *s = luaL_checklstring(L, arg, &len);
  if (len != want) luaL_error(L, "bad argument #%d (%s must be %d bytes, got %d)", arg, what,
                              (int)want, (int)len);
  return (const unsigned char *)s;
}

/* crypto.random(n) -> n bytes from the CSPRNG */
static int l_crypto_random(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 0 && n <= 1 << 20, 1, "between 0 and 1 MiB");
  luaL_Buffer b;
  unsigned char *p = out_buffer(L, &b, (size_t)n);
  if (n > 0 && RAND_bytes(p, (int)n) != 1) return crypto_error(L, "random");
  luaL_pushresultsize(&b, (size_t)n);
  return 1;
}

/* crypto.digest("sha256" | "sha512", data) -> raw digest */
static int l_crypto_digest(lua_State *L) {
  static const char *const names[] = {"sha256", "sha512", NULL};
  int which = luaL_checkoption(L, 1, NULL, names);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (!EVP_Digest(s, len, md, &n, which ? EVP_sha512() : EVP_sha256(), NULL)) return crypto_error(L, "digest");
  lua_pushlstring(L, (const char *)md, n);
  return 1;
}

/* crypto.hmac_sha256(key, data) -> 32 bytes */
static int l_crypto_hmac_sha256(lua_State *L) {
  size_t klen, dlen;
  const char *key = luaL_checklstring(L, 1, &klen);
  const char *data = luaL_checklstring(L, 2, &dlen);
  unsigned char md[EVP_MAX_MD_SIZE];
  size_t n = 0;
  if (!EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key, klen, (const unsigned char *)data, dlen,
                 md, sizeof md, &n))
    return crypto_error(L, "hmac");
  lua_pushlstring(L, (const char *)md, n);
  return 1;
}

/* crypto.equal(a, b) -> boolean, in time independent of where they differ (MAC checks) */
static int l_crypto_equal(lua_State *L) {
  size_t alen, blen;
  const char *a = luaL_checklstring(L, 1, &alen);
  const char *b = luaL_checklstring(L, 2, &blen);
  lua_pushboolean(L, alen == blen && CRYPTO_memcmp(a, b, alen) == 0);
  return 1;
}

/* crypto.pbkdf2_sha256(password, salt, iterations, length) -> length bytes */
static int l_crypto_pbkdf2_sha256(lua_State *L) {
  size_t plen, slen;
  const char *pass = luaL_checklstring(L, 1, &plen);
  const char *salt = luaL_checklstring(L, 2, &slen);
  lua_Integer iter = luaL_checkinteger(L, 3), n = luaL_checkinteger(L, 4);
  luaL_argcheck(L, iter >= 1 && iter <= 100000000, 3, "iterations out of range");
  luaL_argcheck(L, n >= 1 && n <= 1024, 4, "length out of range");
  luaL_Buffer b;
  unsigned char *p = out_buffer(L, &b, (size_t)n);
  if (!PKCS5_PBKDF2_HMAC(pass, (int)plen, (const unsigned char *)salt, (int)slen, (int)iter, EVP_sha256(),
                         (int)n, p))
    return crypto_error(L, "pbkdf2");
  luaL_pushresultsize(&b, (size_t)n);
  return 1;
}

/* crypto.hkdf_sha256(ikm, salt, info, length) -> length bytes (RFC 5869 extract + expand) */
static int l_crypto_hkdf_sha256(lua_State *L) {
  size_t ilen, slen, nlen;
  const char *ikm = luaL_checklstring(L, 1, &ilen);
  const char *salt = luaL_checklstring(L, 2, &slen);
  const char *info = luaL_checklstring(L, 3, &nlen);
  lua_Integer n = luaL_checkinteger(L, 4);
  luaL_argcheck(L, n >= 1 && n <= 255 * 32, 4, "length out of range");
  EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
  EVP_KDF_CTX *kctx = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
  EVP_KDF_free(kdf);
  if (!kctx) return crypto_error(L, "hkdf");
  /* An empty key and salt are legal in HKDF (age's tweak uses an empty key); libcrypto
   * wants a non-NULL pointer even for zero bytes. */
  static char empty[1];
  OSSL_PARAM params[] = {
    OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA256", 0),
    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, ilen ? (void *)ikm : empty, ilen),
    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, slen ? (void *)salt : empty, slen),
    OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, nlen ? (void *)info : empty, nlen),
    OSSL_PARAM_construct_end(),
  };
  luaL_Buffer b;
  unsigned char *p = out_buffer(L, &b, (size_t)n);
  int ok = EVP_KDF_derive(kctx, p, (size_t)n, params) > 0;
  EVP_KDF_CTX_free(kctx);
  if (!ok) return crypto_error(L, "hkdf");
  luaL_pushresultsize(&b, (size_t)n);
  return 1;
}

/* crypto.aes256_ctr(key32, iv16, data) -> data XOR keystream (encrypts and decrypts) */
static int l_crypto_aes256_ctr(lua_State *L) {
  const unsigned char *key = check_bytes(L, 1, 32, "key");
  const unsigned char *iv = check_bytes(L, 2, 16, "iv");
  size_t len;
  const unsigned char *in = (const unsigned char *)luaL_checklstring(L, 3, &len);
  luaL_argcheck(L, len < (size_t)1 << 30, 3, "too long");
  EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
  luaL_Buffer b;
  unsigned char *p = out_buffer(L, &b, len + 16);
  int n1 = 0, n2 = 0;
  int ok = c && EVP_EncryptInit_ex(c, EVP_aes_256_ctr(), NULL, key, iv) &&
           EVP_EncryptUpdate(c, p, &n1, in, (int)len) && EVP_EncryptFinal_ex(c, p + n1, &n2);
  EVP_CIPHER_CTX_free(c);
  if (!ok) return crypto_error(L, "aes-256-ctr");
  luaL_pushresultsize(&b, (size_t)(n1 + n2));
  return 1;
}

/* One ChaCha20-Poly1305 (RFC 8439) operation; on open, a bad tag returns 0 with nothing
 * pushed. sealed = ciphertext || 16-byte tag.  [-0, +(0|1), v] */
static int chacha(lua_State *L, int enc) {
  const unsigned char *key = check_bytes(L, 1, 32, "key");
  const unsigned char *nonce = check_bytes(L, 2, 12, "nonce");
  size_t len, alen = 0;
  const unsigned char *in = (const unsigned char *)luaL_checklstring(L, 3, &len);
  const unsigned char *aad = (const unsigned char *)luaL_optlstring(L, 4, "", &alen);
  luaL_argcheck(L, len < (size_t)1 << 30, 3, "too long");
  if (!enc && len < 16) return 0;
  size_t body = enc ? len : len - 16;
  EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
  luaL_Buffer b;
  unsigned char *p = out_buffer(L, &b, body + 16);
  int n = 0, fin = 0;
  int ok = c && EVP_CipherInit_ex(c, EVP_chacha20_poly1305(), NULL, NULL, NULL, enc) &&
           EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_IVLEN, 12, NULL) &&
           EVP_CipherInit_ex(c, NULL, NULL, key, nonce, enc);
  if (ok && !enc) ok = EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, (void *)(in + body));
  if (ok && alen) ok = EVP_CipherUpdate(c, NULL, &n, aad, (int)alen);
  if (ok) ok = EVP_CipherUpdate(c, p, &n, in, (int)body);
  if (!ok) {
    EVP_CIPHER_CTX_free(c);
    return crypto_error(L, "chacha20-poly1305");
  }
  if (EVP_CipherFinal_ex(c, p + n, &fin) != 1) {
    EVP_CIPHER_CTX_free(c);
    if (enc) return crypto_error(L, "chacha20-poly1305");
    OPENSSL_cleanse(p, body);
    return 0;
  }
  if (enc && !EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, p + n + fin)) {
    EVP_CIPHER_CTX_free(c);
    return crypto_error(L, "chacha20-poly1305");
  }
  EVP_CIPHER_CTX_free(c);
  luaL_pushresultsize(&b, (size_t)(n + fin) + (enc ? 16 : 0));
  return 1;
}

/* crypto.chacha20_poly1305_seal(key32, nonce12, plaintext [, aad]) -> ciphertext || tag */
static int l_crypto_chacha20_poly1305_seal(lua_State *L) {
  return chacha(L, 1);
}

/* crypto.chacha20_poly1305_open(key32, nonce12, sealed [, aad]) -> plaintext | nil, why */
static int l_crypto_chacha20_poly1305_open(lua_State *L) {
  if (chacha(L, 0)) return 1;
  lua_pushnil(L);
  lua_pushliteral(L, "authentication failed");
  return 2;
}

static EVP_PKEY *raw_key(int type, int private, const unsigned char *k) {
  return private ? EVP_PKEY_new_raw_private_key(type, NULL, k, 32) : EVP_PKEY_new_raw_public_key(type, NULL, k, 32);
}

/* crypto.x25519(scalar32, point32) -> shared 32 bytes | nil, why (RFC 7748; an all-zero
 * result, from a low-order point, is refused as age requires) */
static int l_crypto_x25519(lua_State *L) {
  const unsigned char *k = check_bytes(L, 1, 32, "scalar");
  const unsigned char *u = check_bytes(L, 2, 32, "point");
  EVP_PKEY *priv = raw_key(EVP_PKEY_X25519, 1, k), *peer = raw_key(EVP_PKEY_X25519, 0, u);
  EVP_PKEY_CTX *c = priv ? EVP_PKEY_CTX_new(priv, NULL) : NULL;
  unsigned char out[32];
  size_t n = sizeof out;
  int ok = c && peer && EVP_PKEY_derive_init(c) > 0;
  /* libcrypto refuses the peer (low order) or the derive (all-zero secret): both are bad
   * input, not a broken library */
  int good = ok && EVP_PKEY_derive_set_peer(c, peer) > 0 && EVP_PKEY_derive(c, out, &n) > 0 && n == 32;
  EVP_PKEY_CTX_free(c);
  EVP_PKEY_free(priv);
  EVP_PKEY_free(peer);
  if (!ok) return crypto_error(L, "x25519");
  if (!good) {
    lua_pushnil(L);
    lua_pushliteral(L, "X25519 gave the all-zero secret (a low-order point)");
    return 2;
  }
  lua_pushlstring(L, (const char *)out, 32);
  OPENSSL_cleanse(out, sizeof out);
  return 1;
}

/* The public key of a raw X25519 scalar or Ed25519 seed.  [-0, +1, v] */
static int push_public(lua_State *L, int type, const char *what) {
  const unsigned char *k = check_bytes(L, 1, 32, what);
  EVP_PKEY *key = raw_key(type, 1, k);
  unsigned char pub[32];
  size_t n = sizeof pub;
  int ok = key && EVP_PKEY_get_raw_public_key(key, pub, &n) && n == 32;
  EVP_PKEY_free(key);
  if (!ok) return crypto_error(L, what);
  lua_pushlstring(L, (const char *)pub, 32);
  return 1;
}

/* crypto.x25519_public(scalar32) -> X25519(scalar, basepoint) */
static int l_crypto_x25519_public(lua_State *L) {
  return push_public(L, EVP_PKEY_X25519, "scalar");
}

/* crypto.ed25519_public(seed32) -> the Ed25519 public key of an OpenSSH private seed */
static int l_crypto_ed25519_public(lua_State *L) {
  return push_public(L, EVP_PKEY_ED25519, "seed");
}

static void reverse32(unsigned char *dst, const unsigned char *src) {
  for (int i = 0; i < 32; i++) dst[i] = src[31 - i];
}

/* crypto.ed25519_to_x25519(pub32) -> the Montgomery u = (1 + y) / (1 - y) mod p of an
 * Ed25519 public key | nil, why. Checks the encoding names a curve point (y < p and x^2 a
 * square), as age does before using an ssh-ed25519 recipient. */
static int l_crypto_ed25519_to_x25519(lua_State *L) {
  const unsigned char *pub = check_bytes(L, 1, 32, "public key");
  unsigned char be[32], out[32];
  reverse32(be, pub);
  be[0] &= 0x7f; /* the top bit is the sign of x, not part of y */
  BN_CTX *ctx = BN_CTX_new();
  BIGNUM *p = BN_new(), *y = BN_bin2bn(be, 32, NULL), *one = BN_new(), *num = BN_new(), *den = BN_new(),
         *u = BN_new(), *d = BN_new(), *y2 = BN_new(), *e = BN_new();
  const char *why = NULL;
  int ok = ctx && p && y && one && num && den && u && d && y2 && e && BN_set_word(p, 1) && BN_lshift(p, p, 255) &&
           BN_sub_word(p, 19) && BN_one(one);
  /* d = -121665 / 121666 mod p */
  ok = ok && BN_set_word(num, 121665) && BN_set_word(den, 121666) && BN_mod_inverse(den, den, p, ctx) &&
       BN_mod_mul(d, num, den, p, ctx) && BN_mod_sub(d, p, d, p, ctx);
  if (ok && BN_cmp(y, p) >= 0) why = "not a canonical Ed25519 point encoding";
  /* x^2 = (y^2 - 1) / (d y^2 + 1); a square (or zero) iff it lies on the curve */
  if (ok && !why) {
    ok = BN_mod_sqr(y2, y, p, ctx) && BN_mod_sub(num, y2, one, p, ctx) && BN_mod_mul(den, d, y2, p, ctx) &&
         BN_mod_add(den, den, one, p, ctx) && BN_mod_inverse(den, den, p, ctx) &&
         BN_mod_mul(num, num, den, p, ctx) && BN_copy(e, p) && BN_sub_word(e, 1) && BN_rshift1(e, e) &&
         BN_mod_exp(u, num, e, p, ctx);
    if (ok && !BN_is_zero(num) && !BN_is_one(u)) why = "not a point on the Ed25519 curve";
  }
  if (ok && !why) {
    ok = BN_mod_add(num, one, y, p, ctx) && BN_mod_sub(den, one, y, p, ctx);
    if (ok && BN_is_zero(den)) why = "the Ed25519 identity point has no X25519 form";
    else ok = ok && BN_mod_inverse(den, den, p, ctx) && BN_mod_mul(u, num, den, p, ctx) &&
              BN_bn2binpad(u, be, 32) == 32;
  }
  BN_free(p); BN_free(y); BN_free(one); BN_free(num); BN_free(den); BN_free(u); BN_free(d); BN_free(y2);
  BN_free(e);
  BN_CTX_free(ctx);
  if (!ok) return crypto_error(L, "ed25519 to x25519");
  if (why) {
    lua_pushnil(L);
    lua_pushstring(L, why);
    return 2;
  }
  reverse32(out, be);
  lua_pushlstring(L, (const char *)out, 32);
  return 1;
}

static const luaL_Reg crypto_funcs[] = {
  {"random", l_crypto_random},
  {"digest", l_crypto_digest},
  {"hmac_sha256", l_crypto_hmac_sha256},
  {"equal", l_crypto_equal},
  {"pbkdf2_sha256", l_crypto_pbkdf2_sha256},
  {"hkdf_sha256", l_crypto_hkdf_sha256},
  {"aes256_ctr", l_crypto_aes256_ctr},
  {"chacha20_poly1305_seal", l_crypto_chacha20_poly1305_seal},
  {"chacha20_poly1305_open", l_crypto_chacha20_poly1305_open},
  {"x25519", l_crypto_x25519},
  {"x25519_public", l_crypto_x25519_public},
  {"ed25519_public", l_crypto_ed25519_public},
  {"ed25519_to_x25519", l_crypto_ed25519_to_x25519},
  {NULL, NULL}
};

int luaopen_cargoship_crypto(lua_State *L) {
  luaL_newlib(L, crypto_funcs);
  return 1;
}

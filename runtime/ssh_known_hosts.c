/* ssh_known_hosts.c - OpenSSH known_hosts files: read once, host-key types per host, checks, accept-new. */
#include "ssh_int.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

cs_kh *cs_kh_check(lua_State *L, int idx) {
  cs_kh *k = luaL_checkudata(L, idx, KH_MT);
  if (!k->kh) luaL_error(L, "known_hosts: object is closed");
  return k;
}

/* ssh.known_hosts(path) -> collection | nil, "path: known_hosts: detail", "io"
 * A missing file is an empty collection: under strict checking every host is unknown. */
static int l_ssh_known_hosts(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  cs_kh *k = lua_newuserdatauv(L, sizeof *k, 0);
  memset(k, 0, sizeof *k);
  luaL_setmetatable(L, KH_MT);
  k->owner = libssh2_session_init();
  if (!k->owner) return luaL_error(L, "known_hosts: out of memory");
  k->kh = libssh2_knownhost_init(k->owner);
  k->path = strdup(path);
  if (!k->kh || !k->path) return luaL_error(L, "known_hosts: out of memory");
  if (access(path, F_OK) == 0) {
    if (libssh2_knownhost_readfile(k->kh, path, LIBSSH2_KNOWNHOST_FILE_OPENSSH) < 0) {
      char *msg;
      libssh2_session_last_error(k->owner, &msg, NULL, 0);
      return cs_ssh_fail(L, NULL, "io", "known_hosts", "%s: %s", path, msg);
    }
  }
  return 1;
}

static int l_kh_gc(lua_State *L) {
  cs_kh *k = luaL_checkudata(L, 1, KH_MT);
  if (k->kh) libssh2_knownhost_free(k->kh);
  if (k->owner) libssh2_session_free(k->owner);
  free(k->path);
  k->kh = NULL;
  k->owner = NULL;
  k->path = NULL;
  return 0;
}

static const struct { int kh_type; const char *method; const char *label; } key_types[] = {
  {LIBSSH2_KNOWNHOST_KEY_ED25519, "ssh-ed25519", "ED25519"},
  {LIBSSH2_KNOWNHOST_KEY_ECDSA_256, "ecdsa-sha2-nistp256", "ECDSA"},
  {LIBSSH2_KNOWNHOST_KEY_ECDSA_384, "ecdsa-sha2-nistp384", "ECDSA"},
  {LIBSSH2_KNOWNHOST_KEY_ECDSA_521, "ecdsa-sha2-nistp521", "ECDSA"},
  {LIBSSH2_KNOWNHOST_KEY_SSHRSA, "ssh-rsa", "RSA"},
};
#define NKEYTYPES (sizeof key_types / sizeof key_types[0])

/* A dummy key of one type MISMATCHes iff known_hosts holds a key of that type for the
 * host: that is how we learn which types to ask the server for (libssh2 would otherwise
 * prefer ecdsa even when only the host's ed25519 key is known). */
void cs_kh_known_types(cs_kh *k, const char *host, int port, char *prefs, size_t len) {
  prefs[0] = '\0';
  for (size_t i = 0; i < NKEYTYPES; i++) {
    int r = libssh2_knownhost_checkp(k->kh, host, port, "x", 1,
        LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | key_types[i].kh_type, NULL);
    if (r != LIBSSH2_KNOWNHOST_CHECK_MISMATCH) continue;
    if (prefs[0]) strncat(prefs, ",", len - strlen(prefs) - 1);
    strncat(prefs, key_types[i].method, len - strlen(prefs) - 1);
  }
}

int cs_kh_type_of(int hostkey_type) {
  switch (hostkey_type) {
    case LIBSSH2_HOSTKEY_TYPE_ED25519: return LIBSSH2_KNOWNHOST_KEY_ED25519;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_256: return LIBSSH2_KNOWNHOST_KEY_ECDSA_256;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_384: return LIBSSH2_KNOWNHOST_KEY_ECDSA_384;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_521: return LIBSSH2_KNOWNHOST_KEY_ECDSA_521;
    case LIBSSH2_HOSTKEY_TYPE_RSA: return LIBSSH2_KNOWNHOST_KEY_SSHRSA;
    default: return LIBSSH2_KNOWNHOST_KEY_UNKNOWN;
  }
}

const char *cs_kh_label(int kh_type) {
  for (size_t i = 0; i < NKEYTYPES; i++)
    if (key_types[i].kh_type == kh_type) return key_types[i].label;
  return "unknown";
}

/* "SHA256:<base64 without padding>", as OpenSSH prints fingerprints. */
void cs_kh_fingerprint(LIBSSH2_SESSION *s, char *out, size_t len) {
  const unsigned char *h = (const unsigned char *)libssh2_hostkey_hash(s, LIBSSH2_HOSTKEY_HASH_SHA256);
  unsigned char b64[64];
  if (!h) {
    snprintf(out, len, "SHA256:?");
    return;
  }
  int n = EVP_EncodeBlock(b64, h, 32);
  while (n > 0 && b64[n - 1] == '=') b64[--n] = '\0';
  snprintf(out, len, "SHA256:%s", (char *)b64);
}

/* accept-new: remember the key in memory and append its line to the file. */
int cs_kh_learn(cs_kh *k, const char *host, int port, const char *key, size_t klen, int type) {
  char name[300], line[4096];
  size_t outlen = 0;
  struct libssh2_knownhost *entry = NULL;
  if (port == 22) snprintf(name, sizeof name, "%s", host);
  else snprintf(name, sizeof name, "[%s]:%d", host, port);
  if (libssh2_knownhost_addc(k->kh, name, NULL, key, klen, NULL, 0,
        LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | type, &entry) != 0) return -1;
  if (libssh2_knownhost_writeline(k->kh, entry, line, sizeof line, &outlen,
        LIBSSH2_KNOWNHOST_FILE_OPENSSH) != 0) return -1;
  int fd = open(k->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  ssize_t w = write(fd, line, outlen);
  close(fd);
  return w == (ssize_t)outlen ? 0 : -1;
}

/* Adds ssh.known_hosts to the family table at -1 and creates the collection's metatable. */
void cs_kh_register(lua_State *L) {
  lua_pushcfunction(L, l_ssh_known_hosts);
  lua_setfield(L, -2, "known_hosts");
  luaL_newmetatable(L, KH_MT);
  lua_pushcfunction(L, l_kh_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_kh_gc);
  lua_setfield(L, -2, "__close");
  lua_pop(L, 1);
}

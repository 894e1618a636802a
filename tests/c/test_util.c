/* test_util.c - the util family from C: sha256 vectors, sha256 of files, shell quoting. */
#include "cs.h"
#include "ctest.h"

#include <stdlib.h>
#include <unistd.h>

#define SHA_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SHA_ABC "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA_MILLION_A "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"

static lua_State *new_state(void) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "cargoship.util", luaopen_cargoship_util, 0);
  lua_setglobal(L, "util");
  return L;
}

/* Pushes util.<fn>(arg) and returns its first result as a string (NULL if not one). */
static const char *call1(lua_State *L, const char *fn, const char *arg, size_t len) {
  lua_getglobal(L, "util");
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  lua_pushlstring(L, arg, len);
  lua_call(L, 1, 1);
  return lua_tostring(L, -1);
}

static void check_sha256(lua_State *L) {
  CHECK_STR(call1(L, "sha256", "", 0), SHA_EMPTY, "sha256 of \"\"");
  CHECK_STR(call1(L, "sha256", "abc", 3), SHA_ABC, "sha256 of \"abc\"");
  lua_pop(L, 2);
}

/* Writes n copies of c to a new temporary file; returns its path (static storage). */
static const char *temp_file(char c, size_t n) {
  static char path[] = "/tmp/cs-test-util-XXXXXX";
  strcpy(path + sizeof path - 7, "XXXXXX");
  int fd = mkstemp(path);
  if (fd < 0) return NULL;
  char buf[4096];
  memset(buf, c, sizeof buf);
  for (size_t left = n; left > 0;) {
    size_t k = left < sizeof buf ? left : sizeof buf;
    if (write(fd, buf, k) != (ssize_t)k) break;
    left -= k;
  }
  close(fd);
  return path;
}

static void check_sha256_file(lua_State *L) {
  const char *path = temp_file('a', 1000000);
  CHECK(path != NULL, "a temporary file of one million 'a'");
  if (!path) return;
  lua_getglobal(L, "util");
  lua_getfield(L, -1, "sha256_file");
  lua_pushstring(L, path);
  lua_call(L, 1, 2);
  CHECK_STR(lua_tostring(L, -2), SHA_MILLION_A, "sha256_file of one million 'a' (several reads)");
  CHECK(lua_tointeger(L, -1) == 1000000, "sha256_file gives the size it read");
  lua_pop(L, 2);
  unlink(path);
  lua_getfield(L, -1, "sha256_file");
  lua_pushstring(L, path);
  lua_call(L, 1, 3);
  char want[128];
  snprintf(want, sizeof want, "%s: sha256: No such file or directory", path);
  CHECK(lua_isnil(L, -3), "sha256_file of a missing file gives nil");
  CHECK_STR(lua_tostring(L, -2), want, "... the message names the path");
  CHECK_STR(lua_tostring(L, -1), "io", "... and the code is \"io\"");
  lua_pop(L, 4);
}

/* cs_quote through a luaL_Buffer, as other C code uses it. */
static const char *c_quote(lua_State *L, const char *s, size_t n) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  cs_quote(&b, s, n);
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

static void check_quote(lua_State *L) {
  static const struct { const char *in, *out; } cases[] = {
    {"", "''"},
    {"abc", "'abc'"},
    {"it's", "'it'\\''s'"},
    {"'", "''\\'''"},
    {"''", "''\\'''\\'''"},
    {"$(rm -rf /) `id` $HOME", "'$(rm -rf /) `id` $HOME'"},
    {"a\nb\\c\"d", "'a\nb\\c\"d'"},
    {"-n", "'-n'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char what[96];
    snprintf(what, sizeof what, "util.quote case %zu", i + 1);
    CHECK_STR(call1(L, "quote", cases[i].in, strlen(cases[i].in)), cases[i].out, what);
    snprintf(what, sizeof what, "cs_quote case %zu", i + 1);
    CHECK_STR(c_quote(L, cases[i].in, strlen(cases[i].in)), cases[i].out, what);
    lua_pop(L, 2);
  }
  CHECK_LUA(L, "util.quote raises on a NUL byte",
    "local ok, err = pcall(util.quote, 'a\\0b'); return not ok and err:find('NUL') ~= nil, err");
}

int main(void) {
  lua_State *L = new_state();
  check_sha256(L);
  check_sha256_file(L);
  check_quote(L);
  lua_close(L);
  return ct_summary();
}

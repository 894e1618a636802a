/* main.c - the cargoship executable: one Lua state with the runtime, then lua/cargoship/cli.lua. */
#include "cs.h"

#include <limits.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The tree holding lua/ and distros/: <exe dir>/../share/cargoship once installed,
 * else the source tree this binary was built from. */
static void find_root(char *out, size_t len) {
  /* out must hold PATH_MAX + 128 bytes */
  char exe[PATH_MAX], probe[PATH_MAX + 128];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    snprintf(probe, sizeof probe, "%s/../%s/lua/cargoship", exe, CS_DATADIR_REL);
    if (is_dir(probe)) {
      snprintf(out, len, "%s/../%s", exe, CS_DATADIR_REL);
      return;
    }
  }
  snprintf(out, len, "%s", CS_SOURCE_DIR);
}

/* Prepends our tree to package.path and records the build facts for Lua.  [-0, +0, e] */
static void setup_paths(lua_State *L, const char *root) {
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  lua_pushfstring(L, "%s/lua/?.lua;%s/lua/?/init.lua;%s/?.lua;%s/?/init.lua;%s",
                  root, root, root, root, lua_tostring(L, -1));
  lua_setfield(L, -3, "path");
  lua_pop(L, 1);
  lua_getfield(L, -1, "loaded");
  lua_createtable(L, 0, 3);
  lua_pushstring(L, CS_VERSION);
  lua_setfield(L, -2, "version");
  lua_pushstring(L, root);
  lua_setfield(L, -2, "root");
  lua_setfield(L, -2, "cargoship.build");
  lua_pop(L, 2);
}

static void preload(lua_State *L) {
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
#define CS_FAMILY(name) lua_pushcfunction(L, luaopen_cargoship_##name); \
  lua_setfield(L, -2, "cargoship." #name);
#include "modules.h"
#undef CS_FAMILY
  lua_pop(L, 1);
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
  return 1;
}

/* Protected body: require the CLI and call cli.main(argv); its integer is the exit code. */
static int pmain(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = lua_touserdata(L, 2);
  char root[PATH_MAX + 128];
  luaL_openlibs(L);
  preload(L);
  find_root(root, sizeof root);
  setup_paths(L, root);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "cargoship.cli");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "main");
  lua_createtable(L, argc, 0);
  for (int i = 1; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i);
  }
  lua_call(L, 1, 1);
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (!L) {
    fputs("cargoship: cannot create the Lua state (out of memory)\n", stderr);
    return 70;
  }
  lua_pushcfunction(L, traceback);
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = lua_pcall(L, 2, 1, 1);
  int code;
  if (status != LUA_OK) {
    fprintf(stderr, "cargoship: internal error: %s\n", lua_tostring(L, -1));
    code = 70;
  } else {
    code = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
  }
  lua_close(L);
  return code;
}

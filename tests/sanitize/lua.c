/* lua.c - a minimal lua5.4 interpreter built with the Debug build's sanitizers, so specs load the sanitized module. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Debian's lua5.4 is not built with ASan, and the ASan runtime must be the first library a
 * process loads: a sanitized cargoship.so in it stops at "ASan runtime does not come first".
 * The Debug build runs its specs (busted, and the lua5.4 some specs start) in this one instead.
 * It takes what those use of lua.c: `lua [-e chunk]... [script [args]]`, the arg table, and the
 * exit status (1 on an error, with its traceback on stderr). */

/* C modules stay loaded when the state closes (os.exit(code, true) included): Lua unloads
 * them with dlclose, and a leak report would then say "<unknown module>" for their frames.
 * This definition takes the place of libc's for liblua's calls. */
int dlclose(void *handle) {
  (void)handle;
  return 0;
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  luaL_traceback(L, L, msg, 1);
  return 1;
}

static int report(lua_State *L, const char *prog, int status) {
  if (status == LUA_OK) return 0;
  fprintf(stderr, "%s: %s\n", prog, lua_tostring(L, -1));
  lua_pop(L, 1);
  return 1;
}

static int docall(lua_State *L, int nargs) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, traceback);
  lua_insert(L, base);
  int status = lua_pcall(L, nargs, 0, base);
  lua_remove(L, base);
  return status;
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
  if (!L) return 1;
  luaL_openlibs(L);
  int i = 1;
  for (; i + 1 < argc && strcmp(argv[i], "-e") == 0; i += 2) {
    int st = luaL_loadstring(L, argv[i + 1]);
    if (st == LUA_OK) st = docall(L, 0);
    if (report(L, argv[0], st)) { lua_close(L); return 1; }
  }
  /* arg: the script at 0, the interpreter and its options below, the script's arguments above */
  lua_createtable(L, argc - i, i);
  for (int j = 0; j < argc; j++) {
    lua_pushstring(L, argv[j]);
    lua_rawseti(L, -2, j - i);
  }
  lua_setglobal(L, "arg");
  int status = LUA_OK;
  if (i < argc) {
    status = luaL_loadfile(L, argv[i]);
    if (status == LUA_OK) {
      luaL_checkstack(L, argc, "too many arguments");
      for (int j = i + 1; j < argc; j++) lua_pushstring(L, argv[j]);
      status = docall(L, argc - i - 1);
    }
  }
  int rc = report(L, argv[0], status);
  lua_close(L);
  return rc;
}

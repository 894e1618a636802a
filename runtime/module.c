/* module.c - the runtime as a loadable Lua module: `require "cargoship.<family>"`. */
#include "cs.h"

/* Lua's all-in-one C loader looks up luaopen_cargoship_<family> in cargoship.so, so the
 * families need no extra code here; this opener only makes `require "cargoship"` work. */
int luaopen_cargoship(lua_State *L) {
  lua_newtable(L);
#define CS_FAMILY(name) luaL_requiref(L, "cargoship." #name, luaopen_cargoship_##name, 0); \
  lua_setfield(L, -2, #name);
#include "modules.h"
#undef CS_FAMILY
  return 1;
}

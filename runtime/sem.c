/* sem.c - counting semaphores for tasks: at most N holders, the rest wait in FIFO order. */
#include "cs.h"

#define SEM_MT "cargoship.semaphore"

typedef struct {
  lua_Integer avail;
  cs_waitq q;
} cs_sem;

static int sem_acquire_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  cs_sem *s = luaL_checkudata(L, 1, SEM_MT);
  int w = cs_wake_status(L);
  if (w == CS_WAKE_CANCELLED) {
    if (s->avail > 0) cs_waitq_wake_one(L, &s->q);  /* pass on a wake-up meant for us */
    return cs_raise_cancelled(L);
  }
  if (s->avail > 0) {
    s->avail--;
    lua_pushboolean(L, 1);
    return 1;
  }
  if (w == CS_WAKE_TIMEOUT) {
    lua_pushnil(L);
    lua_pushliteral(L, "semaphore: timed out");
    lua_pushliteral(L, "timeout");
    return 3;
  }
  double deadline = lua_tonumber(L, 2);
  return cs_wait(L, -1, 0, &s->q, deadline, 0, sem_acquire_k);
}

/* sem:acquire([timeout]) -> true | nil, msg, "timeout" */
static int l_sem_acquire(lua_State *L) {
  cs_sem *s = luaL_checkudata(L, 1, SEM_MT);
  double timeout = luaL_optnumber(L, 2, -1);
  if (s->avail > 0 && !s->q.head) {
    s->avail--;
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_settop(L, 1);
  lua_pushnumber(L, timeout >= 0 ? cs_now() + timeout : 0);
  return cs_wait(L, -1, 0, &s->q, lua_tonumber(L, 2), 0, sem_acquire_k);
}

static int l_sem_release(lua_State *L) {
  cs_sem *s = luaL_checkudata(L, 1, SEM_MT);
  s->avail++;
  cs_waitq_wake_one(L, &s->q);
  return 0;
}

static int l_sem_available(lua_State *L) {
  cs_sem *s = luaL_checkudata(L, 1, SEM_MT);
  lua_pushinteger(L, s->avail);
  return 1;
}

static int l_loop_semaphore(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n >= 0, 1, "negative count");
  cs_sem *s = lua_newuserdatauv(L, sizeof *s, 0);
  s->avail = n;
  s->q.head = s->q.tail = NULL;
  luaL_setmetatable(L, SEM_MT);
  return 1;
}

static const luaL_Reg sem_methods[] = {
  {"acquire", l_sem_acquire},
  {"release", l_sem_release},
  {"available", l_sem_available},
  {NULL, NULL}
};

/* Adds loop.semaphore to the family table at -1 and creates the semaphore's metatable. */
void cs_sem_register(lua_State *L) {
  lua_pushcfunction(L, l_loop_semaphore);
  lua_setfield(L, -2, "semaphore");
  if (luaL_newmetatable(L, SEM_MT)) {
    lua_newtable(L);
    luaL_setfuncs(L, sem_methods, 0);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
}

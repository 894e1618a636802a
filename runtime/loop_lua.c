/* loop_lua.c - the event loop's Lua API: loop.run/spawn/sleep/wait_fd/defer and task objects. */
#include "loop_int.h"

#include <errno.h>
#include <poll.h>
#include <string.h>

/* Pushes a task's outcome as join reports it: true, results... | false, err, code. */
static int push_outcome(lua_State *L, cs_task *t, int idx) {
  lua_getiuservalue(L, idx, UV_RESULTS);
  int res = lua_gettop(L);
  lua_getfield(L, res, "n");
  int n = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  luaL_checkstack(L, n + 3, "too many results");
  if (t->ok) {
    lua_pushboolean(L, 1);
    for (int i = 1; i <= n; i++) lua_rawgeti(L, res, i);
    return n + 1;
  }
  lua_pushboolean(L, 0);
  lua_rawgeti(L, res, 1);
  lua_pushstring(L, t->code ? t->code : "error");
  return 3;
}

/* loop.run(fn, ...) -> true, results... | false, err, code */
static int l_loop_run(lua_State *L) {
  cs_loop *lp = cs_loop_get(L);
  luaL_checktype(L, 1, LUA_TFUNCTION);
  if (lp->running) return luaL_error(L, "loop.run: the loop is already running");
  struct sigaction old[CS_NSIGNALS];
  if (cs_loop_signals_install(lp, old) != 0) return luaL_error(L, "loop.run: pipe: %s", strerror(errno));
  lp->running = 1;
  lp->interrupted = 0;
  lp->main = cs_loop_spawn(L, lp, 1);
  int tidx = lua_gettop(L);
  cs_loop_run_all(L, lp);
  lp->running = 0;
  cs_loop_signals_restore(lp, old);
  return push_outcome(L, cs_loop_check_task(L, tidx), tidx);
}

/* The main task ending cancels the rest: wrap so run() drains them afterwards. */
static int l_loop_spawn(lua_State *L) {
  cs_loop *lp = cs_loop_get(L);
  if (!lp->running) return luaL_error(L, "loop.spawn: the loop is not running (use loop.run)");
  cs_loop_spawn(L, lp, 1);
  return 1;
}

static int sleep_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  if (cs_wake_status(L) == CS_WAKE_CANCELLED) return cs_raise_cancelled(L);
  lua_pushboolean(L, 1);
  return 1;
}

/* loop.sleep(seconds): yields the task; raises "cancelled" when cancelled. */
static int l_loop_sleep(lua_State *L) {
  double s = luaL_checknumber(L, 1);
  luaL_argcheck(L, s >= 0, 1, "negative duration");
  return cs_wait(L, -1, 0, NULL, cs_now() + s, 0, sleep_k);
}

static int wait_fd_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  int w = cs_wake_status(L);
  if (w == CS_WAKE_CANCELLED) return cs_raise_cancelled(L);
  if (w == CS_WAKE_TIMEOUT) {
    lua_pushnil(L);
    lua_pushliteral(L, "wait: timed out");
    lua_pushliteral(L, "timeout");
    return 3;
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* loop.wait_fd(fd, "r"|"w", timeout) -> true | nil, msg, "timeout" */
static int l_loop_wait_fd(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  const char *mode = luaL_checkstring(L, 2);
  double timeout = luaL_optnumber(L, 3, -1);
  luaL_argcheck(L, fd >= 0, 1, "bad file descriptor");
  short ev = strchr(mode, 'w') ? POLLOUT : POLLIN;
  return cs_wait(L, fd, ev, NULL, timeout >= 0 ? cs_now() + timeout : 0, 0, wait_fd_k);
}

static int join_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  int w = cs_wake_status(L);
  cs_task *t = cs_loop_check_task(L, 1);
  if (w == CS_WAKE_CANCELLED) return cs_raise_cancelled(L);
  if (t->state != T_DONE) {
    lua_pushboolean(L, 0);
    lua_pushfstring(L, "join: task %d did not finish in time", (int)t->id);
    lua_pushliteral(L, "timeout");
    return 3;
  }
  lua_settop(L, 1);
  return push_outcome(L, t, 1);
}

/* task:join([timeout]) -> true, results... | false, err, "error"|"cancelled"|"timeout" */
static int l_task_join(lua_State *L) {
  cs_task *t = cs_loop_check_task(L, 1);
  double timeout = luaL_optnumber(L, 2, -1);
  lua_settop(L, 1);
  if (t->state == T_DONE) return push_outcome(L, t, 1);
  cs_task *me = cs_loop_running_task(L);
  if (me == t) return luaL_error(L, "task:join: a task cannot join itself");
  return cs_wait(L, -1, 0, &t->joiners, timeout >= 0 ? cs_now() + timeout : 0, 0, join_k);
}

static int l_task_cancel(lua_State *L) {
  cs_task *t = cs_loop_check_task(L, 1);
  cs_loop_cancel_task(t->loop, t);
  return 0;
}

static int l_task_status(lua_State *L) {
  static const char *const names[] = {"ready", "running", "waiting", "done"};
  cs_task *t = cs_loop_check_task(L, 1);
  lua_pushstring(L, names[t->state]);
  return 1;
}

static int l_task_id(lua_State *L) {
  lua_pushinteger(L, cs_loop_check_task(L, 1)->id);
  return 1;
}

static int l_task_cancelled(lua_State *L) {
  lua_pushboolean(L, cs_loop_check_task(L, 1)->cancelled);
  return 1;
}

/* task:stopping() -> true when the task is cancelled and not in its destructors or a shield:
 * its next wait raises, so whatever it started is about to be wound up. */
static int l_task_stopping(lua_State *L) {
  cs_task *t = cs_loop_check_task(L, 1);
  lua_pushboolean(L, t->cancelled && !t->cleanup && t->state != T_DONE);
  return 1;
}

static int l_task_tostring(lua_State *L) {
  lua_pushfstring(L, "task %d", (int)cs_loop_check_task(L, 1)->id);
  return 1;
}

static int shield_k(lua_State *L, int status, lua_KContext ctx) {
  cs_loop_running_task(L)->cleanup = (int)ctx;
  if (status != LUA_OK && status != LUA_YIELD) return lua_error(L);
  return lua_gettop(L);
}

/* loop.shield(fn, ...) -> fn's results: runs fn with cancellation held off, as destructors
 * run: its waits complete even when the task is cancelled meanwhile, and the cancellation
 * takes effect at the task's next wait after it. For work that must finish once started
 * (ending a remote command before its host's lock goes); bound its waits yourself. */
static int l_loop_shield(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  cs_task *t = cs_loop_running_task(L);
  int prev = t->cleanup;
  t->cleanup = 1;
  int st = lua_pcallk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, (lua_KContext)prev, shield_k);
  return shield_k(L, st, (lua_KContext)prev);
}

/* loop.defer(fn): fn runs when the current task ends, however it ends (LIFO). */
static int l_loop_defer(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  cs_task *t = cs_loop_running_task(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, t->self_ref);
  lua_getiuservalue(L, -1, UV_DEFERS);
  lua_pushvalue(L, 1);
  lua_rawseti(L, -2, luaL_len(L, -2) + 1);
  return 0;
}

static int l_loop_current(lua_State *L) {
  cs_loop *lp = cs_loop_get(L);
  if (!lp->current || lp->current->co != L) return 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, lp->current->self_ref);
  return 1;
}

static int l_loop_now(lua_State *L) {
  lua_pushnumber(L, cs_now());
  return 1;
}

static int l_loop_cancel_all(lua_State *L) {
  cs_loop_cancel_all(cs_loop_get(L));
  return 0;
}

static int l_loop_interrupted(lua_State *L) {
  cs_loop *lp = cs_loop_get(L);
  if (!lp->interrupted) return 0;
  lua_pushinteger(L, lp->interrupted);
  return 1;
}

static int l_loop_running(lua_State *L) {
  lua_pushboolean(L, cs_loop_get(L)->running);
  return 1;
}

static const luaL_Reg task_methods[] = {
  {"join", l_task_join},
  {"cancel", l_task_cancel},
  {"status", l_task_status},
  {"id", l_task_id},
  {"cancelled", l_task_cancelled},
  {"stopping", l_task_stopping},
  {NULL, NULL}
};


static const luaL_Reg loop_funcs[] = {
  {"run", l_loop_run},
  {"spawn", l_loop_spawn},
  {"sleep", l_loop_sleep},
  {"wait_fd", l_loop_wait_fd},
  {"defer", l_loop_defer},
  {"shield", l_loop_shield},
  {"current", l_loop_current},
  {"now", l_loop_now},
  {"cancel_all", l_loop_cancel_all},
  {"interrupted", l_loop_interrupted},
  {"running", l_loop_running},
  {NULL, NULL}
};

static void new_class(lua_State *L, const char *name, const luaL_Reg *methods,
                      lua_CFunction tostring) {
  luaL_newmetatable(L, name);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  if (tostring) {
    lua_pushcfunction(L, tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
}

int luaopen_cargoship_loop(lua_State *L) {
  if (luaL_newmetatable(L, LOOP_MT)) {
    lua_pushcfunction(L, cs_loop_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  new_class(L, TASK_MT, task_methods, l_task_tostring);
  cs_loop_get(L);
  luaL_newlib(L, loop_funcs);
  cs_sem_register(L);
  return 1;
}

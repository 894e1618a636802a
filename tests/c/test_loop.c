/* test_loop.c - the loop's C wait API: a primitive that yields with cs_wait, and SIGINT. */
#include "cs.h"
#include "ctest.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

static int last_wake = -1, resumes;

static int wait_readable_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  (void)ctx;
  last_wake = cs_wake_status(L);
  resumes++;
  if (last_wake == CS_WAKE_CANCELLED) return cs_raise_cancelled(L);
  lua_pushstring(L, last_wake == CS_WAKE_READY ? "ready" : "timeout");
  return 1;
}

/* wait_readable(fd, timeout) -> "ready" | "timeout"; raises "cancelled" */
static int l_test_wait_readable(lua_State *L) {
  int fd = (int)luaL_checkinteger(L, 1);
  double timeout = luaL_checknumber(L, 2);
  return cs_wait(L, fd, POLLIN, NULL, cs_now() + timeout, 0, wait_readable_k);
}

/* write_byte(fd): makes the pipe readable */
static int l_test_write_byte(lua_State *L) {
  lua_pushboolean(L, write((int)luaL_checkinteger(L, 1), "x", 1) == 1);
  return 1;
}

/* drain(fd): empties the pipe for the next check */
static int l_test_drain(lua_State *L) {
  char buf[64];
  int fd = (int)luaL_checkinteger(L, 1);
  while (read(fd, buf, sizeof buf) > 0) continue;
  return 0;
}

static int l_test_raise_sigint(lua_State *L) {
  (void)L;
  raise(SIGINT);
  return 0;
}

/* last_wake() -> the reason the last wait_readable resumed, and how many resumes so far */
static int l_test_last_wake(lua_State *L) {
  static const char *const names[] = {"ready", "timeout", "cancelled"};
  lua_pushstring(L, last_wake >= 0 ? names[last_wake] : "none");
  lua_pushinteger(L, resumes);
  return 2;
}

static lua_State *new_state(int pipefd[2]) {
  lua_State *L = luaL_newstate();
  luaL_openlibs(L);
  luaL_requiref(L, "cargoship.loop", luaopen_cargoship_loop, 0);
  lua_setglobal(L, "loop");
  static const luaL_Reg fns[] = {
    {"wait_readable", l_test_wait_readable}, {"write_byte", l_test_write_byte},
    {"drain", l_test_drain}, {"raise_sigint", l_test_raise_sigint},
    {"last_wake", l_test_last_wake}, {NULL, NULL}};
  lua_pushglobaltable(L);
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
  lua_pushinteger(L, pipefd[0]);
  lua_setglobal(L, "R");
  lua_pushinteger(L, pipefd[1]);
  lua_setglobal(L, "W");
  return L;
}

static void check_waits(lua_State *L) {
  CHECK_LUA(L, "a primitive waiting outside a task raises",
    "local ok, err = pcall(wait_readable, R, 1)\n"
    "return not ok and tostring(err):find('outside a task') ~= nil, err");
  CHECK_LUA(L, "READY: the waiting task yields and resumes when another task writes the pipe",
    "drain(R)\n"
    "local _, resumes0 = last_wake()\n"
    "local ok, got, status = loop.run(function()\n"
    "  local t = loop.spawn(function() return wait_readable(R, 5) end)\n"
    "  loop.sleep(0.01)\n"
    "  local st = t:status()\n"
    "  loop.spawn(function() write_byte(W) end)\n"
    "  local jok, v = t:join()\n"
    "  return jok and v, st\n"
    "end)\n"
    "local why, resumes = last_wake()\n"
    "return ok and got == 'ready' and status == 'waiting' and why == 'ready' and resumes == resumes0 + 1,\n"
    "  ('%s %s %s %s %d'):format(tostring(ok), tostring(got), tostring(status), why, resumes - resumes0)");
  CHECK_LUA(L, "TIMEOUT: nobody writes, the wait ends at its deadline",
    "drain(R)\n"
    "local t0 = loop.now()\n"
    "local ok, got = loop.run(function() return wait_readable(R, 0.05) end)\n"
    "local took = loop.now() - t0\n"
    "return ok and got == 'timeout' and last_wake() == 'timeout' and took >= 0.05 and took < 2,\n"
    "  ('%s %s %.3f'):format(tostring(ok), tostring(got), took)");
  CHECK_LUA(L, "CANCELLED: cancelling the waiting task resumes it with CANCELLED and it ends cancelled",
    "drain(R)\n"
    "local cleaned = false\n"
    "local ok, a, b, c = loop.run(function()\n"
    "  local t = loop.spawn(function()\n"
    "    loop.defer(function() cleaned = true end)\n"
    "    return wait_readable(R, 60)\n"
    "  end)\n"
    "  loop.sleep(0.01)\n"
    "  t:cancel()\n"
    "  return t:join()\n"
    "end)\n"
    "return ok and a == false and b == 'cancelled' and c == 'cancelled' and cleaned\n"
    "  and last_wake() == 'cancelled', ('%s %s %s %s'):format(tostring(a), tostring(b), tostring(c), last_wake())");
}

static void check_sigint(lua_State *L) {
  CHECK_LUA(L, "the first SIGINT cancels every task, runs their destructors; run returns false, cancelled",
    "drain(R)\n"
    "local ran = 0\n"
    "local ok, err, code = loop.run(function()\n"
    "  loop.defer(function() ran = ran + 1 end)\n"
    "  for _ = 1, 3 do\n"
    "    loop.spawn(function() loop.defer(function() ran = ran + 1 end); loop.sleep(60) end)\n"
    "  end\n"
    "  loop.spawn(function() loop.defer(function() ran = ran + 1 end); wait_readable(R, 60) end)\n"
    "  loop.sleep(0)\n"
    "  raise_sigint()\n"
    "  loop.sleep(60)\n"
    "end)\n"
    "return ok == false and err == 'cancelled' and code == 'cancelled' and ran == 5\n"
    "  and loop.interrupted() == 2 and last_wake() == 'cancelled',\n"
    "  ('%s %s %s ran=%d interrupted=%s'):format(tostring(ok), tostring(err), tostring(code), ran,\n"
    "    tostring(loop.interrupted()))");
  CHECK_LUA(L, "the next run starts uninterrupted",
    "local ok = loop.run(function() loop.sleep(0) end)\n"
    "return ok and loop.interrupted() == nil");
}

int main(void) {
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    perror("pipe2");
    return 1;
  }
  lua_State *L = new_state(fds);
  check_waits(L);
  check_sigint(L);
  lua_close(L);
  close(fds[0]);
  close(fds[1]);
  return ct_summary();
}

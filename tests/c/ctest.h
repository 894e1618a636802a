/* ctest.h - a tiny check harness for the runtime's C tests: one line per check, a summary. */
#ifndef CTEST_H
#define CTEST_H

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <string.h>

static int ct_passed, ct_failed;

/* Records one check and prints its line; returns cond so a caller may skip what depends on it. */
static inline int ct_check(int cond, const char *what, const char *file, int line) {
  if (cond) ct_passed++;
  else ct_failed++;
  printf("%s - %s", cond ? "ok" : "FAIL", what);
  if (!cond) printf("  (%s:%d)", file, line);
  printf("\n");
  fflush(stdout);
  return cond;
}

#define CHECK(cond, what) ct_check(!!(cond), (what), __FILE__, __LINE__)

/* Like CHECK, and prints both strings when they differ. */
static inline int ct_check_str(const char *got, const char *want, const char *what, const char *file, int line) {
  int same = got && want && strcmp(got, want) == 0;
  if (!same) printf("     got:  %s\n     want: %s\n", got ? got : "(null)", want ? want : "(null)");
  return ct_check(same, what, file, line);
}

#define CHECK_STR(got, want, what) ct_check_str((got), (want), (what), __FILE__, __LINE__)

/* Runs a Lua chunk that returns true when its check holds (or false, detail); one check.
 * The chunk's error, if any, fails the check and is printed. */
static inline int ct_check_lua(lua_State *L, const char *what, const char *chunk, const char *file, int line) {
  int top = lua_gettop(L);
  int ok = luaL_loadstring(L, chunk) == LUA_OK && lua_pcall(L, 0, 2, 0) == LUA_OK;
  int cond = ok && lua_toboolean(L, top + 1);
  if (!cond) {
    const char *detail = lua_tostring(L, ok ? top + 2 : -1);
    printf("     %s\n", detail ? detail : "(returned false)");
  }
  lua_settop(L, top);
  return ct_check(cond, what, file, line);
}

#define CHECK_LUA(L, what, chunk) ct_check_lua((L), (what), (chunk), __FILE__, __LINE__)

/* Prints the summary line ctest's log shows last; the process's exit status. */
static inline int ct_summary(void) {
  printf("%d passed, %d failed\n", ct_passed, ct_failed);
  fflush(stdout);   /* a sanitizer's exit at leak check would drop buffered output */
  return ct_failed ? 1 : 0;
}

#endif

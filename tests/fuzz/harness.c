/* harness.c - one libFuzzer binary for every fuzz target: a Lua state running the real modules on each input. */
#include "cs.h"
#include "ssh_int.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <lualib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The target is named by CS_FUZZ_TARGET (tests/fuzz/<target>.lua). That script returns
 * {file = "name" | nil, run = function(data, path, scratch)}: when `file` is given, each input
 * is first written to scratch/name and path names it. run returns normally on every input the
 * code under test handles (a result, or an error it reports as it documents); anything that
 * escapes run (a failed oracle, "attempt to index a nil value", a raise the function does not
 * document) is a finding: the harness prints it with a traceback and aborts, and libFuzzer
 * saves the input. Crashes and sanitizer reports are findings by themselves; hangs by -timeout. */

static lua_State *L;
static int run_ref = LUA_NOREF;
static char scratch[512];
static char input_path[600];
static const char *target;

static void die(const char *fmt, const char *arg) {
  fprintf(stderr, "fuzz harness: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(2);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)st; (void)f;
  int r = flag == FTW_DP ? rmdir(p) : unlink(p);
  return r != 0 && errno != ENOENT ? -1 : 0;
}

/* fuzz.rmtree(path): removes path and everything under it (links are not followed). */
static int l_rmtree(lua_State *L) {
  const char *p = luaL_checkstring(L, 1);
  if (nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
    return luaL_error(L, "rmtree %s: %s", p, strerror(errno));
  return 0;
}

/* fuzz.tree(path) -> {[relative path] = "file"|"dir"|"symlink"|"other"}, by lstat, recursively. */
static lua_State *tree_L;
static size_t tree_skip;
static int tree_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
  (void)flag; (void)f;
  if (strlen(p) <= tree_skip) return 0;
  const char *kind = S_ISREG(st->st_mode) ? "file" : S_ISDIR(st->st_mode) ? "dir"
                   : S_ISLNK(st->st_mode) ? "symlink" : "other";
  lua_pushstring(tree_L, kind);
  lua_setfield(tree_L, -2, p + tree_skip);
  return 0;
}
static int l_tree(lua_State *L) {
  const char *p = luaL_checkstring(L, 1);
  lua_newtable(L);
  tree_L = L;
  tree_skip = strlen(p) + 1;
  if (nftw(p, tree_one, 16, FTW_PHYS) != 0) return luaL_error(L, "tree %s: %s", p, strerror(errno));
  return 1;
}

/* fuzz.mkdir(path) */
static int l_mkdir(lua_State *L) {
  const char *p = luaL_checkstring(L, 1);
  if (mkdir(p, 0755) != 0 && errno != EEXIST) return luaL_error(L, "mkdir %s: %s", p, strerror(errno));
  return 0;
}

/* fuzz.kh_types(collection, host, port) -> the host-key methods known_hosts holds for host:port
 * (what the connection asks the server for; ssh_known_hosts.c) */
static int l_kh_types(lua_State *L) {
  cs_kh *k = cs_kh_check(L, 1);
  const char *host = luaL_checkstring(L, 2);
  int port = (int)luaL_checkinteger(L, 3);
  char prefs[512];
  cs_kh_known_types(k, host, port, prefs, sizeof prefs);
  lua_pushstring(L, prefs);
  return 1;
}

static const luaL_Reg fuzz_funcs[] = {
  {"rmtree", l_rmtree}, {"tree", l_tree}, {"mkdir", l_mkdir}, {"kh_types", l_kh_types}, {NULL, NULL}
};

static int open_fuzz(lua_State *L) {
  luaL_newlib(L, fuzz_funcs);
  lua_pushstring(L, scratch);
  lua_setfield(L, -2, "scratch");
  return 1;
}

/* The Lua half's coverage, for libFuzzer: a line hook counts each edge (previous line, line) of
 * the Lua code that runs into libFuzzer's extra counters, so the search follows the branches
 * of the Lua validators and parsers too, not only the C runtime's (instrumented by clang). */
#define LUA_EDGES (1 << 16)
__attribute__((used, section("__libfuzzer_extra_counters"))) static uint8_t lua_edges[LUA_EDGES];
static uintptr_t prev_loc;

static void line_hook(lua_State *L, lua_Debug *ar) {
  if (!lua_getinfo(L, "S", ar)) return;
  /* a chunk's source string lives as long as its functions: modules are loaded once */
  uintptr_t loc = ((uintptr_t)ar->source * 0x9E3779B1u) ^ ((uintptr_t)ar->currentline * 0x85EBCA6Bu);
  lua_edges[(loc ^ (prev_loc >> 1)) % LUA_EDGES]++;
  prev_loc = loc;
}

static int traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
  return 1;
}

static void cleanup(void) {
  if (L) lua_close(L);
  L = NULL;
  if (scratch[0]) nftw(scratch, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc; (void)argv;
  target = getenv("CS_FUZZ_TARGET");
  if (!target || !*target) die("%s", "set CS_FUZZ_TARGET to a target of tests/fuzz (yaml, cluster, ...)");
  const char *tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  snprintf(scratch, sizeof scratch, "%s/cs-fuzz-%s.XXXXXX", tmp, target);
  if (!mkdtemp(scratch)) die("cannot make a scratch directory: %s", strerror(errno));
  atexit(cleanup);

  L = luaL_newstate();
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
#define CS_FAMILY(name) lua_pushcfunction(L, luaopen_cargoship_##name); \
  lua_setfield(L, -2, "cargoship." #name);
#include "modules.h"
#undef CS_FAMILY
  lua_pushcfunction(L, open_fuzz);
  lua_setfield(L, -2, "fuzz");
  lua_pop(L, 1);
  const char *root = CS_SOURCE_DIR;
  lua_getglobal(L, "package");
  lua_pushfstring(L, "%s/lua/?.lua;%s/lua/?/init.lua;%s/?.lua;%s/?/init.lua;%s/tests/fuzz/?.lua;",
                  root, root, root, root, root);
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_getfield(L, -1, "loaded");
  lua_createtable(L, 0, 2);
  lua_pushstring(L, CS_VERSION);
  lua_setfield(L, -2, "version");
  lua_pushstring(L, root);
  lua_setfield(L, -2, "root");
  lua_setfield(L, -2, "cargoship.build");
  lua_pop(L, 2);

  lua_pushcfunction(L, traceback);
  lua_getglobal(L, "require");
  lua_pushfstring(L, "target_%s", target);
  if (lua_pcall(L, 1, 1, -3) != LUA_OK) die("%s", lua_tostring(L, -1));
  if (!lua_istable(L, -1)) die("target_%s.lua must return a table", target);
  if (lua_getfield(L, -1, "file") == LUA_TSTRING)
    snprintf(input_path, sizeof input_path, "%s/%s", scratch, lua_tostring(L, -1));
  lua_pop(L, 1);
  if (lua_getfield(L, -1, "run") != LUA_TFUNCTION) die("target_%s.lua: run is not a function", target);
  run_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_settop(L, 0);
  /* coroutines created later inherit it; CS_FUZZ_LUA_COVERAGE=0 turns it off (to measure its cost) */
  const char *cov = getenv("CS_FUZZ_LUA_COVERAGE");
  if (!cov || strcmp(cov, "0") != 0) lua_sethook(L, line_hook, LUA_MASKLINE, 0);
  return 0;
}

/* Bound what one input may write (a decompression bomb unpacked by archive.extract): the write
 * fails with EFBIG, which the code under test must report like any other error. Only while the
 * target runs (libFuzzer's own log and corpus files are not capped), and small: a bomb's input
 * costs what it writes, and 4 MiB made the archive target 8x slower than this. */
static void cap_writes(int on) {
  static struct rlimit orig;
  static int saved;
  if (!saved) saved = getrlimit(RLIMIT_FSIZE, &orig) == 0;
  if (!saved) die("getrlimit: %s", strerror(errno));
  struct rlimit fs = orig;
  if (on) fs.rlim_cur = orig.rlim_max < (256u << 10) ? orig.rlim_max : (256u << 10);
  if (setrlimit(RLIMIT_FSIZE, &fs) != 0) die("setrlimit: %s", strerror(errno));
}

static void write_input(const uint8_t *data, size_t size) {
  int fd = open(input_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) die("cannot write the input: %s", strerror(errno));
  for (size_t off = 0; off < size;) {
    ssize_t w = write(fd, data + off, size - off);
    if (w <= 0) die("cannot write the input: %s", strerror(errno));
    off += (size_t)w;
  }
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static unsigned long n;
  /* here, not in LLVMFuzzerInitialize: libFuzzer installs its own SIGXFSZ handler after it */
  if (n == 0) signal(SIGXFSZ, SIG_IGN);
  if (input_path[0]) write_input(data, size);
  prev_loc = 0;
  lua_pushcfunction(L, traceback);
  lua_rawgeti(L, LUA_REGISTRYINDEX, run_ref);
  lua_pushlstring(L, (const char *)data, size);
  if (input_path[0]) lua_pushstring(L, input_path);
  else lua_pushnil(L);
  lua_pushstring(L, scratch);
  cap_writes(1);
  int rc = lua_pcall(L, 3, 0, 1);
  cap_writes(0);
  if (rc != LUA_OK) {
    fprintf(stderr, "\n==FINDING== target %s: %s\n", target, lua_tostring(L, -1));
    abort();
  }
  lua_settop(L, 0);
  /* keep the state's garbage from piling up across millions of inputs */
  if (++n % 64 == 0) lua_gc(L, LUA_GCCOLLECT);
  return 0;
}

/* util.c - small primitives: sha256, the one shell-quoting helper, clock, terminal test. */
#include "cs.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int cs_fail(lua_State *L, const char *who, const char *op, const char *detail, const char *code) {
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s: %s", who, op, detail);
  lua_pushstring(L, code);
  return 3;
}

/* POSIX single quotes keep every byte literal except the quote itself, which is
 * closed, escaped and reopened: 'it'\''s'. NUL cannot travel in a shell word at
 * all, so callers reject it (util.quote raises). */
void cs_quote(luaL_Buffer *b, const char *s, size_t len) {
  luaL_addchar(b, '\'');
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '\'') luaL_addstring(b, "'\\''");
    else luaL_addchar(b, s[i]);
  }
  luaL_addchar(b, '\'');
}

/* util.quote(s) -> shell word; raises on NUL (it cannot reach a remote shell intact) */
static int l_util_quote(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  luaL_argcheck(L, memchr(s, '\0', len) == NULL, 1, "string holds a NUL byte, which no shell word can carry");
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  cs_quote(&b, s, len);
  luaL_pushresult(&b);
  return 1;
}

static void push_hex(lua_State *L, const unsigned char *md, unsigned n) {
  static const char hex[] = "0123456789abcdef";
  char out[2 * EVP_MAX_MD_SIZE];
  for (unsigned i = 0; i < n; i++) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  lua_pushlstring(L, out, 2 * n);
}

/* util.sha256(s) -> hex digest */
static int l_util_sha256(lua_State *L) {
  size_t len;
  const char *s = luaL_checklstring(L, 1, &len);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  if (!EVP_Digest(s, len, md, &n, EVP_sha256(), NULL)) return luaL_error(L, "sha256: libcrypto failed");
  push_hex(L, md, n);
  return 1;
}

/* Digests already taken, by file identity (device, inode, size, mtime and ctime, which no
 * one can set back): a package's file is hashed by the loader's verification, the plan and
 * the upload of every host, and a 256 MiB file to 50 hosts would be hashed 50 times. */
typedef struct sum_entry {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime, ctime;
  char hex[2 * EVP_MAX_MD_SIZE + 1];
  struct sum_entry *next;
} sum_entry;

static sum_entry *sums;

static int same_identity(const sum_entry *e, const struct stat *st) {
  return e->dev == st->st_dev && e->ino == st->st_ino && e->size == st->st_size
      && e->mtime.tv_sec == st->st_mtim.tv_sec && e->mtime.tv_nsec == st->st_mtim.tv_nsec
      && e->ctime.tv_sec == st->st_ctim.tv_sec && e->ctime.tv_nsec == st->st_ctim.tv_nsec;
}

/* Remembers a digest taken of a regular file that did not change while it was read. */
static void remember(int fd, const struct stat *before, const unsigned char *md, unsigned n, lua_Integer total) {
  struct stat after;
  if (!S_ISREG(before->st_mode) || fstat(fd, &after) != 0 || total != before->st_size) return;
  if (after.st_size != before->st_size || after.st_mtim.tv_sec != before->st_mtim.tv_sec
      || after.st_mtim.tv_nsec != before->st_mtim.tv_nsec) return;
  sum_entry *e = calloc(1, sizeof *e);
  if (!e) return;
  e->dev = before->st_dev;
  e->ino = before->st_ino;
  e->size = before->st_size;
  e->mtime = before->st_mtim;
  e->ctime = before->st_ctim;
  for (unsigned i = 0; i < n; i++) snprintf(e->hex + 2 * i, 3, "%02x", md[i]);
  e->next = sums;
  sums = e;
}

/* util.sha256_file(path) -> hex digest, size | nil, "path: sha256: detail", "io"
 * Taken once per file identity in this process (see sum_entry). */
static int l_util_sha256_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return cs_fail(L, path, "sha256", strerror(errno), "io");
  struct stat st;
  int have_st = fstat(fd, &st) == 0;
  if (have_st && S_ISREG(st.st_mode))
    for (sum_entry *e = sums; e; e = e->next)
      if (same_identity(e, &st)) {
        close(fd);
        lua_pushstring(L, e->hex);
        lua_pushinteger(L, (lua_Integer)e->size);
        return 2;
      }
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
    EVP_MD_CTX_free(ctx);
    close(fd);
    return luaL_error(L, "sha256: libcrypto failed");
  }
  static unsigned char buf[1 << 16];
  lua_Integer total = 0;
  ssize_t r;
  while ((r = read(fd, buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR)) {
    if (r < 0) continue;
    EVP_DigestUpdate(ctx, buf, (size_t)r);
    total += r;
  }
  int err = r < 0 ? errno : 0;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  EVP_MD_CTX_free(ctx);
  if (!err && have_st) remember(fd, &st, md, n, total);
  close(fd);
  if (err) return cs_fail(L, path, "sha256", strerror(err), "io");
  push_hex(L, md, n);
  lua_pushinteger(L, total);
  return 2;
}

/* An incremental SHA-256, for a body that arrives in pieces (a download streamed from a pipe)
 * and is never held whole. The digest context lives in the userdata; __gc frees it. */
#define HASHER_MT "cargoship.util.sha256_hasher"

typedef struct hasher {
  EVP_MD_CTX *ctx; /* NULL once finished */
  lua_Integer size;
} hasher;

static hasher *check_hasher(lua_State *L) {
  hasher *h = luaL_checkudata(L, 1, HASHER_MT);
  if (!h->ctx) luaL_error(L, "sha256 hasher: already finished");
  return h;
}

/* util.sha256_hasher() -> hasher with :update(s) and :finish() -> hex digest, size */
static int l_util_sha256_hasher(lua_State *L) {
  hasher *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->ctx = NULL;
  h->size = 0;
  luaL_setmetatable(L, HASHER_MT);
  h->ctx = EVP_MD_CTX_new();
  if (!h->ctx || !EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL)) return luaL_error(L, "sha256: libcrypto failed");
  return 1;
}

/* hasher:update(s) -> hasher   [-0, +1, e] */
static int l_util_hasher_update(lua_State *L) {
  hasher *h = check_hasher(L);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  if (!EVP_DigestUpdate(h->ctx, s, len)) return luaL_error(L, "sha256: libcrypto failed");
  h->size += (lua_Integer)len;
  lua_settop(L, 1);
  return 1;
}

/* hasher:finish() -> hex digest, size (bytes hashed); the hasher cannot be used again */
static int l_util_hasher_finish(lua_State *L) {
  hasher *h = check_hasher(L);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  int ok = EVP_DigestFinal_ex(h->ctx, md, &n);
  EVP_MD_CTX_free(h->ctx);
  h->ctx = NULL;
  if (!ok) return luaL_error(L, "sha256: libcrypto failed");
  push_hex(L, md, n);
  lua_pushinteger(L, h->size);
  return 2;
}

static int l_util_hasher_gc(lua_State *L) {
  hasher *h = luaL_checkudata(L, 1, HASHER_MT);
  EVP_MD_CTX_free(h->ctx);
  h->ctx = NULL;
  return 0;
}

static const luaL_Reg hasher_methods[] = {
  {"update", l_util_hasher_update},
  {"finish", l_util_hasher_finish},
  {NULL, NULL}
};

static const char *file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

/* util.read_regular(path, max) -> text | nil, "path: read: detail", "io"
 * Reads a regular file of at most max bytes, and nothing else: opened with O_NONBLOCK so
 * a FIFO cannot block the process (and every task with it), checked with fstat so a
 * directory or a device (/dev/zero) is refused before one byte is read. The buffer is
 * allocated before the file is opened, so no raise can leak the descriptor. */
static int l_util_read_regular(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  lua_Integer max = luaL_checkinteger(L, 2);
  luaL_argcheck(L, max >= 0 && max < (1 << 30), 2, "expected 0 <= max < 1 GiB");
  luaL_Buffer b;
  char *p = luaL_buffinitsize(L, &b, (size_t)max + 1);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return cs_fail(L, path, "read", strerror(errno), "io");
  struct stat st;
  char detail[96];
  const char *why = NULL;
  if (fstat(fd, &st) != 0) why = strerror(errno);
  else if (!S_ISREG(st.st_mode)) {
    snprintf(detail, sizeof detail, "%s, not a regular file", file_kind(st.st_mode));
    why = detail;
  } else if (st.st_size > (off_t)max) {
    snprintf(detail, sizeof detail, "larger than %lld bytes", (long long)max);
    why = detail;
  }
  size_t got = 0;
  while (!why) {
    ssize_t r = read(fd, p + got, (size_t)max + 1 - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) why = strerror(errno);
    else if (r == 0) break;
    else if ((got += (size_t)r) > (size_t)max) {   /* it grew since fstat */
      snprintf(detail, sizeof detail, "larger than %lld bytes", (long long)max);
      why = detail;
    }
  }
  close(fd);
  if (why) return cs_fail(L, path, "read", why, "io");
  luaL_pushresultsize(&b, got);
  return 1;
}

static int l_util_now(lua_State *L) {
  lua_pushnumber(L, cs_now());
  return 1;
}

/* util.wall() -> seconds since the epoch, with their fraction (util.now is monotonic). */
static int l_util_wall(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
  return 1;
}

/* util.isatty(fd | "stdin" | "stdout" | "stderr") -> boolean */
static int l_util_isatty(lua_State *L) {
  int fd;
  if (lua_type(L, 1) == LUA_TSTRING) {
    static const char *const names[] = {"stdin", "stdout", "stderr", NULL};
    fd = luaL_checkoption(L, 1, NULL, names);
  } else {
    fd = (int)luaL_checkinteger(L, 1);
  }
  lua_pushboolean(L, isatty(fd));
  return 1;
}

static int l_util_getpid(lua_State *L) {
  lua_pushinteger(L, getpid());
  return 1;
}

static int l_util_hostname(lua_State *L) {
  char name[256];
  if (gethostname(name, sizeof name) != 0) return cs_fail(L, "localhost", "hostname", strerror(errno), "io");
  name[sizeof name - 1] = '\0';
  lua_pushstring(L, name);
  return 1;
}

static const luaL_Reg util_funcs[] = {
  {"quote", l_util_quote},
  {"sha256", l_util_sha256},
  {"sha256_file", l_util_sha256_file},
  {"sha256_hasher", l_util_sha256_hasher},
  {"read_regular", l_util_read_regular},
  {"now", l_util_now},
  {"wall", l_util_wall},
  {"isatty", l_util_isatty},
  {"getpid", l_util_getpid},
  {"hostname", l_util_hostname},
  {NULL, NULL}
};

int luaopen_cargoship_util(lua_State *L) {
  if (luaL_newmetatable(L, HASHER_MT)) {
    luaL_newlib(L, hasher_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_util_hasher_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  luaL_newlib(L, util_funcs);
  return 1;
}

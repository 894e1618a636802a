/* fs.c - local file primitives plain Lua lacks: replace a file atomically keeping its mode. */
#include "cs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_all(int fd, const char *p, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* fs.replace(path, data [, mode]) -> true | nil, "path: replace: detail", "io"
 * Writes data to a new file beside path and renames it over path, so a reader sees the old
 * file or the whole new one, never half. The new file gets path's mode and owner when path
 * exists (else `mode`, default 0600): a cluster file holding secrets must not widen. */
static int l_fs_replace(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  size_t len;
  const char *data = luaL_checklstring(L, 2, &len);
  mode_t mode = (mode_t)luaL_optinteger(L, 3, 0600);
  struct stat st;
  int have = stat(path, &st) == 0;
  if (have && !S_ISREG(st.st_mode)) return cs_fail(L, path, "replace", "not a regular file", "io");
  if (have) mode = st.st_mode & 07777;
  const char *tmp = lua_pushfstring(L, "%s.cargoship-%d.tmp", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return cs_fail(L, tmp, "replace", strerror(errno), "io");
  int err = 0;
  if (write_all(fd, data, len) != 0) err = errno ? errno : EIO;
  /* owner first: chown may clear set-id bits, which the chmod then restores */
  if (!err && have && geteuid() == 0 && fchown(fd, st.st_uid, st.st_gid) != 0) err = errno;
  if (!err && fchmod(fd, mode) != 0) err = errno;
  if (!err && fsync(fd) != 0) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) {
    unlink(tmp);
    return cs_fail(L, path, "replace", strerror(err), "io");
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* fs.mode(path) -> permission bits | nil, "path: stat: detail", "io" */
static int l_fs_mode(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (stat(path, &st) != 0) return cs_fail(L, path, "stat", strerror(errno), "io");
  lua_pushinteger(L, st.st_mode & 07777);
  return 1;
}

static const luaL_Reg fs_funcs[] = {
  {"replace", l_fs_replace},
  {"mode", l_fs_mode},
  {NULL, NULL}
};

int luaopen_cargoship_fs(lua_State *L) {
  luaL_newlib(L, fs_funcs);
  return 1;
}

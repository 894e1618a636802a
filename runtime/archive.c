/* archive.c - tar, tar.zst and tar.gz read and write over libarchive, for distro packages and image tarballs. */
#include "cs.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 65536
/* the error is pushed before the reader is freed: names point into its entry */
#define READ_FAIL(expr) do { int n_ = (expr); archive_read_free(a); return n_; } while (0)

static int arc_fail(lua_State *L, const char *subject, const char *op, struct archive *a) {
  const char *msg = a ? archive_error_string(a) : NULL;
  return cs_fail(L, subject, op, msg ? msg : "archive error", "io");
}

/* A member name that stays inside the directory it is unpacked into: relative, no "..",
 * not empty. Leading "./" is tolerated (tar writes it) and skipped by the caller. */
static int safe_name(const char *name) {
  if (!name || !*name || name[0] == '/') return 0;
  const char *p = name;
  while (*p) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 2 && p[0] == '.' && p[1] == '.') return 0;
    if (!e) break;
    p = e + 1;
  }
  return 1;
}

static const char *strip_dot(const char *name) {
  while (name[0] == '.' && name[1] == '/') name += 2;
  return name;
}

static const char *type_name(mode_t t) {
  switch (t) {
    case AE_IFREG: return "file";
    case AE_IFDIR: return "dir";
    case AE_IFLNK: return "symlink";
    default: return "other";
  }
}

static struct archive *open_reader(lua_State *L, const char *path) {
  struct archive *a = archive_read_new();
  if (!a) { cs_fail(L, path, "open", "out of memory", "io"); return NULL; }
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  archive_read_support_format_gnutar(a);
  if (archive_read_open_filename(a, path, BLOCK) != ARCHIVE_OK) {
    arc_fail(L, path, "open", a);
    archive_read_free(a);
    return NULL;
  }
  return a;
}

/* archive.write(out, entries, {filter = "none"|"gzip"|"zstd"}) -> true | nil, msg, "io"
 * entries: { {name =, path = local file | data = string | dir = true, mode = int, mtime = int}, ... }
 * in the order given, owned by root (uid/gid 0), pax headers: the same inputs give the same
 * bytes, so a package or an image tarball is reproducible. */
static int l_archive_write(lua_State *L) {
  const char *out = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  const char *filter = "none";
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "filter");
    if (lua_isstring(L, -1)) filter = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  struct archive *a = archive_write_new();
  if (!a) return cs_fail(L, out, "create", "out of memory", "io");
  archive_write_set_format_pax_restricted(a);
  int r = ARCHIVE_OK;
  if (strcmp(filter, "zstd") == 0) r = archive_write_add_filter_zstd(a);
  else if (strcmp(filter, "gzip") == 0) {
    r = archive_write_add_filter_gzip(a);
    /* gzip's header carries a time stamp unless told not to */
    if (r == ARCHIVE_OK) archive_write_set_filter_option(a, "gzip", "timestamp", NULL);
  } else if (strcmp(filter, "none") != 0) {
    archive_write_free(a);
    return cs_fail(L, out, "create", "unknown filter (none, gzip, zstd)", "io");
  }
  if (r != ARCHIVE_OK && r != ARCHIVE_WARN) { arc_fail(L, out, "create", a); archive_write_free(a); return 3; }
  archive_write_set_bytes_in_last_block(a, 1);
  if (archive_write_open_filename(a, out) != ARCHIVE_OK) {
    arc_fail(L, out, "create", a);
    archive_write_free(a);
    return 3;
  }
  struct archive_entry *e = archive_entry_new();
  char *buf = malloc(BLOCK);
  int nret = 0;
  lua_Integer n = luaL_len(L, 2);
  for (lua_Integer i = 1; i <= n && !nret; i++) {
    lua_geti(L, 2, i);
    int t = lua_gettop(L);
    lua_getfield(L, t, "name");
    lua_getfield(L, t, "path");
    lua_getfield(L, t, "data");
    lua_getfield(L, t, "dir");
    lua_getfield(L, t, "mode");
    lua_getfield(L, t, "mtime");
    const char *name = lua_tostring(L, t + 1);
    const char *path = lua_tostring(L, t + 2);
    size_t dlen = 0;
    const char *data = lua_tolstring(L, t + 3, &dlen);
    int dir = lua_toboolean(L, t + 4);
    lua_Integer mode = luaL_optinteger(L, t + 5, dir ? 0755 : 0644);
    lua_Integer mtime = luaL_optinteger(L, t + 6, 0);
    if (!name) { nret = cs_fail(L, out, "write", "an entry has no name", "io"); break; }
    int fd = -1;
    la_int64_t size = 0;
    if (!dir && path) {
      struct stat st;
      fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0 || fstat(fd, &st) != 0) { nret = cs_fail(L, path, "open", strerror(errno), "io"); break; }
      size = st.st_size;
    } else if (!dir) {
      size = (la_int64_t)dlen;
    }
    archive_entry_clear(e);
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, dir ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(e, (mode_t)mode);
    archive_entry_set_size(e, dir ? 0 : size);
    archive_entry_set_mtime(e, (time_t)mtime, 0);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    archive_entry_set_uname(e, "root");
    archive_entry_set_gname(e, "root");
    if (archive_write_header(a, e) != ARCHIVE_OK) {
      nret = arc_fail(L, name, "write", a);
      if (fd >= 0) close(fd);
      break;
    }
    if (fd >= 0) {
      ssize_t got;
      while ((got = read(fd, buf, BLOCK)) > 0) {
        if (archive_write_data(a, buf, (size_t)got) < 0) { nret = arc_fail(L, name, "write", a); break; }
      }
      if (got < 0 && !nret) nret = cs_fail(L, path, "read", strerror(errno), "io");
      close(fd);
    } else if (!dir && dlen > 0) {
      if (archive_write_data(a, data, dlen) < 0) nret = arc_fail(L, name, "write", a);
    }
    if (!nret) lua_settop(L, t - 1);
  }
  free(buf);
  archive_entry_free(e);
  if (!nret && archive_write_close(a) != ARCHIVE_OK) nret = arc_fail(L, out, "close", a);
  archive_write_free(a);
  if (nret) return nret;
  lua_pushboolean(L, 1);
  return 1;
}

static void push_entry(lua_State *L, struct archive_entry *e, const char *name) {
  lua_createtable(L, 0, 5);
  lua_pushstring(L, name);
  lua_setfield(L, -2, "name");
  lua_pushinteger(L, (lua_Integer)archive_entry_size(e));
  lua_setfield(L, -2, "size");
  lua_pushinteger(L, (lua_Integer)archive_entry_perm(e));
  lua_setfield(L, -2, "mode");
  lua_pushstring(L, type_name(archive_entry_filetype(e)));
  lua_setfield(L, -2, "type");
  if (archive_entry_symlink(e)) {
    lua_pushstring(L, archive_entry_symlink(e));
    lua_setfield(L, -2, "link");
  }
  if (archive_entry_hardlink(e)) {
    lua_pushstring(L, archive_entry_hardlink(e));
    lua_setfield(L, -2, "hardlink");
  }
}

/* archive.list(path) -> { {name, size, mode, type = "file"|"dir"|"symlink"|"other", link?}, ... } | nil, msg */
static int l_archive_list(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  struct archive *a = open_reader(L, path);
  if (!a) return 3;
  struct archive_entry *e;
  lua_newtable(L);
  lua_Integer i = 0;
  int r;
  while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
    push_entry(L, e, archive_entry_pathname(e));
    lua_seti(L, -2, ++i);
  }
  if (r != ARCHIVE_EOF) { int n = arc_fail(L, path, "read", a); archive_read_free(a); return n; }
  archive_read_free(a);
  return 1;
}

/* Creates every missing directory of rel (its last component excluded) under root. */
static int make_parents(const char *root, const char *rel) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s/%s", root, rel) >= (int)sizeof buf) { errno = ENAMETOOLONG; return -1; }
  size_t skip = strlen(root) + 1;
  for (char *p = buf + skip; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return 0;
}

/* What one extraction may unpack, so that a hostile or corrupt archive cannot fill the disk:
 * a member's declared size, the declared and the written total, the number of members, and
 * the ratio of unpacked to compressed bytes once more than ratio_after bytes came out (a
 * member of zeros compresses 30000:1; packages of binaries, debs and image layers stay
 * under 10:1). Each can be lowered (or raised) by extract's limits table. */
typedef struct {
  lua_Integer max_member, max_total, max_entries, max_ratio, ratio_after;
} limits_t;
#define GIB ((lua_Integer)1 << 30)

static void read_limits(lua_State *L, int idx, limits_t *lim) {
  *lim = (limits_t){ 16 * GIB, 64 * GIB, 1000000, 100, 64 << 20 };
  if (!idx) return;
  static const char *const keys[] = { "max_member", "max_total", "max_entries", "max_ratio", "ratio_after" };
  lua_Integer *vals[] = { &lim->max_member, &lim->max_total, &lim->max_entries, &lim->max_ratio, &lim->ratio_after };
  for (int k = 0; k < 5; k++) {
    lua_getfield(L, idx, keys[k]);
    if (!lua_isnil(L, -1)) {
      int ok;
      lua_Integer v = lua_tointegerx(L, -1, &ok);
      if (!ok || v < 0) luaL_error(L, "archive.extract: limits.%s must be a non-negative integer", keys[k]);
      *vals[k] = v;
    }
    lua_pop(L, 1);
  }
}

/* The reason a member must not be unpacked under lim (total: bytes declared before it), or NULL. */
static const char *over_bound(lua_State *L, struct archive_entry *e, const limits_t *lim, lua_Integer total,
                              lua_Integer count) {
  lua_Integer size = (lua_Integer)archive_entry_size(e);
  if (count > lim->max_entries)
    return lua_pushfstring(L, "more than %I members (the bound)", lim->max_entries);
  if (size > lim->max_member)
    return lua_pushfstring(L, "declares %I bytes, more than the bound of %I for one member", size, lim->max_member);
  if (size > lim->max_total - total)
    return lua_pushfstring(L, "would bring the unpacked total past the bound of %I bytes", lim->max_total);
  if (archive_entry_sparse_count(e) > 0) return "a sparse file (packages hold plain files only)";
  return NULL;
}

/* copy_data's results besides 0 (done), -1 (archive error) and -2 (write error, errno) */
#define OVER_TOTAL (-3)
#define OVER_RATIO (-4)

static int copy_data(struct archive *a, int fd, const limits_t *lim, lua_Integer *total) {
  const void *block;
  size_t size;
  la_int64_t off;
  int r;
  while ((r = archive_read_data_block(a, &block, &size, &off)) == ARCHIVE_OK) {
    const char *p = block;
    if ((lua_Integer)size > lim->max_total - *total) return OVER_TOTAL;
    *total += (lua_Integer)size;
    la_int64_t in = archive_filter_bytes(a, -1), out = archive_filter_bytes(a, 0);
    if (out > lim->ratio_after && in > 0 && out / in > lim->max_ratio) return OVER_RATIO;
    while (size > 0) {
      ssize_t w = write(fd, p, size);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return -2;
      p += w;
      size -= (size_t)w;
    }
  }
  return r == ARCHIVE_EOF ? 0 : -1;
}

/* The error of a copy_data result c (err: errno after it) for member name, written to file. */
static int copy_fail(lua_State *L, struct archive *a, int c, int err, const char *name, const char *file,
                     const limits_t *lim) {
  if (c == -2) return cs_fail(L, file, "write", strerror(err), "io");
  if (c == OVER_TOTAL)
    return cs_fail(L, name, "extract", lua_pushfstring(L, "unpacks past the bound of %I bytes in all", lim->max_total),
                   "io");
  if (c == OVER_RATIO)
    return cs_fail(L, name, "extract", lua_pushfstring(L, "unpacks to more than %I times its compressed size "
                   "(a compression bomb?)", lim->max_ratio), "io");
  return arc_fail(L, name, "extract", a);
}

/* archive.extract(path, dest[, member, out][, limits]) -> entries | nil, msg, "io"
 * Unpacks every member under the existing directory dest, or only `member` to the file `out`.
 * Only regular files and directories: a link, a device, a fifo, a sparse file, an absolute
 * name or one with ".." is refused, naming the member, before anything of it is written (a
 * package must not reach outside the directory it is unpacked into). Files are created (never
 * followed through an existing link) with the archive's permission bits masked to 0755.
 * limits = {max_member, max_total, max_entries, max_ratio, ratio_after} (limits_t) bounds
 * what is unpacked; past a bound the member is named and nothing more is written. */
static int l_archive_extract(lua_State *L) {
  const char *path = luaL_checkstring(L, 1);
  const char *dest = luaL_checkstring(L, 2);
  int limx = 0;
  for (int k = 3; k <= 5 && !limx; k++) if (lua_istable(L, k)) limx = k;
  const char *member = limx == 3 ? NULL : luaL_optstring(L, 3, NULL);
  const char *outp = limx == 3 || limx == 4 ? NULL : luaL_optstring(L, 4, NULL);
  if (member && !outp) return luaL_error(L, "archive.extract: a member needs an output path");
  limits_t lim;
  read_limits(L, limx, &lim);
  lua_Integer total = 0, count = 0;
  struct archive *a = open_reader(L, path);
  if (!a) return 3;
  struct archive_entry *e;
  lua_newtable(L);
  int tbl = lua_gettop(L);
  lua_Integer i = 0;
  int r, found = 0;
  while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
    const char *raw = archive_entry_pathname(e);
    if (!raw) raw = "";
    const char *name = strip_dot(raw);
    mode_t t = archive_entry_filetype(e);
    if (member) {
      if (strcmp(name, strip_dot(member)) != 0) continue;
      if (t != AE_IFREG) { READ_FAIL(cs_fail(L, member, "extract", "not a regular file", "io")); }
      const char *why = over_bound(L, e, &lim, 0, 1);
      if (why) { READ_FAIL(cs_fail(L, member, "extract", why, "io")); }
      int fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
      if (fd < 0) { READ_FAIL(cs_fail(L, outp, "create", strerror(errno), "io")); }
      int c = copy_data(a, fd, &lim, &total);
      int err = errno;
      close(fd);
      if (c != 0) { READ_FAIL(copy_fail(L, a, c, err, member, outp, &lim)); }
      found = 1;
      push_entry(L, e, name);
      lua_seti(L, tbl, ++i);
      break;
    }
    if (*name == 0 && t == AE_IFDIR) continue; /* "./" itself */
    if (!safe_name(name)) {
      READ_FAIL(cs_fail(L, raw, "extract", "member path leaves the package (absolute or ..)", "io"));
    }
    if (archive_entry_hardlink(e)) {
      READ_FAIL(cs_fail(L, raw, "extract", "a hard link (packages hold files and directories only)", "io"));
    }
    if (t != AE_IFREG && t != AE_IFDIR) {
      READ_FAIL(cs_fail(L, raw, "extract", t == AE_IFLNK ? "a symbolic link (packages hold files and directories only)"
                                                      : "not a regular file or directory", "io"));
    }
    const char *why = over_bound(L, e, &lim, total, ++count);
    if (why) { READ_FAIL(cs_fail(L, raw, "extract", why, "io")); }
    if (make_parents(dest, name) != 0) {
      int err = errno;
      READ_FAIL(cs_fail(L, name, "extract", strerror(err), "io"));
    }
    const char *full = lua_pushfstring(L, "%s/%s", dest, name);
    mode_t perm = archive_entry_perm(e) & 0755;
    if (t == AE_IFDIR) {
      size_t len = strlen(full);
      if (len > 1 && full[len - 1] == '/') {
        lua_pushlstring(L, full, len - 1);
        full = lua_tostring(L, -1);
      }
      if (mkdir(full, 0755) != 0 && errno != EEXIST) {
        int err = errno;
        READ_FAIL(cs_fail(L, name, "extract", strerror(err), "io"));
      }
    } else {
      int fd = open(full, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, perm ? perm : 0644);
      if (fd < 0) {
        int err = errno;
        READ_FAIL(cs_fail(L, name, "extract", err == EEXIST ? "exists already (listed twice?)" : strerror(err), "io"));
      }
      int c = copy_data(a, fd, &lim, &total);
      int err = errno;
      if (c == 0 && fchmod(fd, perm ? perm : 0644) != 0) { c = -2; err = errno; }
      close(fd);
      if (c != 0) { READ_FAIL(copy_fail(L, a, c, err, name, name, &lim)); }
    }
    lua_settop(L, tbl);
    push_entry(L, e, name);
    lua_seti(L, tbl, ++i);
  }
  if (!member && r != ARCHIVE_EOF) { int n = arc_fail(L, path, "read", a); archive_read_free(a); return n; }
  archive_read_free(a);
  if (member && !found) return cs_fail(L, path, "extract", lua_pushfstring(L, "no member %s", member), "io");
  lua_settop(L, tbl);
  return 1;
}

/* archive.member(source, name, {memory = bool, prefix = bool, max = bytes}) -> bytes, member name
 *   | nil, msg, "io": the first member of a tar or ar archive (a .deb is an ar of tarballs)
 * whose name (leading "./" dropped) is name, or starts with it when prefix is true; source is
 * a file's path, or the archive's bytes when memory is true (a member read earlier). At most
 * max bytes (default 1 MiB) are read: this is for metadata (a .deb's control), not payloads. */
static int l_archive_member(lua_State *L) {
  size_t slen = 0, nlen = 0;
  const char *src = luaL_checklstring(L, 1, &slen);
  const char *want = luaL_checklstring(L, 2, &nlen);
  int memory = 0, prefix = 0;
  lua_Integer max = 1 << 20;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "memory");
    memory = lua_toboolean(L, -1);
    lua_getfield(L, 3, "prefix");
    prefix = lua_toboolean(L, -1);
    lua_getfield(L, 3, "max");
    max = luaL_optinteger(L, -1, max);
    lua_pop(L, 3);
  }
  const char *subject = memory ? want : src;
  struct archive *a = archive_read_new();
  if (!a) return cs_fail(L, subject, "open", "out of memory", "io");
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  archive_read_support_format_gnutar(a);
  archive_read_support_format_ar(a);
  int r = memory ? archive_read_open_memory(a, src, slen) : archive_read_open_filename(a, src, BLOCK);
  if (r != ARCHIVE_OK) READ_FAIL(arc_fail(L, subject, "open", a));
  struct archive_entry *e;
  while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
    const char *name = strip_dot(archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
    if (prefix ? strncmp(name, want, nlen) != 0 : strcmp(name, want) != 0) continue;
    la_int64_t size = archive_entry_size(e);
    if (size < 0 || size > max) READ_FAIL(cs_fail(L, subject, "read", "member too large for metadata", "io"));
    luaL_Buffer b;
    char *p = luaL_buffinitsize(L, &b, (size_t)size);
    la_ssize_t got = archive_read_data(a, p, (size_t)size);
    if (got < 0) READ_FAIL(arc_fail(L, subject, "read", a));
    luaL_pushresultsize(&b, (size_t)got);
    lua_pushstring(L, name);
    archive_read_free(a);
    return 2;
  }
  if (r != ARCHIVE_EOF) READ_FAIL(arc_fail(L, subject, "read", a));
  lua_pushfstring(L, "no member %s%s", want, prefix ? "*" : "");
  READ_FAIL(cs_fail(L, subject, "read", lua_tostring(L, -1), "io"));
}

static int l_archive_version(lua_State *L) {
  lua_pushstring(L, archive_version_details());
  return 1;
}

static const luaL_Reg archive_funcs[] = {
  {"write", l_archive_write},
  {"list", l_archive_list},
  {"extract", l_archive_extract},
  {"member", l_archive_member},
  {"version", l_archive_version},
  {NULL, NULL}
};

int luaopen_cargoship_archive(lua_State *L) {
  luaL_newlib(L, archive_funcs);
  return 1;
}

/* ssh_sftp.c - SFTP transfers on a session: pipelined put (with fsync) and get. */
#include "ssh_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* libssh2 cuts one sftp_write offer into 30000-byte packets, all in flight at once;
 * 256 KiB offers match OpenSSH's throughput where 32 KiB loops halve it (notes §6). */
#define OFFER (256 * 1024)

enum { F_INIT, F_OPEN, F_XFER, F_FSYNC, F_CLOSE, F_DONE };

/* A local file as every upload of it sees it: one read-only mapping shared by all the
 * concurrent puts of the same file (same device, inode, size and mtime), so memory holds
 * its pages once, not once per host (RSS counts each mapping's resident pages). */
typedef struct src_map {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
  unsigned char *p;
  int refs;
  struct src_map *next;
} src_map;

static src_map *src_maps;

static int same_file(const src_map *m, const struct stat *st) {
  return m->dev == st->st_dev && m->ino == st->st_ino && m->size == st->st_size
      && m->mtime.tv_sec == st->st_mtim.tv_sec && m->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* -> the shared mapping of fd's file (st->st_size > 0), or NULL with errno set */
static src_map *src_acquire(int fd, const struct stat *st) {
  for (src_map *m = src_maps; m; m = m->next)
    if (same_file(m, st)) {
      m->refs++;
      return m;
    }
  src_map *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->p = mmap(NULL, (size_t)st->st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m->p == MAP_FAILED) {
    int err = errno;
    free(m);
    errno = err;
    return NULL;
  }
  madvise(m->p, (size_t)st->st_size, MADV_SEQUENTIAL);
  m->dev = st->st_dev;
  m->ino = st->st_ino;
  m->size = st->st_size;
  m->mtime = st->st_mtim;
  m->refs = 1;
  m->next = src_maps;
  src_maps = m;
  return m;
}

static void src_release(src_map *m) {
  if (--m->refs > 0) return;
  for (src_map **pp = &src_maps; *pp; pp = &(*pp)->next)
    if (*pp == m) {
      *pp = m->next;
      break;
    }
  munmap(m->p, (size_t)m->size);
  free(m);
}
enum { K_PUT, K_GET };

typedef struct {
  cs_ssh *ss;
  LIBSSH2_SFTP_HANDLE *h;
  int kind, state;
  int holds_ctl;
  int fd;                 /* local file */
  src_map *src;           /* put: the local file's shared mapping (none when empty) */
  const unsigned char *map;
  size_t size, done;
  size_t offer;           /* put: bytes offered per sftp_write call */
  int fsync;              /* put: fsync before close (default on) */
  char *buf;              /* get: read buffer */
  char *tmp;              /* get: local temp name, renamed into place at the end */
} cs_sftp;

/* Stack while a transfer runs. */
enum { A_SESSION = 1, A_LOCAL, A_REMOTE, A_OPTS, A_OP, A_DEADLINE };

static void op_cleanup(lua_State *L, cs_sftp *op) {
  cs_ssh *ss = op->ss;
  if (ss && op->holds_ctl && ss->ctl_owner == op) {
    ss->ctl_owner = NULL;
    cs_waitq_wake(L, &ss->q);
  }
  op->holds_ctl = 0;
  if (ss && ss->sftp_owner == op) {
    ss->sftp_owner = NULL;
    cs_waitq_wake(L, &ss->q);
  }
  if (ss && ss->send_owner == op) cs_ssh_break(L, ss, "a transfer was cut off mid-packet");
  /* a handle cut short cannot be closed without waiting: the session's heap (ssh.c) frees
   * it with the session, since libssh2 1.10's session free does not */
  op->h = NULL;
  if (op->src) src_release(op->src);
  op->src = NULL;
  op->map = NULL;
  if (op->fd >= 0) close(op->fd);
  op->fd = -1;
  if (op->tmp) unlink(op->tmp);   /* nothing half-written is left behind */
  free(op->tmp);
  op->tmp = NULL;
  free(op->buf);
  op->buf = NULL;
  op->state = F_DONE;
}

static int l_sftp_gc(lua_State *L) {
  cs_sftp *op = luaL_checkudata(L, 1, SFTP_MT);
  if (op->state != F_DONE) op_cleanup(L, op);
  return 0;
}

static int sftp_fail(lua_State *L, cs_sftp *op, const char *what) {
  cs_ssh *ss = op->ss;
  unsigned long code = ss->sftp ? libssh2_sftp_last_error(ss->sftp) : 0;
  int rc = ss->s ? libssh2_session_last_errno(ss->s) : 0;
  const char *op_name = lua_pushfstring(L, "%s %s", what, lua_tostring(L, A_REMOTE));
  const char *kind = ss->state == SS_BROKEN ? "closed" : "io";
  if (rc == LIBSSH2_ERROR_SFTP_PROTOCOL && ss->state != SS_BROKEN)
    cs_ssh_fail(L, ss, kind, op_name, "sftp status %d", (int)code);
  else
    cs_ssh_fail(L, ss, kind, op_name, NULL);
  op_cleanup(L, op);
  return 3;
}

static int local_fail(lua_State *L, cs_sftp *op, const char *what, int err) {
  cs_ssh_fail(L, NULL, "io", lua_pushfstring(L, "%s %s", what, lua_tostring(L, A_LOCAL)), "%s", strerror(err));
  op_cleanup(L, op);
  return 3;
}

static int sftp_k(lua_State *L, int status, lua_KContext ctx);

static int wait_session(lua_State *L, cs_sftp *op) {
  return cs_ssh_wait(L, op->ss, op, lua_tonumber(L, A_DEADLINE), 0, sftp_k);
}

/* Records a call's outcome; returns 1 if it would block. */
static int blocked(lua_State *L, cs_sftp *op, int rc, unsigned long rx0) {
  cs_ssh_after(L, op->ss, op, rc, rx0);
  return rc == LIBSSH2_ERROR_EAGAIN;
}

static int step_init(lua_State *L, cs_sftp *op) {
  cs_ssh *ss = op->ss;
  if (ss->sftp) {
    op->state = F_OPEN;
    return -1;
  }
  if (ss->ctl_owner && ss->ctl_owner != op)
    return cs_wait(L, -1, 0, &ss->q, lua_tonumber(L, A_DEADLINE), 0, sftp_k);
  ss->ctl_owner = op;
  op->holds_ctl = 1;
  if (ss->spare_orphan && cs_ssh_orphan_step(L, ss, op)) return wait_session(L, op);
  unsigned long rx0 = ss->rx;
  ss->sftp = libssh2_sftp_init(ss->s);
  int rc = ss->sftp ? 0 : libssh2_session_last_errno(ss->s);
  if (blocked(L, op, rc, rx0)) return wait_session(L, op);
  ss->ctl_owner = NULL;
  op->holds_ctl = 0;
  cs_waitq_wake(L, &ss->q);
  if (rc) return sftp_fail(L, op, "sftp: start subsystem for");
  op->state = F_OPEN;
  return -1;
}

static int step_open(lua_State *L, cs_sftp *op) {
  cs_ssh *ss = op->ss;
  size_t len;
  const char *remote = lua_tolstring(L, A_REMOTE, &len);
  lua_getfield(L, A_OPTS, "mode");
  long mode = (long)luaL_optinteger(L, -1, 0600);
  lua_pop(L, 1);
  unsigned long flags = op->kind == K_PUT
      ? LIBSSH2_FXF_WRITE | LIBSSH2_FXF_CREAT | LIBSSH2_FXF_TRUNC : LIBSSH2_FXF_READ;
  unsigned long rx0 = ss->rx;
  op->h = libssh2_sftp_open_ex(ss->sftp, remote, (unsigned)len, flags, mode, LIBSSH2_SFTP_OPENFILE);
  int rc = op->h ? 0 : libssh2_session_last_errno(ss->s);
  if (blocked(L, op, rc, rx0)) return wait_session(L, op);
  if (rc) return sftp_fail(L, op, op->kind == K_PUT ? "sftp: create" : "sftp: open");
  op->state = F_XFER;
  return -1;
}

static int step_put(lua_State *L, cs_sftp *op) {
  int moved = 0;
  while (op->done < op->size) {
    size_t n = op->size - op->done;
    if (n > op->offer) n = op->offer;
    unsigned long rx0 = op->ss->rx;
    ssize_t w = libssh2_sftp_write(op->h, (const char *)op->map + op->done, n);
    if (blocked(L, op, w < 0 ? (int)w : 0, rx0)) return moved ? -1 : wait_session(L, op);
    if (w < 0) return sftp_fail(L, op, "sftp: write");
    op->done += (size_t)w;
    moved = 1;
  }
  op->state = op->fsync ? F_FSYNC : F_CLOSE;
  return -1;
}

static int step_get(lua_State *L, cs_sftp *op) {
  for (;;) {
    unsigned long rx0 = op->ss->rx;
    ssize_t r = libssh2_sftp_read(op->h, op->buf, OFFER);
    if (blocked(L, op, r < 0 ? (int)r : 0, rx0)) return wait_session(L, op);
    if (r < 0) return sftp_fail(L, op, "sftp: read");
    if (r == 0) break;
    for (ssize_t off = 0; off < r;) {
      ssize_t w = write(op->fd, op->buf + off, (size_t)(r - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return local_fail(L, op, "write", errno);
      off += w;
    }
    op->done += (size_t)r;
  }
  op->state = F_CLOSE;
  return -1;
}

static int step_finish(lua_State *L, cs_sftp *op) {
  unsigned long rx0 = op->ss->rx;
  int rc = op->state == F_FSYNC ? libssh2_sftp_fsync(op->h) : libssh2_sftp_close_handle(op->h);
  if (blocked(L, op, rc, rx0)) return wait_session(L, op);
  if (rc) return sftp_fail(L, op, op->state == F_FSYNC ? "sftp: fsync" : "sftp: close");
  if (op->state == F_FSYNC) {
    op->state = F_CLOSE;
    return -1;
  }
  op->h = NULL;
  if (op->kind == K_GET) {
    if (fsync(op->fd) != 0) return local_fail(L, op, "fsync", errno);
    if (rename(op->tmp, lua_tostring(L, A_LOCAL)) != 0) return local_fail(L, op, "rename into", errno);
    free(op->tmp);
    op->tmp = NULL;
  }
  lua_Integer done = (lua_Integer)op->done;
  op_cleanup(L, op);
  lua_pushinteger(L, done);
  return 1;
}

static int sftp_step(lua_State *L, cs_sftp *op) {
  for (;;) {
    cs_ssh *ss = op->ss;
    if (ss->state == SS_BROKEN || !ss->s) {
      cs_ssh_fail(L, ss, "closed", "sftp", NULL);
      op_cleanup(L, op);
      return 3;
    }
    cs_ssh_reap(L, ss, op);
    if (!cs_ssh_may_call(ss, op) || (ss->sftp_owner && ss->sftp_owner != op))
      return cs_wait(L, -1, 0, &ss->q, lua_tonumber(L, A_DEADLINE), 0, sftp_k);
    ss->sftp_owner = op;
    int r;
    switch (op->state) {
      case F_INIT: r = step_init(L, op); break;
      case F_OPEN: r = step_open(L, op); break;
      case F_XFER: r = op->kind == K_PUT ? step_put(L, op) : step_get(L, op); break;
      case F_FSYNC: case F_CLOSE: r = step_finish(L, op); break;
      default: return luaL_error(L, "ssh: sftp: bad state %d", op->state);
    }
    if (r >= 0) return r;
  }
}

static int sftp_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  cs_sftp *op = luaL_checkudata(L, A_OP, SFTP_MT);
  int w = cs_wake_status(L);
  if (w == CS_WAKE_CANCELLED) {
    op_cleanup(L, op);
    return cs_raise_cancelled(L);
  }
  if (w == CS_WAKE_TIMEOUT) {
    /* the handle is in an unknown state mid-pipeline: the session cannot be trusted */
    cs_ssh_break(L, op->ss, "an SFTP transfer timed out mid-pipeline");
    cs_ssh_fail(L, op->ss, "timeout", "sftp", "%s timed out", lua_tostring(L, A_REMOTE));
    op_cleanup(L, op);
    return 3;
  }
  return sftp_step(L, op);
}

/* Pushes a new transfer op at A_OP and the deadline at A_DEADLINE. */
static cs_sftp *new_op(lua_State *L, cs_ssh *ss, int kind) {
  if (lua_isnoneornil(L, A_OPTS)) {
    lua_settop(L, A_REMOTE);
    lua_newtable(L);
  }
  luaL_checktype(L, A_OPTS, LUA_TTABLE);
  lua_settop(L, A_OPTS);
  cs_sftp *op = lua_newuserdatauv(L, sizeof *op, 1);
  memset(op, 0, sizeof *op);
  op->ss = ss;
  op->kind = kind;
  op->fd = -1;
  op->state = F_INIT;
  luaL_setmetatable(L, SFTP_MT);
  lua_pushvalue(L, A_SESSION);
  lua_setiuservalue(L, A_OP, 1);
  lua_getfield(L, A_OPTS, "timeout");
  double timeout = luaL_optnumber(L, -1, 0);
  lua_pop(L, 1);
  lua_pushnumber(L, timeout > 0 ? cs_now() + timeout : 0);
  return op;
}

static int not_ready(lua_State *L, cs_ssh *ss) {
  if (ss->state == SS_BROKEN) return cs_ssh_fail(L, ss, "closed", "sftp", NULL);
  return cs_ssh_fail(L, ss, "closed", "sftp", "session is not ready");
}

/* session:sftp_put(local, remote, {mode, timeout}) -> bytes | nil, msg, code
 * Writes remote (created or truncated) with pipelined writes, then fsyncs it: callers
 * upload to a temporary name and rename, so a cut transfer never touches the target. */
static int l_ssh_sftp_put(lua_State *L) {
  cs_ssh *ss = cs_ssh_check(L, A_SESSION);
  const char *local = luaL_checkstring(L, A_LOCAL);
  luaL_checkstring(L, A_REMOTE);
  if (ss->state != SS_READY) return not_ready(L, ss);
  cs_sftp *op = new_op(L, ss, K_PUT);
  lua_getfield(L, A_OPTS, "offer");
  op->offer = (size_t)luaL_optinteger(L, -1, OFFER);
  lua_pop(L, 1);
  lua_getfield(L, A_OPTS, "fsync");
  op->fsync = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_pop(L, 1);
  luaL_argcheck(L, op->offer >= 1024 && op->offer <= 2 * 1024 * 1024, A_OPTS, "offer must be 1 KiB..2 MiB");
  struct stat st;
  op->fd = open(local, O_RDONLY | O_CLOEXEC);
  if (op->fd < 0 || fstat(op->fd, &st) != 0) return local_fail(L, op, "open", errno);
  op->size = (size_t)st.st_size;
  if (op->size > 0) {
    op->src = src_acquire(op->fd, &st);
    if (!op->src) return local_fail(L, op, "mmap", errno);
    op->map = op->src->p;
  }
  close(op->fd);   /* the mapping keeps the file; one descriptor less per host */
  op->fd = -1;
  return sftp_step(L, op);
}

/* session:sftp_get(remote, local, {timeout}) -> bytes | nil, msg, code
 * Reads into a temporary file beside local, fsyncs it and renames it into place. */
static int l_ssh_sftp_get(lua_State *L) {
  cs_ssh *ss = cs_ssh_check(L, A_SESSION);
  luaL_checkstring(L, 2);
  luaL_checkstring(L, 3);
  lua_pushvalue(L, 2);   /* swap to the common layout: A_LOCAL = local, A_REMOTE = remote */
  lua_pushvalue(L, 3);
  lua_replace(L, 2);
  lua_replace(L, 3);
  if (ss->state != SS_READY) return not_ready(L, ss);
  cs_sftp *op = new_op(L, ss, K_GET);
  const char *local = lua_tostring(L, A_LOCAL);
  size_t n = strlen(local) + 32;
  op->tmp = malloc(n);
  op->buf = malloc(OFFER);
  if (!op->tmp || !op->buf) return luaL_error(L, "ssh: sftp: out of memory");
  snprintf(op->tmp, n, "%s.cs-%ld.tmp", local, (long)getpid());
  op->fd = open(op->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (op->fd < 0) {
    int err = errno;
    free(op->tmp);
    op->tmp = NULL;   /* not ours to unlink */
    return local_fail(L, op, "create", err);
  }
  return sftp_step(L, op);
}

static const luaL_Reg sftp_methods[] = {
  {"sftp_put", l_ssh_sftp_put},
  {"sftp_get", l_ssh_sftp_get},
  {NULL, NULL}
};

void cs_ssh_sftp_methods(lua_State *L) {
  luaL_setfuncs(L, sftp_methods, 0);
  if (luaL_newmetatable(L, SFTP_MT)) {
    lua_pushcfunction(L, l_sftp_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_sftp_gc);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
}

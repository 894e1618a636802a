/* ssh.c - SSH sessions over libssh2 in non-blocking mode: gates, failures, keepalive, close. */
#include "ssh_int.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- the session's heap ---------------------------------------------------------------
 * libssh2 allocates a session's memory through these, and hard close frees what
 * libssh2_session_free left: libssh2 1.10 frees neither an SFTP handle cut off mid-write
 * (a cancelled or timed-out put: its handle and its writes in flight, ~256 KiB) nor the
 * SFTP state when the session goes, and a cut handle cannot be closed without waiting. */

static void heap_link(cs_ssh *ss, cs_block *b) {
  b->l.prev = NULL;
  b->l.next = ss->heap;
  if (ss->heap) ss->heap->l.prev = b;
  ss->heap = b;
}

static void heap_unlink(cs_ssh *ss, cs_block *b) {
  if (b->l.prev) b->l.prev->l.next = b->l.next;
  else ss->heap = b->l.next;
  if (b->l.next) b->l.next->l.prev = b->l.prev;
}

LIBSSH2_ALLOC_FUNC(cs_ssh_alloc) {
  cs_ssh *ss = *abstract;
  cs_block *b = malloc(sizeof *b + count);
  if (!b) return NULL;
  heap_link(ss, b);
  return b + 1;
}

LIBSSH2_REALLOC_FUNC(cs_ssh_realloc) {
  if (!ptr) return cs_ssh_alloc(count, abstract);
  cs_ssh *ss = *abstract;
  cs_block *b = (cs_block *)ptr - 1;
  heap_unlink(ss, b);
  cs_block *nb = realloc(b, sizeof *nb + count);
  if (!nb) {
    heap_link(ss, b);
    return NULL;
  }
  heap_link(ss, nb);
  return nb + 1;
}

LIBSSH2_FREE_FUNC(cs_ssh_free) {
  if (!ptr) return;
  cs_ssh *ss = *abstract;
  cs_block *b = (cs_block *)ptr - 1;
  heap_unlink(ss, b);
  free(b);
}

/* Frees every block still listed: called once libssh2 holds nothing of the session. */
static void heap_drain(cs_ssh *ss) {
  while (ss->heap) {
    cs_block *b = ss->heap;
    ss->heap = b->l.next;
    free(b);
  }
}

/* ---- sessions: bookkeeping ---------------------------------------------------------- */

cs_ssh *cs_ssh_check(lua_State *L, int idx) {
  cs_ssh *ss = luaL_checkudata(L, idx, SSH_MT);
  if (ss->state == SS_CLOSED || !ss->s) luaL_error(L, "ssh: session %s is closed", ss->name ? ss->name : "?");
  return ss;
}

int cs_ssh_may_call(cs_ssh *ss, const void *op) {
  return ss->send_owner == NULL || ss->send_owner == op;
}

void cs_ssh_after(lua_State *L, cs_ssh *ss, const void *op, int rc, unsigned long rx0) {
  int outbound = rc == LIBSSH2_ERROR_EAGAIN &&
      (libssh2_session_block_directions(ss->s) & LIBSSH2_SESSION_BLOCK_OUTBOUND);
  if (outbound) {
    ss->send_owner = op;
  } else if (ss->send_owner == op) {
    ss->send_owner = NULL;
    cs_waitq_wake(L, &ss->q);
  }
  if (rc != LIBSSH2_ERROR_EAGAIN || ss->rx != rx0) cs_waitq_wake(L, &ss->q);
}

int cs_ssh_wait(lua_State *L, cs_ssh *ss, const void *op, double deadline,
                lua_KContext ctx, lua_KFunction k) {
  if (ss->state == SS_BROKEN || ss->fd < 0)
    return cs_wait(L, -1, 0, NULL, cs_now(), ctx, k);   /* resume at once; caller sees broken */
  if (!cs_ssh_may_call(ss, op) || ss->s == NULL)
    return cs_wait(L, -1, 0, &ss->q, deadline, ctx, k);
  int dir = libssh2_session_block_directions(ss->s);
  short ev = 0;
  if (dir & LIBSSH2_SESSION_BLOCK_INBOUND) ev |= POLLIN;
  if (dir & LIBSSH2_SESSION_BLOCK_OUTBOUND) ev |= POLLOUT;
  if (!ev) ev = POLLIN;  /* EAGAIN with no direction: never seen with 1.10, guarded anyway */
  return cs_wait(L, ss->fd, ev, &ss->q, deadline, ctx, k);
}

void cs_ssh_abandon(cs_ssh *ss, LIBSSH2_CHANNEL *ch) {
  if (ss->ndead == ss->capdead) {
    int cap = ss->capdead ? ss->capdead * 2 : 4;
    LIBSSH2_CHANNEL **d = realloc(ss->dead, (size_t)cap * sizeof *d);
    if (!d) return;  /* leaked until the session is freed, which frees every channel */
    ss->dead = d;
    ss->capdead = cap;
  }
  ss->dead[ss->ndead++] = ch;
}

void cs_ssh_reap(lua_State *L, cs_ssh *ss, const void *op) {
  while (ss->ndead > 0 && ss->s && cs_ssh_may_call(ss, op)) {
    LIBSSH2_CHANNEL *ch = ss->dead[ss->ndead - 1];
    unsigned long rx0 = ss->rx;
    int rc = libssh2_channel_free(ch);   /* sends CLOSE first when still open */
    cs_ssh_after(L, ss, op, rc, rx0);
    if (rc == LIBSSH2_ERROR_EAGAIN) return;
    ss->ndead--;
    ss->channels--;
  }
}

int cs_ssh_orphan_step(lua_State *L, cs_ssh *ss, const void *op) {
  unsigned long rx0 = ss->rx;
  LIBSSH2_CHANNEL *ch = libssh2_channel_open_session(ss->s);
  int rc = ch ? 0 : libssh2_session_last_errno(ss->s);
  cs_ssh_after(L, ss, op, rc, rx0);
  if (rc == LIBSSH2_ERROR_EAGAIN) return 1;
  ss->spare_orphan = 0;
  if (ch && !ss->spare) ss->spare = ch;
  else if (ch) cs_ssh_abandon(ss, ch);   /* the reaper counts it down */
  else ss->channels--;
  return 0;
}

static const char *const FAIL_CODES[] = {
  "timeout", "refused", "auth", "hostkey", "closed", "exit", "io", NULL
};

int cs_ssh_fail(lua_State *L, cs_ssh *ss, const char *code, const char *op, const char *fmt, ...) {
  int known = 0;
  for (const char *const *c = FAIL_CODES; *c && !known; c++) known = strcmp(*c, code) == 0;
  if (!known) return luaL_error(L, "ssh: internal: failure code '%s' is not in the fixed set", code);
  const char *who = ss ? ss->name : "localhost";
  lua_pushnil(L);
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    lua_pushfstring(L, "%s: %s: ", who, op);
    lua_pushvfstring(L, fmt, ap);
    va_end(ap);
    lua_concat(L, 2);
  } else if (ss && ss->state == SS_BROKEN) {
    lua_pushfstring(L, "%s: %s: connection lost%s%s", who, op, ss->why[0] ? ": " : "", ss->why);
  } else {
    char *msg = NULL;
    int rc = ss && ss->s ? libssh2_session_last_error(ss->s, &msg, NULL, 0) : 0;
    if (rc == LIBSSH2_ERROR_SOCKET_RECV || rc == LIBSSH2_ERROR_SOCKET_DISCONNECT || rc == LIBSSH2_ERROR_SOCKET_SEND) {
      /* the peer's end of the socket is gone (sshd killed, host rebooting): say so, not a number */
      lua_pushfstring(L, "%s: %s: connection closed by the host", who, op);
      code = "closed";
      /* nothing more can pass: the session says so (state "broken"), so cleanup reconnects */
      cs_ssh_break(L, ss, "connection closed by the host");
    } else {
      lua_pushfstring(L, "%s: %s: %s (libssh2 %d)", who, op, msg && *msg ? msg : "failed", rc);
    }
  }
  lua_pushstring(L, code);
  return 3;
}

void cs_ssh_hard_close(cs_ssh *ss) {
  cs_resolve_done(ss->resolve);
  ss->resolve = NULL;
  if (ss->s) {
    if (ss->fd >= 0) shutdown(ss->fd, SHUT_RDWR);  /* sends fail at once, nothing EAGAIN-loops */
    for (int i = 0; i < 100 && libssh2_session_free(ss->s) == LIBSSH2_ERROR_EAGAIN; i++) {}
    ss->s = NULL;
  }
  heap_drain(ss);
  if (ss->fd >= 0) close(ss->fd);
  ss->fd = -1;
  ss->sftp = NULL;
  ss->ndead = 0;
}

void cs_ssh_break(lua_State *L, cs_ssh *ss, const char *why) {
  if (ss->fd >= 0) shutdown(ss->fd, SHUT_RDWR);
  if (why && !ss->why[0]) snprintf(ss->why, sizeof ss->why, "%s", why);
  ss->state = SS_BROKEN;
  ss->send_owner = ss->ctl_owner = ss->sftp_owner = NULL;
  cs_waitq_wake(L, &ss->q);
}

/* __gc and __close: no waiting possible here, so abort rather than say goodbye. */
static int l_ssh_gc(lua_State *L) {
  cs_ssh *ss = luaL_checkudata(L, 1, SSH_MT);
  cs_ssh_hard_close(ss);
  ss->state = SS_CLOSED;
  if (ss->jump_ref != LUA_NOREF && ss->jump_ref != 0) {
    luaL_unref(L, LUA_REGISTRYINDEX, ss->jump_ref);
    ss->jump_ref = LUA_NOREF;
  }
  free(ss->dead);
  ss->dead = NULL;
  free(ss->name);
  ss->name = NULL;
  free(ss->kh_path);
  ss->kh_path = NULL;
  return 0;
}

/* ---- close ---------------------------------------------------------------------------- */

static int close_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  cs_ssh *ss = luaL_checkudata(L, 1, SSH_MT);
  int w = cs_wake_status(L);
  if (w == CS_WAKE_READY && ss->s && ss->state != SS_BROKEN) {
    unsigned long rx0 = ss->rx;
    cs_ssh_reap(L, ss, ss);
    if (cs_ssh_may_call(ss, ss)) {
      int rc = libssh2_session_disconnect(ss->s, "cargoship done");
      cs_ssh_after(L, ss, ss, rc, rx0);
      if (rc == LIBSSH2_ERROR_EAGAIN) return cs_ssh_wait(L, ss, ss, lua_tonumber(L, 2), 0, close_k);
    } else {
      return cs_ssh_wait(L, ss, ss, lua_tonumber(L, 2), 0, close_k);
    }
  }
  cs_ssh_hard_close(ss);
  ss->state = SS_CLOSED;
  cs_waitq_wake(L, &ss->q);
  if (w == CS_WAKE_CANCELLED) return cs_raise_cancelled(L);
  lua_pushboolean(L, 1);
  return 1;
}

/* session:close() -> true: says goodbye (bounded to 2 s), then frees everything. */
static int l_ssh_close(lua_State *L) {
  cs_ssh *ss = luaL_checkudata(L, 1, SSH_MT);
  if (ss->state == SS_CLOSED) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_settop(L, 1);
  lua_pushnumber(L, cs_now() + 2);
  return cs_wait(L, -1, 0, NULL, cs_now(), 0, close_k);  /* one turn, then say goodbye */
}

static int l_ssh_info(lua_State *L) {
  cs_ssh *ss = luaL_checkudata(L, 1, SSH_MT);
  static const char *const states[] = {"new", "tcp", "handshake", "auth", "ready", "closing",
                                       "closed", "broken", "resolve"};
  lua_createtable(L, 0, 11);
  lua_pushstring(L, ss->name);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, states[ss->state]);
  lua_setfield(L, -2, "state");
  lua_pushboolean(L, ss->root);
  lua_setfield(L, -2, "root");
  lua_pushinteger(L, ss->channels - (ss->spare != NULL) - ss->spare_orphan);
  lua_setfield(L, -2, "channels");
  lua_pushboolean(L, ss->spare != NULL);
  lua_setfield(L, -2, "spare");
  lua_pushinteger(L, (lua_Integer)ss->opened);
  lua_setfield(L, -2, "commands");
  lua_pushinteger(L, (lua_Integer)ss->ahead);
  lua_setfield(L, -2, "opened_ahead");
  lua_pushinteger(L, (lua_Integer)ss->rx);
  lua_setfield(L, -2, "bytes_received");
  if (ss->s && ss->state == SS_READY) {
    static const struct { int m; const char *k; } ms[] = {
      {LIBSSH2_METHOD_KEX, "kex"}, {LIBSSH2_METHOD_HOSTKEY, "hostkey"},
      {LIBSSH2_METHOD_CRYPT_CS, "cipher"}, {LIBSSH2_METHOD_MAC_CS, "mac"}};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
      lua_pushstring(L, libssh2_session_methods(ss->s, ms[i].m));
      lua_setfield(L, -2, ms[i].k);
    }
  }
  return 1;
}

/* Someone waits on the session (a command, a transfer, a tunnel): only then does silence
 * mean something, since only then does anyone read what the host sends. */
static int session_busy(cs_ssh *ss) {
  return ss->q.head || ss->send_owner || ss->ctl_owner || ss->sftp_owner;
}

/* Sends one keepalive when that cannot leave a half-sent packet behind: no packet of ours
 * is pending and the socket takes more now (notes/libssh2.md §7: a half-sent keepalive
 * trips the next different send). */
static void keepalive_send(lua_State *L, cs_ssh *ss) {
  struct pollfd p = {.fd = ss->fd, .events = POLLOUT};
  if (ss->send_owner || (libssh2_session_block_directions(ss->s) & LIBSSH2_SESSION_BLOCK_OUTBOUND) ||
      poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT))
    return;
  int next = 0;
  libssh2_keepalive_config(ss->s, 1, 1);   /* want_reply: the answer is the proof; cadence is ours */
  libssh2_keepalive_send(ss->s, &next);
  if (libssh2_session_block_directions(ss->s) & LIBSSH2_SESSION_BLOCK_OUTBOUND)
    cs_ssh_break(L, ss, "a keepalive could not be sent whole");
}

/* session:keepalive(interval, count_max) -> true | nil, msg, "timeout"
 * Called every interval seconds by the session's keepalive task. Each call asks the host
 * for an answer; count_max calls in a row during which an operation waited on the session
 * and not one byte came back break the session (every operation on it fails "closed"), as
 * OpenSSH's ServerAliveInterval and ServerAliveCountMax do. */
static int l_ssh_keepalive(lua_State *L) {
  cs_ssh *ss = luaL_checkudata(L, 1, SSH_MT);
  int interval = (int)luaL_optinteger(L, 2, 10);
  int count_max = (int)luaL_optinteger(L, 3, 3);
  luaL_argcheck(L, interval > 0, 2, "interval must be positive");
  if (!ss->s || ss->state != SS_READY) {
    if (ss->state == SS_BROKEN) return cs_ssh_fail(L, ss, "closed", "keepalive", NULL);
    lua_pushboolean(L, 1);
    return 1;
  }
  char b;
  int heard = ss->rx != ss->ka_rx || recv(ss->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  ss->ka_rx = ss->rx;
  ss->ka_misses = heard || !session_busy(ss) ? 0 : ss->ka_misses + 1;
  if (count_max > 0 && ss->ka_misses >= count_max) {
    char why[96];
    snprintf(why, sizeof why, "no answer from the host for %d s (keepalive every %d s, %d missed)",
             interval * count_max, interval, count_max);
    cs_ssh_break(L, ss, why);
    return cs_ssh_fail(L, ss, "timeout", "keepalive", "%s", why);
  }
  keepalive_send(L, ss);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_ssh_version(lua_State *L) {
  lua_pushstring(L, libssh2_version(0));
  return 1;
}

static int l_ssh_tostring(lua_State *L) {
  cs_ssh *ss = luaL_checkudata(L, 1, SSH_MT);
  lua_pushfstring(L, "ssh session %s", ss->name ? ss->name : "(closed)");
  return 1;
}

static const luaL_Reg ssh_methods[] = {
  {"close", l_ssh_close},
  {"info", l_ssh_info},
  {"keepalive", l_ssh_keepalive},
  {NULL, NULL}
};

static const luaL_Reg ssh_funcs[] = {
  {"version", l_ssh_version},
  {NULL, NULL}
};

int luaopen_cargoship_ssh(lua_State *L) {
  static int inited;
  if (!inited && libssh2_init(0) == 0) inited = 1;
  luaL_newmetatable(L, SSH_MT);
  lua_newtable(L);
  luaL_setfuncs(L, ssh_methods, 0);
  cs_ssh_agent_methods(L);
  cs_ssh_exec_methods(L);
  cs_ssh_sftp_methods(L);
  cs_ssh_tunnel_methods(L);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, l_ssh_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, l_ssh_gc);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, l_ssh_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  luaL_newlib(L, ssh_funcs);
  cs_ssh_connect_register(L);
  cs_kh_register(L);
  return 1;
}

/* ssh_tunnel.c - bastion tunnels: a direct-tcpip channel pumped to a socketpair by two tasks. */
#include "ssh_int.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TUNNEL_MT "cargoship.ssh_tunnel"
#define TBUF 16384

/* The inner session speaks SSH over sp[1] as if it were a TCP socket; the pumps move its
 * bytes between sp[0] and the channel, obeying the bastion session's gates like any op. */
typedef struct {
  cs_ssh *ss;               /* the bastion session */
  LIBSSH2_CHANNEL *ch;
  int sp[2];
  char down[TBUF], up[TBUF];
  size_t down_len, down_off, up_len, up_off;
  int down_done, up_done, opening;
} cs_tunnel;

static cs_tunnel *check_tunnel(lua_State *L, int idx) {
  return luaL_checkudata(L, idx, TUNNEL_MT);
}

static void tunnel_release(lua_State *L, cs_tunnel *t) {
  cs_ssh *ss = t->ss;
  if (ss && ss->ctl_owner == t) {
    ss->ctl_owner = NULL;
    cs_waitq_wake(L, &ss->q);
  }
  if (ss && ss->send_owner == t) cs_ssh_break(L, ss, "a tunnel was cut off mid-packet");
  if (t->ch && ss && ss->s && ss->state == SS_READY) {
    ss->channels++;            /* the reaper counts down what it frees */
    cs_ssh_abandon(ss, t->ch);
  }
  t->ch = NULL;
  for (int i = 0; i < 2; i++) {
    if (t->sp[i] >= 0) close(t->sp[i]);
    t->sp[i] = -1;
  }
}

static int l_tunnel_gc(lua_State *L) {
  cs_tunnel *t = check_tunnel(L, 1);
  tunnel_release(L, t);
  t->ss = NULL;
  return 0;
}

/* ---- opening: session:forward(host, port, timeout) -> tunnel | nil, msg, code ----------- */

static int forward_k(lua_State *L, int status, lua_KContext ctx);

static int forward_step(lua_State *L, cs_tunnel *t) {
  cs_ssh *ss = t->ss;
  double deadline = lua_tonumber(L, 5);
  for (;;) {
    if (ss->state != SS_READY) return cs_ssh_fail(L, ss, "closed", "tunnel (bastion)", NULL);
    cs_ssh_reap(L, ss, t);
    if (!cs_ssh_may_call(ss, t) || (ss->ctl_owner && ss->ctl_owner != t))
      return cs_wait(L, -1, 0, &ss->q, deadline, 0, forward_k);
    ss->ctl_owner = t;
    if (ss->spare_orphan && cs_ssh_orphan_step(L, ss, t)) return cs_ssh_wait(L, ss, t, deadline, 0, forward_k);
    unsigned long rx0 = ss->rx;
    t->ch = libssh2_channel_direct_tcpip_ex(ss->s, lua_tostring(L, 2), (int)lua_tointeger(L, 3),
                                            "127.0.0.1", 22);
    int rc = t->ch ? 0 : libssh2_session_last_errno(ss->s);
    cs_ssh_after(L, ss, t, rc, rx0);
    if (rc == LIBSSH2_ERROR_EAGAIN) return cs_ssh_wait(L, ss, t, deadline, 0, forward_k);
    ss->ctl_owner = NULL;
    cs_waitq_wake(L, &ss->q);
    if (rc) {
      int n = cs_ssh_fail(L, ss, "refused", "tunnel to target (bastion could not connect)", NULL);
      tunnel_release(L, t);
      return n;
    }
    t->opening = 0;
    lua_settop(L, 6);
    return 1;
  }
}

static int forward_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  cs_tunnel *t = check_tunnel(L, 6);
  int w = cs_wake_status(L);
  if (w != CS_WAKE_READY) {
    tunnel_release(L, t);
    if (w == CS_WAKE_CANCELLED) return cs_raise_cancelled(L);
    return cs_ssh_fail(L, t->ss, "timeout", lua_pushfstring(L, "tunnel to %s", lua_tostring(L, 2)), "timed out");
  }
  return forward_step(L, t);
}

static int l_ssh_forward(lua_State *L) {
  cs_ssh *ss = cs_ssh_check(L, 1);
  luaL_checkstring(L, 2);
  luaL_checkinteger(L, 3);
  double timeout = luaL_optnumber(L, 4, 30);
  lua_settop(L, 4);
  lua_pushnumber(L, cs_now() + timeout);
  cs_tunnel *t = lua_newuserdatauv(L, sizeof *t, 1);
  memset(t, 0, sizeof *t);
  t->ss = ss;
  t->sp[0] = t->sp[1] = -1;
  t->opening = 1;
  luaL_setmetatable(L, TUNNEL_MT);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, 6, 1);    /* the bastion session outlives its tunnels */
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, t->sp) != 0)
    return luaL_error(L, "ssh: socketpair: %s", strerror(errno));
  return forward_step(L, t);
}

/* ---- pumping: tunnel:pump("down" | "up"), each in its own task --------------------------- */

static int pump_k(lua_State *L, int status, lua_KContext ctx);

static int pump_end(lua_State *L, cs_tunnel *t, int down) {
  if (down) t->down_done = 1; else t->up_done = 1;
  if (t->down_done && t->up_done) tunnel_release(L, t);
  lua_pushboolean(L, 1);
  return 1;
}

/* channel -> socketpair */
static int pump_down(lua_State *L, cs_tunnel *t) {
  cs_ssh *ss = t->ss;
  for (;;) {
    if (t->sp[0] < 0) return pump_end(L, t, 1);
    if (t->down_off < t->down_len) {
      ssize_t w = write(t->sp[0], t->down + t->down_off, t->down_len - t->down_off);
      if (w < 0 && (errno == EAGAIN || errno == EINTR))
        return cs_wait(L, t->sp[0], POLLOUT, NULL, 0, 1, pump_k);
      if (w < 0) return pump_end(L, t, 1);
      t->down_off += (size_t)w;
      continue;
    }
    if (ss->state != SS_READY || !t->ch) {
      shutdown(t->sp[0], SHUT_WR);
      return pump_end(L, t, 1);
    }
    if (!cs_ssh_may_call(ss, t)) return cs_wait(L, -1, 0, &ss->q, 0, 1, pump_k);
    unsigned long rx0 = ss->rx;
    ssize_t r = libssh2_channel_read(t->ch, t->down, TBUF);
    cs_ssh_after(L, ss, t, r < 0 ? (int)r : 0, rx0);
    if (r > 0) {
      t->down_len = (size_t)r;
      t->down_off = 0;
      continue;
    }
    if (r == LIBSSH2_ERROR_EAGAIN && !libssh2_channel_eof(t->ch))
      return cs_ssh_wait(L, ss, t, 0, 1, pump_k);
    shutdown(t->sp[0], SHUT_WR);   /* the target closed: the inner session sees EOF */
    return pump_end(L, t, 1);
  }
}

/* socketpair -> channel */
static int pump_up(lua_State *L, cs_tunnel *t) {
  cs_ssh *ss = t->ss;
  for (;;) {
    if (t->sp[0] < 0 || ss->state != SS_READY || !t->ch) return pump_end(L, t, 0);
    if (t->up_off < t->up_len) {
      if (!cs_ssh_may_call(ss, t)) return cs_wait(L, -1, 0, &ss->q, 0, 0, pump_k);
      unsigned long rx0 = ss->rx;
      ssize_t w = libssh2_channel_write(t->ch, t->up + t->up_off, t->up_len - t->up_off);
      cs_ssh_after(L, ss, t, w < 0 ? (int)w : 0, rx0);
      if (w == LIBSSH2_ERROR_EAGAIN) return cs_ssh_wait(L, ss, t, 0, 0, pump_k);
      if (w < 0) return pump_end(L, t, 0);
      t->up_off += (size_t)w;
      continue;
    }
    ssize_t r = read(t->sp[0], t->up, TBUF);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
      return cs_wait(L, t->sp[0], POLLIN, NULL, 0, 0, pump_k);
    if (r <= 0) {
      /* the inner session hung up: tell the target, best effort (it may need no wait) */
      if (cs_ssh_may_call(ss, t)) {
        unsigned long rx0 = ss->rx;
        int rc = libssh2_channel_send_eof(t->ch);
        cs_ssh_after(L, ss, t, rc, rx0);
      }
      return pump_end(L, t, 0);
    }
    t->up_len = (size_t)r;
    t->up_off = 0;
  }
}

static int pump_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  cs_tunnel *t = check_tunnel(L, 1);
  if (cs_wake_status(L) == CS_WAKE_CANCELLED) {
    if (ctx) t->down_done = 1; else t->up_done = 1;
    tunnel_release(L, t);
    return cs_raise_cancelled(L);
  }
  return ctx ? pump_down(L, t) : pump_up(L, t);
}

static int l_tunnel_pump(lua_State *L) {
  cs_tunnel *t = check_tunnel(L, 1);
  static const char *const dirs[] = {"up", "down", NULL};
  int down = luaL_checkoption(L, 2, NULL, dirs);
  if (t->opening || !t->ss) return luaL_error(L, "tunnel: not open");
  lua_settop(L, 1);
  return down ? pump_down(L, t) : pump_up(L, t);
}

/* tunnel:fd() -> the socket the inner session connects over */
static int l_tunnel_fd(lua_State *L) {
  cs_tunnel *t = check_tunnel(L, 1);
  if (t->sp[1] < 0) return luaL_error(L, "tunnel: closed");
  lua_pushinteger(L, t->sp[1]);
  t->sp[1] = -1;    /* the inner session owns it from now on and closes it */
  return 1;
}

static const luaL_Reg tunnel_methods[] = {
  {"pump", l_tunnel_pump},
  {"fd", l_tunnel_fd},
  {NULL, NULL}
};

static const luaL_Reg forward_methods[] = {
  {"forward", l_ssh_forward},
  {NULL, NULL}
};

void cs_ssh_tunnel_methods(lua_State *L) {
  luaL_setfuncs(L, forward_methods, 0);
  if (luaL_newmetatable(L, TUNNEL_MT)) {
    lua_newtable(L);
    luaL_setfuncs(L, tunnel_methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_tunnel_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_tunnel_gc);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
}

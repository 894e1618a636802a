/* ssh_connect.c - ssh.connect (TCP, handshake, host key, auth, as one yielding call) and agent auth. */
#include "ssh_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static LIBSSH2_RECV_FUNC(counting_recv) {
  cs_ssh *ss = *abstract;
  ssize_t r = recv(socket, buffer, length, flags);
  if (r < 0) return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  ss->rx += (unsigned long)r;
  return r;
}
/* Has the server closed the connection? (recv sees EOF again after libssh2 met it.) sshd
 * closes it without a word when it accepts the key but its account checks refuse the user. */
static int closed_by_peer(int fd) {
  char c;
  return fd >= 0 && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* ---- connect: TCP, handshake, host key, auth, as one yielding call --------------------
 * Stack while connecting: [opts, session]. */

static const char *opt_str(lua_State *L, const char *key) {
  lua_getfield(L, 1, key);
  const char *s = lua_tostring(L, -1);   /* the string stays alive in opts */
  lua_pop(L, 1);
  return s;
}

static lua_Integer opt_int(lua_State *L, const char *key, lua_Integer dflt) {
  lua_getfield(L, 1, key);
  lua_Integer v = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : dflt;
  lua_pop(L, 1);
  return v;
}

static int fail_errno(lua_State *L, cs_ssh *ss, const char *op, int err, const char *code) {
  return cs_ssh_fail(L, ss, code, op, "%s", strerror(err));
}

static int connect_k(lua_State *L, int status, lua_KContext ctx);

/* Starts the TCP connection to the first address of res: -1 when under way (the caller
 * frees res, then waits: nothing after a wait runs, since waiting yields by longjmp),
 * else the count of the failure values pushed. */
static int tcp_connect(lua_State *L, cs_ssh *ss, struct addrinfo *res) {
  ss->fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (ss->fd < 0) return fail_errno(L, ss, "socket", errno, "io");
  int one = 1;
  setsockopt(ss->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  /* ~40 ms per handshake without */
  int r = connect(ss->fd, res->ai_addr, res->ai_addrlen);
  int err = errno;
  if (r != 0 && err != EINPROGRESS) return fail_errno(L, ss, "connect", err, err == ECONNREFUSED ? "refused" : "io");
  ss->state = SS_TCP;
  return -1;
}

static int tcp_wait(lua_State *L, cs_ssh *ss, double deadline) {
  return cs_wait(L, ss->fd, POLLOUT, NULL, deadline, 0, connect_k);
}

static int resolve_fail(lua_State *L, cs_ssh *ss, int gai) {
  return cs_ssh_fail(L, ss, "refused", "resolve", "%s: %s", opt_str(L, "address"), gai_strerror(gai));
}

/* A literal address needs no lookup; a name is resolved in the background while the
 * task checks back every few milliseconds (getaddrinfo would block every host's task). */
static int tcp_start(lua_State *L, cs_ssh *ss, double deadline) {
  const char *addr = opt_str(L, "address");
  int port = (int)opt_int(L, "port", 22);
  char sport[16];
  snprintf(sport, sizeof sport, "%d", port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV | AI_NUMERICHOST}, *res;
  int gai = getaddrinfo(addr, sport, &hints, &res);
  if (gai == 0) {
    int n = tcp_connect(L, ss, res);
    freeaddrinfo(res);
    return n >= 0 ? n : tcp_wait(L, ss, deadline);
  }
  if (gai != EAI_NONAME) return resolve_fail(L, ss, gai);
  ss->resolve = cs_resolve_start(addr, port, &gai);
  if (!ss->resolve) return resolve_fail(L, ss, gai);
  ss->state = SS_RESOLVE;
  return cs_wait(L, -1, 0, NULL, cs_now() + 0.002, 0, connect_k);
}

static int resolve_step(lua_State *L, cs_ssh *ss, double deadline) {
  struct addrinfo *res = NULL;
  int gai = cs_resolve_poll(ss->resolve, &res);
  if (gai == EAI_INPROGRESS) {
    double next = cs_now() + 0.005;
    return cs_wait(L, -1, 0, NULL, deadline > 0 && deadline < next ? deadline : next, 0, connect_k);
  }
  int n = gai == 0 && res ? tcp_connect(L, ss, res) : resolve_fail(L, ss, gai ? gai : EAI_NONAME);
  cs_resolve_done(ss->resolve);
  ss->resolve = NULL;
  return n >= 0 ? n : tcp_wait(L, ss, deadline);
}

static int session_start(lua_State *L, cs_ssh *ss) {
  int err = 0;
  socklen_t elen = sizeof err;
  getsockopt(ss->fd, SOL_SOCKET, SO_ERROR, &err, &elen);
  if (err) return fail_errno(L, ss, "connect", err, err == ECONNREFUSED ? "refused" : "io");
  ss->s = libssh2_session_init_ex(cs_ssh_alloc, cs_ssh_free, cs_ssh_realloc, ss);
  if (!ss->s) return luaL_error(L, "ssh: out of memory");
  libssh2_session_callback_set(ss->s, LIBSSH2_CALLBACK_RECV, (void *)counting_recv);
  libssh2_session_set_blocking(ss->s, 0);
  lua_getfield(L, 1, "known_hosts");
  cs_kh *k = lua_isuserdata(L, -1) ? cs_kh_check(L, -1) : NULL;
  lua_pop(L, 1);
  if (k) {
    char prefs[200];
    cs_kh_known_types(k, opt_str(L, "address"), (int)opt_int(L, "port", 22), prefs, sizeof prefs);
    if (prefs[0]) libssh2_session_method_pref(ss->s, LIBSSH2_METHOD_HOSTKEY, prefs);
  }
  ss->state = SS_HANDSHAKE;
  return -1;
}

/* Compares the server's key with known_hosts under the policy; 0 when acceptable. */
static int check_hostkey(lua_State *L, cs_ssh *ss) {
  lua_getfield(L, 1, "host_key_policy");
  const char *pol = luaL_optstring(L, -1, "strict");
  lua_pop(L, 1);
  if (strcmp(pol, "off") == 0) return 0;
  lua_getfield(L, 1, "known_hosts");
  cs_kh *k = cs_kh_check(L, -1);
  lua_pop(L, 1);
  size_t klen;
  int htype;
  const char *key = libssh2_session_hostkey(ss->s, &klen, &htype);
  const char *addr = opt_str(L, "address");
  int port = (int)opt_int(L, "port", 22);
  int type = cs_kh_type_of(htype);
  char fp[80];
  cs_kh_fingerprint(ss->s, fp, sizeof fp);
  int r = libssh2_knownhost_checkp(k->kh, addr, port, key, klen,
      LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | type, NULL);
  if (r == LIBSSH2_KNOWNHOST_CHECK_MATCH) return 0;
  if (r == LIBSSH2_KNOWNHOST_CHECK_MISMATCH)
    return cs_ssh_fail(L, ss, "hostkey", "host key", "the %s key %s does NOT match the one %s holds "
                       "for %s; the host was reinstalled or someone is intercepting the connection",
                       cs_kh_label(type), fp, k->path, addr);
  if (strcmp(pol, "accept-new") == 0) {
    if (cs_kh_learn(k, addr, port, key, klen, type) == 0) return 0;
    return cs_ssh_fail(L, ss, "hostkey", "host key", "cannot add %s %s to %s", cs_kh_label(type), fp, k->path);
  }
  return cs_ssh_fail(L, ss, "hostkey", "host key", "%s is not in %s (it offered %s %s); check it, then "
                     "add it (ssh-keyscan) or set host_key_policy accept-new", addr, k->path,
                     cs_kh_label(type), fp);
}

/* One step of publickey auth by key file, or by each agent identity in turn. */
static int auth_step(lua_State *L, cs_ssh *ss) {
  const char *user = opt_str(L, "user");
  const char *key = opt_str(L, "key_path");
  if (!user) user = "root";
  const char *pub = opt_str(L, "pub_path");
  const char *pass = opt_str(L, "passphrase");
  return libssh2_userauth_publickey_fromfile_ex(ss->s, user, (unsigned)strlen(user), pub, key, pass);
}

static int connect_done(lua_State *L, cs_ssh *ss) {
  lua_getfield(L, 1, "user");
  const char *user = luaL_optstring(L, -1, "root");
  ss->root = strcmp(user, "root") == 0;
  lua_pop(L, 1);
  ss->state = SS_READY;
  lua_settop(L, 2);
  return 1;
}

static int connect_step(lua_State *L, cs_ssh *ss, double deadline) {
  for (;;) {
    int rc, r;
    unsigned long rx0 = ss->rx;
    switch (ss->state) {
      case SS_NEW:
        return tcp_start(L, ss, deadline);
      case SS_RESOLVE:
        return resolve_step(L, ss, deadline);
      case SS_TCP:
        if ((r = session_start(L, ss)) >= 0) return r;
        break;
      case SS_HANDSHAKE:
        rc = libssh2_session_handshake(ss->s, ss->fd);
        cs_ssh_after(L, ss, ss, rc, rx0);
        if (rc == LIBSSH2_ERROR_EAGAIN) return cs_ssh_wait(L, ss, ss, deadline, 0, connect_k);
        if (rc == LIBSSH2_ERROR_SOCKET_DISCONNECT || rc == LIBSSH2_ERROR_SOCKET_RECV)
          return cs_ssh_fail(L, ss, "closed", "handshake (server closed the connection before its banner)", NULL);
        if (rc == LIBSSH2_ERROR_KEX_FAILURE)
          return cs_ssh_fail(L, ss, "hostkey", "handshake (no common host-key or key-exchange algorithm)", NULL);
        if (rc) return cs_ssh_fail(L, ss, "io", "handshake", NULL);
        if ((r = check_hostkey(L, ss)) != 0) return r;
        ss->state = SS_AUTH;
        break;
      case SS_AUTH:
        if (!opt_str(L, "key_path")) {   /* no key file: session:agent_auth() follows */
          lua_settop(L, 2);
          return 1;
        }
        rc = auth_step(L, ss);
        cs_ssh_after(L, ss, ss, rc, rx0);
        if (rc == LIBSSH2_ERROR_EAGAIN) return cs_ssh_wait(L, ss, ss, deadline, 0, connect_k);
        if (rc == LIBSSH2_ERROR_FILE)
          return cs_ssh_fail(L, ss, "auth", "auth (cannot read or decrypt the key file)", NULL);
        if (rc == LIBSSH2_ERROR_AUTHENTICATION_FAILED || rc == LIBSSH2_ERROR_PUBLICKEY_UNVERIFIED) {
          const char *user = opt_str(L, "user");
          if (closed_by_peer(ss->fd))
            return cs_ssh_fail(L, ss, "auth", "auth", "connection closed by the host after key %s for user %s: "
                               "its account checks refused the login (/run/nologin while it boots, /etc/nologin, "
                               "a locked or expired account, AllowUsers/DenyUsers)",
                               opt_str(L, "key_path"), user ? user : "root");
          return cs_ssh_fail(L, ss, "auth", "auth", "the server refused key %s for user %s",
                             opt_str(L, "key_path"), user ? user : "root");
        }
        if (rc) return cs_ssh_fail(L, ss, "auth", "auth", NULL);
        return connect_done(L, ss);
      default:
        return luaL_error(L, "ssh.connect: bad state %d", ss->state);
    }
  }
}

static int connect_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  cs_ssh *ss = luaL_checkudata(L, 2, SSH_MT);
  int w = cs_wake_status(L);
  if (w == CS_WAKE_CANCELLED) {
    cs_ssh_hard_close(ss);
    ss->state = SS_CLOSED;
    return cs_raise_cancelled(L);
  }
  lua_getfield(L, 1, "_deadline");
  double deadline = lua_tonumber(L, -1);
  lua_pop(L, 1);
  if (w == CS_WAKE_TIMEOUT && ss->state == SS_RESOLVE && cs_now() < deadline)
    return connect_step(L, ss, deadline);   /* only the resolver's check-back timer */
  if (w == CS_WAKE_TIMEOUT) {
    static const char *const stage[] = {"connect", "connect", "handshake", "auth"};
    const char *what = ss->state <= SS_AUTH ? stage[ss->state] : ss->state == SS_RESOLVE ? "resolve" : "connect";
    return cs_ssh_fail(L, ss, "timeout", what, "timed out");
  }
  return connect_step(L, ss, deadline);
}

/* ssh.connect{address, port, user, name, key_path, pub_path, passphrase, known_hosts,
 *             host_key_policy, timeout, max_channels, spare_channel, fd} -> session | nil, msg, code
 * spare_channel = false: no channel is opened ahead of the next command (ssh_exec.c).
 * With key_path unset, the session is returned unauthenticated when agent = true, and
 * session:agent_auth() finishes the job. */
static int l_ssh_connect(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  const char *addr = opt_str(L, "address");
  luaL_argcheck(L, addr != NULL, 1, "address required");
  lua_getfield(L, 1, "host_key_policy");
  const char *pol = luaL_optstring(L, -1, "strict");
  luaL_argcheck(L, !strcmp(pol, "strict") || !strcmp(pol, "accept-new") || !strcmp(pol, "off"), 1,
                "host_key_policy must be strict, accept-new or off");
  lua_pop(L, 1);
  lua_getfield(L, 1, "known_hosts");
  luaL_argcheck(L, !strcmp(pol, "off") || luaL_testudata(L, -1, KH_MT), 1,
                "known_hosts collection required unless host_key_policy is off");
  lua_pop(L, 1);
  lua_getfield(L, 1, "timeout");
  double timeout = luaL_optnumber(L, -1, 30);
  lua_pop(L, 1);
  lua_pushnumber(L, cs_now() + timeout);
  lua_setfield(L, 1, "_deadline");

  cs_ssh *ss = lua_newuserdatauv(L, sizeof *ss, 1);
  memset(ss, 0, sizeof *ss);
  ss->fd = -1;
  ss->jump_ref = LUA_NOREF;
  luaL_setmetatable(L, SSH_MT);
  const char *name = opt_str(L, "name");
  ss->name = strdup(name ? name : addr);
  ss->max_channels = (int)opt_int(L, "max_channels", 10);
  lua_getfield(L, 1, "spare_channel");
  ss->spare_on = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (!ss->name) return luaL_error(L, "ssh: out of memory");
  lua_getfield(L, 1, "fd");
  if (lua_isinteger(L, -1)) {     /* a tunnel end made by a bastion session */
    ss->fd = (int)lua_tointeger(L, -1);
    ss->state = SS_TCP;
  }
  lua_pop(L, 1);
  lua_getfield(L, 1, "tunnel");   /* keep the bastion's tunnel alive as long as we live */
  if (!lua_isnil(L, -1)) lua_setiuservalue(L, 2, 1); else lua_pop(L, 1);
  return connect_step(L, ss, cs_now() + timeout);
}

/* ---- agent auth (the agent socket is local; its I/O blocks briefly) ------------------- */

static int agent_k(lua_State *L, int status, lua_KContext ctx);

static int agent_try(lua_State *L, cs_ssh *ss, LIBSSH2_AGENT *ag, double deadline) {
  struct libssh2_agent_publickey *id = lua_touserdata(L, 4);
  const char *user = luaL_checkstring(L, 2);
  for (;;) {
    unsigned long rx0 = ss->rx;
    int rc = libssh2_agent_userauth(ag, user, id);
    cs_ssh_after(L, ss, ss, rc, rx0);
    if (rc == LIBSSH2_ERROR_EAGAIN) return cs_ssh_wait(L, ss, ss, deadline, (lua_KContext)ag, agent_k);
    if (rc == 0) {
      libssh2_agent_disconnect(ag);
      libssh2_agent_free(ag);
      ss->root = strcmp(user, "root") == 0;
      ss->state = SS_READY;
      lua_pushboolean(L, 1);
      return 1;
    }
    if (libssh2_agent_get_identity(ag, &id, id) != 0) break;
    lua_pushlightuserdata(L, id);   /* a libssh2-owned cursor, not a handle we give out */
    lua_replace(L, 4);
  }
  libssh2_agent_disconnect(ag);
  libssh2_agent_free(ag);
  return cs_ssh_fail(L, ss, "auth", "auth (no identity of the ssh-agent was accepted)", NULL);
}

static int agent_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  cs_ssh *ss = luaL_checkudata(L, 1, SSH_MT);
  LIBSSH2_AGENT *ag = (LIBSSH2_AGENT *)ctx;
  int w = cs_wake_status(L);
  if (w != CS_WAKE_READY) {
    libssh2_agent_disconnect(ag);
    libssh2_agent_free(ag);
    if (w == CS_WAKE_CANCELLED) return cs_raise_cancelled(L);
    return cs_ssh_fail(L, ss, "timeout", "auth", "timed out");
  }
  return agent_try(L, ss, ag, lua_tonumber(L, 3));
}

/* session:agent_auth(user, timeout, socket) -> true | nil, msg, "auth"|"timeout"
 * socket: the agent's socket path; default SSH_AUTH_SOCK. */
static int l_ssh_agent_auth(lua_State *L) {
  cs_ssh *ss = cs_ssh_check(L, 1);
  luaL_checkstring(L, 2);
  double timeout = luaL_optnumber(L, 3, 30);
  const char *sock = luaL_optstring(L, 4, NULL);
  LIBSSH2_AGENT *ag = libssh2_agent_init(ss->s);
  struct libssh2_agent_publickey *id = NULL;
  if (!ag) return luaL_error(L, "ssh: out of memory");
  if (sock) libssh2_agent_set_identity_path(ag, sock);  /* copied by libssh2 */
  lua_settop(L, 2);
  lua_pushnumber(L, cs_now() + timeout);
  if (libssh2_agent_connect(ag) != 0 || libssh2_agent_list_identities(ag) != 0 ||
      libssh2_agent_get_identity(ag, &id, NULL) != 0) {
    libssh2_agent_free(ag);
    return cs_ssh_fail(L, ss, "auth", "auth", "no usable ssh-agent (SSH_AUTH_SOCK unset, unreachable or empty)");
  }
  lua_pushlightuserdata(L, id);
  return agent_try(L, ss, ag, lua_tonumber(L, 3));
}


static const luaL_Reg agent_methods[] = {
  {"agent_auth", l_ssh_agent_auth},
  {NULL, NULL}
};

void cs_ssh_agent_methods(lua_State *L) {
  luaL_setfuncs(L, agent_methods, 0);
}

void cs_ssh_connect_register(lua_State *L) {
  lua_pushcfunction(L, l_ssh_connect);
  lua_setfield(L, -2, "connect");
}

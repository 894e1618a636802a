/* ssh_exec.c - session:exec: one command per channel, many channels per session at once. */
/* A command costs one round trip, not two: its stdin and EOF follow the exec request without
 * waiting for the reply (so the host closes the channel as the command exits), and with the
 * request goes the open of the session's next channel (the spare), which the next command takes. */
#include "ssh_int.h"

#include <stdlib.h>
#include <string.h>

enum { E_OPEN, E_EXEC, E_STDIN, E_EOF, E_READ, E_CLOSE, E_WAITCLOSED, E_FREE, E_SPARE, E_DONE };

typedef struct {
  char *p;
  size_t len, cap;
} membuf;

typedef struct {
  cs_ssh *ss;
  LIBSSH2_CHANNEL *ch;
  int state;
  int holds_ctl;
  membuf out, err;
  size_t in_off;
  int exit_code;
  char *signal;
  int refused;            /* opens refused while none of ours was open */
  int napping;            /* the wait in progress is a pause before another open */
  int spare;              /* this op is opening the session's spare channel (holds the control gate) */
  int spare_half;         /* ... and its open packet is half sent: only the open may go on */
  int early;              /* the exec request is sent: stdin and EOF go on before its reply */
  int eof_sent;
  unsigned long rx_mark;  /* ss->rx when this turn of exec_step began */
} cs_exec;

/* Stack layout while an exec runs. */
enum { A_SESSION = 1, A_CMD, A_OPTS, A_OP, A_DEADLINE };

#define READ_CHUNK 32768   /* libssh2's max packet: larger reads buy nothing */
/* libssh2 1.10 builds an exec request in one packet of at most 35000 bytes (measured: a
 * 33000-byte command goes, 35000 fails with -34); refuse before it says so opaquely. */
#define MAX_COMMAND 32768
/* An open can be refused while none of our channels is open, if sshd has not yet freed the
 * session slots of channels we just closed (our likely reading of one CI failure: 30
 * commands at once on a MaxSessions 10 host; not reproduced): retry, 20, 40, ... ms apart. */
#define OPEN_RETRIES 8

/* Doubling growth: 100 MB of output costs O(n) copies, not O(n^2). */
static int buf_add(membuf *b, const char *data, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
  return 0;
}

static void op_release(lua_State *L, cs_exec *op) {
  cs_ssh *ss = op->ss;
  if (op->state == E_OPEN) ss->openers--;
  if (op->spare) ss->spare_orphan = 1;   /* libssh2 keeps the open pending: the next open ends it */
  op->spare = op->spare_half = 0;
  if (op->holds_ctl && ss->ctl_owner == op) {
    ss->ctl_owner = NULL;
    cs_waitq_wake(L, &ss->q);
  }
  op->holds_ctl = 0;
  if (ss->send_owner == op) {
    /* a packet of ours is half sent and nobody may finish it: the session is lost */
    cs_ssh_break(L, ss, "a command was cut off mid-packet");
  }
  if (op->ch) {
    if (ss->s && ss->state != SS_BROKEN) cs_ssh_abandon(ss, op->ch);
    op->ch = NULL;
  }
}

static int l_exec_gc(lua_State *L) {
  cs_exec *op = luaL_checkudata(L, 1, EXEC_MT);
  if (op->ss && op->state != E_DONE && op->ss->state != SS_CLOSED) op_release(L, op);
  free(op->out.p);
  free(op->err.p);
  free(op->signal);
  memset(op, 0, sizeof *op);
  op->state = E_DONE;
  return 0;
}

static int exec_fail(lua_State *L, cs_exec *op, const char *what, const char *code) {
  int n = cs_ssh_fail(L, op->ss, code, what, NULL);
  op_release(L, op);
  op->state = E_DONE;
  return n;
}

/* Hands one chunk to the caller's callback, or keeps it. Callbacks must not wait. */
static int deliver(lua_State *L, cs_exec *op, int stream, const char *data, size_t n) {
  lua_getfield(L, A_OPTS, stream ? "on_stderr" : "on_stdout");
  if (lua_isfunction(L, -1)) {
    lua_pushlstring(L, data, n);
    lua_call(L, 1, 0);
    return 0;
  }
  lua_pop(L, 1);
  return buf_add(stream ? &op->err : &op->out, data, n);
}

/* Drains both streams (an unread stderr stalls the window, notes §7).
 * Returns 1 if anything was read, 0 if both would block, -1 on error. */
static int drain(lua_State *L, cs_exec *op) {
  static char chunk[READ_CHUNK];
  cs_ssh *ss = op->ss;
  int got = 0;
  for (int stream = 0; stream <= 1; stream++) {
    for (;;) {
      if (!cs_ssh_may_call(ss, op)) return got;
      unsigned long rx0 = ss->rx;
      ssize_t r = libssh2_channel_read_ex(op->ch, stream, chunk, sizeof chunk);
      cs_ssh_after(L, ss, op, r < 0 ? (int)r : 0, rx0);
      if (r == LIBSSH2_ERROR_EAGAIN || r == 0) break;
      if (r < 0) return -1;
      if (deliver(L, op, stream, chunk, (size_t)r) != 0) return luaL_error(L, "ssh: exec: out of memory");
      got = 1;
    }
  }
  return got;
}

static int exec_k(lua_State *L, int status, lua_KContext ctx);

/* Waits for the socket, unless bytes came in during this turn: then one of this turn's calls
 * may have queued what an earlier call of the same turn looked for (stdout's data read by the
 * stderr read, an EOF by a write), and nothing more may ever arrive to wake the wait. -> -1:
 * take another turn. */
static int wait_session(lua_State *L, cs_exec *op) {
  if (op->ss->rx != op->rx_mark) return -1;
  return cs_ssh_wait(L, op->ss, op, lua_tonumber(L, A_DEADLINE), 0, exec_k);
}

static int wait_turn(lua_State *L, cs_exec *op) {
  return cs_wait(L, -1, 0, &op->ss->q, lua_tonumber(L, A_DEADLINE), 0, exec_k);
}

/* Opens the session's spare channel on by one step. Rule 2 of notes/libssh2.md: while its
 * packet is half sent nothing else may call into the session. -> 1 while it is half sent. */
static int spare_step(lua_State *L, cs_exec *op) {
  cs_ssh *ss = op->ss;
  unsigned long rx0 = ss->rx;
  LIBSSH2_CHANNEL *ch = libssh2_channel_open_session(ss->s);
  int rc = ch ? 0 : libssh2_session_last_errno(ss->s);
  cs_ssh_after(L, ss, op, rc, rx0);
  if (rc == LIBSSH2_ERROR_EAGAIN) {
    op->spare_half = (libssh2_session_block_directions(ss->s) & LIBSSH2_SESSION_BLOCK_OUTBOUND) != 0;
    return op->spare_half;
  }
  op->spare = op->spare_half = 0;
  if (op->state != E_EXEC) {   /* the exec request's reply is in: the gate is free */
    op->holds_ctl = 0;
    ss->ctl_owner = NULL;
    cs_waitq_wake(L, &ss->q);
  }
  if (ch) {
    ss->spare = ch;
  } else {
    ss->channels--;
    ss->spare_on = 0;   /* refused (MaxSessions lower than we assumed) or failed: open on demand */
  }
  return 0;
}

/* Starts the spare's open once this op's exec request is sent (the op holds the control gate:
 * an open and a request wait for different replies), when nobody else waits to open a channel,
 * a slot is free and no packet is half sent. */
static void spare_begin(lua_State *L, cs_exec *op) {
  cs_ssh *ss = op->ss;
  if (!ss->spare_on || ss->spare || ss->spare_orphan || ss->openers > 0 || ss->ctl_owner != op ||
      ss->send_owner || ss->channels + 1 >= ss->max_channels)
    return;
  op->spare = 1;
  ss->channels++;
  spare_step(L, op);
}

/* A pause before trying the open again, cut short by the command's own deadline (which then
 * times it out as any other wait would). */
static int nap(lua_State *L, cs_exec *op) {
  double until = cs_now() + 0.02 * ++op->refused, deadline = lua_tonumber(L, A_DEADLINE);
  op->napping = deadline <= 0 || until < deadline;
  return cs_wait(L, -1, 0, NULL, op->napping ? until : deadline, 0, exec_k);
}

static int finish(lua_State *L, cs_exec *op) {
  cs_ssh *ss = op->ss;
  op->state = E_DONE;
  ss->channels--;
  cs_waitq_wake(L, &ss->q);   /* a channel slot is free */
  lua_pushlstring(L, op->out.p ? op->out.p : "", op->out.len);
  lua_pushlstring(L, op->err.p ? op->err.p : "", op->err.len);
  lua_pushinteger(L, op->exit_code);
  if (op->signal) lua_pushstring(L, op->signal); else lua_pushnil(L);
  return 4;
}

static int step_open(lua_State *L, cs_exec *op) {
  cs_ssh *ss = op->ss;
  if (ss->ctl_owner && ss->ctl_owner != op) return wait_turn(L, op);   /* rule 3 */
  if (ss->spare_orphan) {
    ss->ctl_owner = op;
    op->holds_ctl = 1;
    return cs_ssh_orphan_step(L, ss, op) ? wait_session(L, op) : -1;
  }
  if (ss->spare) {   /* opened ahead: the exec request goes at once */
    ss->ctl_owner = op;
    op->holds_ctl = 1;
    op->ch = ss->spare;
    ss->spare = NULL;
    ss->openers--;
    ss->ahead++;
    op->state = E_EXEC;
    return -1;
  }
  if (ss->channels >= ss->max_channels) return wait_turn(L, op);   /* MaxSessions */
  ss->ctl_owner = op;
  op->holds_ctl = 1;
  unsigned long rx0 = ss->rx;
  op->ch = libssh2_channel_open_session(ss->s);
  int rc = op->ch ? 0 : libssh2_session_last_errno(ss->s);
  cs_ssh_after(L, ss, op, rc, rx0);
  if (rc == LIBSSH2_ERROR_EAGAIN) return wait_session(L, op);
  if (rc == LIBSSH2_ERROR_CHANNEL_FAILURE && (ss->channels > 0 || op->refused < OPEN_RETRIES)) {
    ss->ctl_owner = NULL;
    op->holds_ctl = 0;
    if (ss->channels > 0) {
      /* the server's MaxSessions is lower than we assumed: wait for a channel to close */
      ss->max_channels = ss->channels;
      return wait_turn(L, op);
    }
    cs_waitq_wake(L, &ss->q);
    return nap(L, op);
  }
  if (rc) return exec_fail(L, op, "exec: open channel", "io");
  ss->channels++;
  ss->openers--;
  op->state = E_EXEC;
  return -1;
}

/* Writes stdin on from in_off until all of it is sent or the channel would block.
 * -> 0 when all is sent, else libssh2's code (EAGAIN: would block); *moved: some went. */
static int write_stdin(lua_State *L, cs_exec *op, int *moved) {
  cs_ssh *ss = op->ss;
  size_t len = 0;
  lua_getfield(L, A_OPTS, "stdin");
  const char *in = lua_tolstring(L, -1, &len);
  lua_pop(L, 1);   /* the string stays referenced by opts */
  while (in && op->in_off < len) {
    unsigned long rx0 = ss->rx;
    ssize_t w = libssh2_channel_write(op->ch, in + op->in_off, len - op->in_off);
    cs_ssh_after(L, ss, op, w < 0 ? (int)w : 0, rx0);
    if (w < 0) return (int)w;
    op->in_off += (size_t)w;
    *moved = 1;
  }
  return 0;
}

/* Sends what stdin fits in the channel's window and then EOF, while the exec request waits for
 * its reply. -> 1 when a packet of ours is half sent (only it may go on). */
static int early_input(lua_State *L, cs_exec *op) {
  cs_ssh *ss = op->ss;
  int moved = 0, rc = write_stdin(L, op, &moved);
  if (rc == LIBSSH2_ERROR_EAGAIN) return ss->send_owner == op;
  if (rc < 0 || op->eof_sent) return 0;   /* a failed write: the one after the reply says why */
  unsigned long rx0 = ss->rx;
  rc = libssh2_channel_send_eof(op->ch);
  cs_ssh_after(L, ss, op, rc, rx0);
  if (rc == LIBSSH2_ERROR_EAGAIN) return ss->send_owner == op;
  op->eof_sent = 1;   /* or failed: step_eof's own send is then the one that says so */
  return 0;
}

static int step_exec(lua_State *L, cs_exec *op) {
  cs_ssh *ss = op->ss;
  if (op->early && early_input(L, op)) return wait_session(L, op);
  size_t len;
  const char *cmd = lua_tolstring(L, A_CMD, &len);
  unsigned long rx0 = ss->rx;
  int rc = libssh2_channel_process_startup(op->ch, "exec", 4, cmd, (unsigned)len);
  cs_ssh_after(L, ss, op, rc, rx0);
  if (rc == LIBSSH2_ERROR_EAGAIN) {
    if (ss->send_owner == op || op->early) return wait_session(L, op);
    op->early = 1;   /* the request is out: its reply comes with the command's output */
    if (!early_input(L, op)) spare_begin(L, op);
    return -1;
  }
  if (rc) return exec_fail(L, op, "exec: start command", "io");
  if (!op->early) spare_begin(L, op);   /* the reply came with the request's own call */
  if (!op->spare) {
    ss->ctl_owner = NULL;
    op->holds_ctl = 0;
    cs_waitq_wake(L, &ss->q);
  }
  ss->opened++;
  op->state = E_STDIN;
  return -1;
}

static int step_stdin(lua_State *L, cs_exec *op) {
  cs_ssh *ss = op->ss;
  int progress = 0, rc = write_stdin(L, op, &progress);
  if (rc < 0 && rc != LIBSSH2_ERROR_EAGAIN) return exec_fail(L, op, "exec: write stdin", "io");
  if (rc == 0) {
    op->state = E_EOF;
    return -1;
  }
  /* the command may fill its output window before it reads all its input: keep reading */
  int d = cs_ssh_may_call(ss, op) ? drain(L, op) : 0;
  if (d < 0) return exec_fail(L, op, "exec: read", "closed");
  return progress || d ? -1 : wait_session(L, op);
}

static int step_eof(lua_State *L, cs_exec *op) {
  cs_ssh *ss = op->ss;
  if (op->eof_sent) {
    op->state = E_READ;
    return -1;
  }
  unsigned long rx0 = ss->rx;
  int rc = libssh2_channel_send_eof(op->ch);
  cs_ssh_after(L, ss, op, rc, rx0);
  if (rc == LIBSSH2_ERROR_EAGAIN) return wait_session(L, op);
  /* a command that exited before reading stdin has closed its end: not an error */
  op->state = E_READ;
  return -1;
}

static int step_read(lua_State *L, cs_exec *op) {
  int d = drain(L, op);
  if (d < 0) {
    if (op->ss->state == SS_BROKEN) return exec_fail(L, op, "exec", "closed");
    return exec_fail(L, op, "exec: read", "closed");
  }
  if (d > 0) return -1;
  if (libssh2_channel_eof(op->ch)) {
    op->state = E_CLOSE;
    return -1;
  }
  return wait_session(L, op);
}

static int step_close(lua_State *L, cs_exec *op) {
  cs_ssh *ss = op->ss;
  unsigned long rx0 = ss->rx;
  int rc = op->state == E_CLOSE ? libssh2_channel_close(op->ch)
         : op->state == E_WAITCLOSED ? libssh2_channel_wait_closed(op->ch)
         : libssh2_channel_free(op->ch);
  cs_ssh_after(L, ss, op, rc, rx0);
  if (rc == LIBSSH2_ERROR_EAGAIN) return wait_session(L, op);
  if (op->state == E_CLOSE) {
    op->state = E_WAITCLOSED;
    return -1;
  }
  if (op->state == E_WAITCLOSED) {
    /* only after the peer's CLOSE is the exit status certain (notes §7) */
    char *sig = NULL;
    op->exit_code = libssh2_channel_get_exit_status(op->ch);
    libssh2_channel_get_exit_signal(op->ch, &sig, NULL, NULL, NULL, NULL, NULL);
    if (sig) {
      op->signal = strdup(sig);
      libssh2_free(ss->s, sig);
    }
    op->state = E_FREE;
    return -1;
  }
  op->ch = NULL;
  op->state = E_SPARE;
  return -1;
}

static int exec_step(lua_State *L, cs_exec *op) {
  for (;;) {
    cs_ssh *ss = op->ss;
    if (ss->state == SS_BROKEN || !ss->s) return exec_fail(L, op, "exec", "closed");
    op->rx_mark = ss->rx;
    cs_ssh_reap(L, ss, op);
    if (!cs_ssh_may_call(ss, op)) return wait_turn(L, op);
    int r;
    /* the spare's open goes on beside the command, unless the command's packet is half sent */
    if (op->spare && (ss->send_owner != op || op->spare_half) && spare_step(L, op)) {
      r = wait_session(L, op);
      if (r >= 0) return r;
      continue;
    }
    switch (op->state) {
      case E_OPEN: r = step_open(L, op); break;
      case E_EXEC: r = step_exec(L, op); break;
      case E_STDIN: r = step_stdin(L, op); break;
      case E_EOF: r = step_eof(L, op); break;
      case E_READ: r = step_read(L, op); break;
      case E_CLOSE: case E_WAITCLOSED: case E_FREE: r = step_close(L, op); break;
      case E_SPARE: r = op->spare ? wait_session(L, op) : finish(L, op); break;
      default: return luaL_error(L, "ssh: exec: bad state %d", op->state);
    }
    if (r >= 0) return r;
  }
}

static int exec_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  cs_exec *op = luaL_checkudata(L, A_OP, EXEC_MT);
  int w = cs_wake_status(L);
  /* an abandoned channel stays counted until the reaper frees it */
  if (w == CS_WAKE_CANCELLED) {
    op_release(L, op);
    op->state = E_DONE;
    return cs_raise_cancelled(L);
  }
  if (w == CS_WAKE_TIMEOUT && op->napping) {
    op->napping = 0;
    return exec_step(L, op);
  }
  if (w == CS_WAKE_TIMEOUT) {
    op_release(L, op);
    op->state = E_DONE;
    double t = lua_tonumber(L, A_DEADLINE + 1);
    if (t == (double)(int)t) return cs_ssh_fail(L, op->ss, "timeout", "exec", "timed out after %d s", (int)t);
    return cs_ssh_fail(L, op->ss, "timeout", "exec", "timed out after %f s", t);
  }
  return exec_step(L, op);
}

/* session:exec(cmd, {stdin, timeout, on_stdout, on_stderr})
 *   -> stdout, stderr, exit_code, signal | nil, msg, code
 * The command runs as given (quoting is the caller's, through util.quote). With a callback
 * a stream is handed over chunk by chunk and not kept; callbacks must not wait. */
static int l_ssh_exec(lua_State *L) {
  cs_ssh *ss = cs_ssh_check(L, A_SESSION);
  size_t cmdlen;
  luaL_checklstring(L, A_CMD, &cmdlen);
  if (cmdlen > MAX_COMMAND)
    return cs_ssh_fail(L, ss, "io", "exec", "the command is %d bytes, over the %d an exec request holds; "
                       "send a longer script over stdin", (int)cmdlen, MAX_COMMAND);
  if (lua_isnoneornil(L, A_OPTS)) {
    lua_settop(L, A_CMD);
    lua_newtable(L);
  }
  luaL_checktype(L, A_OPTS, LUA_TTABLE);
  lua_settop(L, A_OPTS);
  if (ss->state == SS_BROKEN) return cs_ssh_fail(L, ss, "closed", "exec", NULL);
  if (ss->state != SS_READY) return cs_ssh_fail(L, ss, "closed", "exec", "session is not ready (not authenticated)");
  cs_exec *op = lua_newuserdatauv(L, sizeof *op, 1);
  memset(op, 0, sizeof *op);
  op->ss = ss;
  op->state = E_OPEN;
  ss->openers++;
  luaL_setmetatable(L, EXEC_MT);
  lua_pushvalue(L, A_SESSION);
  lua_setiuservalue(L, A_OP, 1);   /* the session outlives its operations */
  lua_getfield(L, A_OPTS, "timeout");
  double timeout = luaL_optnumber(L, -1, 0);
  lua_pop(L, 1);
  lua_pushnumber(L, timeout > 0 ? cs_now() + timeout : 0);
  lua_pushnumber(L, timeout);
  return exec_step(L, op);
}

static const luaL_Reg exec_methods[] = {
  {"exec", l_ssh_exec},
  {NULL, NULL}
};

void cs_ssh_exec_methods(lua_State *L) {
  luaL_setfuncs(L, exec_methods, 0);
  if (luaL_newmetatable(L, EXEC_MT)) {
    lua_pushcfunction(L, l_exec_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_exec_gc);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
}

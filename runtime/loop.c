/* loop.c - the one event loop: tasks as coroutines, timers, poll(), cancellation, signals. */
#include "loop_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The coroutine running now, for the signal handler's hook (see signals below). */
static lua_State *volatile sig_co;
static void busy_hook(lua_State *L, lua_Debug *ar);

/* ---- clock ------------------------------------------------------------------------ */

double cs_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the loop object --------------------------------------------------------------- */

static const char LOOP_KEY = 'L';

/* The loop of this Lua state, created on first use.  [-0, +0, m] */
cs_loop *cs_loop_get(lua_State *L) {
  cs_loop *lp;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &LOOP_KEY) == LUA_TUSERDATA) {
    lp = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return lp;
  }
  lua_pop(L, 1);
  lp = lua_newuserdatauv(L, sizeof *lp, 0);
  memset(lp, 0, sizeof *lp);
  luaL_setmetatable(L, LOOP_MT);
  lp->sigpipe[0] = lp->sigpipe[1] = -1;
  lp->next_id = 1;
  lua_rawsetp(L, LUA_REGISTRYINDEX, &LOOP_KEY);
  return lp;
}

int cs_loop_gc(lua_State *L) {
  cs_loop *lp = luaL_checkudata(L, 1, LOOP_MT);
  free(lp->heap);
  free(lp->pfds);
  free(lp->pfd_task);
  lp->heap = NULL;
  lp->pfds = NULL;
  lp->pfd_task = NULL;
  lp->heap_len = lp->heap_cap = lp->pfd_cap = 0;
  return 0;
}

/* ---- timer heap (min-heap on deadline) --------------------------------------------- */

static void heap_swap(cs_loop *lp, size_t a, size_t b) {
  cs_task *t = lp->heap[a];
  lp->heap[a] = lp->heap[b];
  lp->heap[b] = t;
  lp->heap[a]->heap_idx = a;
  lp->heap[b]->heap_idx = b;
}

static void heap_up(cs_loop *lp, size_t i) {
  while (i > 0 && lp->heap[(i - 1) / 2]->deadline > lp->heap[i]->deadline) {
    heap_swap(lp, i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
}

static void heap_down(cs_loop *lp, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < lp->heap_len && lp->heap[l]->deadline < lp->heap[m]->deadline) m = l;
    if (r < lp->heap_len && lp->heap[r]->deadline < lp->heap[m]->deadline) m = r;
    if (m == i) return;
    heap_swap(lp, i, m);
    i = m;
  }
}

static void heap_push(lua_State *L, cs_loop *lp, cs_task *t) {
  if (lp->heap_len == lp->heap_cap) {
    size_t cap = lp->heap_cap ? lp->heap_cap * 2 : 64;
    cs_task **h = realloc(lp->heap, cap * sizeof *h);
    if (!h) luaL_error(L, "out of memory");
    lp->heap = h;
    lp->heap_cap = cap;
  }
  t->heap_idx = lp->heap_len;
  lp->heap[lp->heap_len++] = t;
  heap_up(lp, t->heap_idx);
}

static void heap_remove(cs_loop *lp, cs_task *t) {
  size_t i = t->heap_idx;
  if (i == NO_HEAP) return;
  t->heap_idx = NO_HEAP;
  if (--lp->heap_len == i) return;
  cs_task *moved = lp->heap[lp->heap_len];
  lp->heap[i] = moved;
  moved->heap_idx = i;
  heap_up(lp, i);
  heap_down(lp, moved->heap_idx);
}

/* ---- queues and the ready list ------------------------------------------------------ */

static void q_push(cs_waitq *q, cs_task *t) {
  t->q = q;
  t->qnext = NULL;
  t->qprev = q->tail;
  if (q->tail) q->tail->qnext = t; else q->head = t;
  q->tail = t;
}

static void q_remove(cs_task *t) {
  cs_waitq *q = t->q;
  if (!q) return;
  if (t->qprev) t->qprev->qnext = t->qnext; else q->head = t->qnext;
  if (t->qnext) t->qnext->qprev = t->qprev; else q->tail = t->qprev;
  t->q = NULL;
  t->qnext = t->qprev = NULL;
}

static void fd_remove(cs_loop *lp, cs_task *t) {
  if (t->fd < 0) return;
  if (t->fdprev) t->fdprev->fdnext = t->fdnext; else lp->fd_head = t->fdnext;
  if (t->fdnext) t->fdnext->fdprev = t->fdprev;
  t->fdnext = t->fdprev = NULL;
  t->fd = -1;
}

static void ready_push(cs_loop *lp, cs_task *t) {
  t->state = T_READY;
  t->rnext = NULL;
  if (lp->ready_tail) lp->ready_tail->rnext = t; else lp->ready_head = t;
  lp->ready_tail = t;
}

/* Ends t's wait (whatever it was) and queues it to resume with reason `wake`. */
static void make_ready(cs_loop *lp, cs_task *t, int wake) {
  if (t->state != T_WAITING) return;
  q_remove(t);
  fd_remove(lp, t);
  heap_remove(lp, t);
  t->wake = wake;
  ready_push(lp, t);
}

void cs_waitq_wake(lua_State *L, cs_waitq *q) {
  cs_loop *lp = cs_loop_get(L);
  while (q->head) make_ready(lp, q->head, CS_WAKE_READY);
}

int cs_waitq_wake_one(lua_State *L, cs_waitq *q) {
  if (!q->head) return 0;
  make_ready(cs_loop_get(L), q->head, CS_WAKE_READY);
  return 1;
}

/* ---- waiting ---------------------------------------------------------------------- */

/* The task running in L, or raises: waits make sense only inside the loop's tasks. */
cs_task *cs_loop_running_task(lua_State *L) {
  cs_loop *lp = cs_loop_get(L);
  if (!lp->running || !lp->current || lp->current->co != L)
    luaL_error(L, "cargoship: cannot wait outside a task of the running loop");
  return lp->current;
}

int cs_wait(lua_State *L, int fd, short events, cs_waitq *q, double deadline,
            lua_KContext ctx, lua_KFunction k) {
  cs_task *t = cs_loop_running_task(L);
  cs_loop *lp = t->loop;
  t->state = T_WAITING;
  t->deadline = deadline;
  if (t->cancelled && !t->cleanup) {
    /* cancelled before this wait: resume at once so the continuation sees it */
    t->wake = CS_WAKE_CANCELLED;
    ready_push(lp, t);
  } else {
    if (q) q_push(q, t);
    if (fd >= 0) {
      t->fd = fd;
      t->events = events;
      t->fdprev = NULL;
      t->fdnext = lp->fd_head;
      if (lp->fd_head) lp->fd_head->fdprev = t;
      lp->fd_head = t;
    }
    if (deadline > 0) heap_push(L, lp, t);
  }
  return lua_yieldk(L, 0, ctx, k);
}

int cs_wake_status(lua_State *L) {
  cs_task *t = cs_loop_running_task(L);
  return t->wake;
}

int cs_in_cleanup(lua_State *L) {
  cs_loop *lp = cs_loop_get(L);
  return lp->current && lp->current->co == L && lp->current->cleanup;
}

int cs_raise_cancelled(lua_State *L) {
  lua_pushliteral(L, "cancelled");
  return lua_error(L);
}

/* ---- tasks -------------------------------------------------------------------------- */

cs_task *cs_loop_check_task(lua_State *L, int idx) {
  return luaL_checkudata(L, idx, TASK_MT);
}


static int task_finish_k(lua_State *co, int status, lua_KContext ctx);

/* Runs the destructors of the task (LIFO), each protected; may yield.  Stack: [task]. */
static int run_defers_k(lua_State *co, int status, lua_KContext ctx) {
  cs_task *t = lua_touserdata(co, 1);
  if (status != LUA_OK && status != LUA_YIELD && t->ok) {
    /* a failing destructor fails a task that had succeeded: cleanup must not lie */
    lua_getiuservalue(co, 1, UV_RESULTS);
    lua_pushvalue(co, -2);
    lua_rawseti(co, -2, 1);
    lua_pushinteger(co, 1);
    lua_setfield(co, -2, "n");
    t->ok = 0;
    t->code = "error";
    lua_pop(co, 1);
  }
  lua_settop(co, 1);
  lua_Integer i = (lua_Integer)ctx;
  if (i <= 0) return 0;
  lua_getiuservalue(co, 1, UV_DEFERS);
  lua_rawgeti(co, -1, i);
  lua_pushnil(co);
  lua_rawseti(co, -3, i);
  lua_remove(co, -2);
  int st = lua_pcallk(co, 0, 0, 0, (lua_KContext)(i - 1), run_defers_k);
  return run_defers_k(co, st, (lua_KContext)(i - 1));
}

/* After the body: store results or error, then run destructors.  Stack: [task, results...] */
static int task_finish_k(lua_State *co, int status, lua_KContext ctx) {
  (void)ctx;
  cs_task *t = lua_touserdata(co, 1);
  int n = lua_gettop(co) - 1;
  lua_createtable(co, n, 1);
  lua_insert(co, 2);
  for (int i = n; i >= 1; i--) lua_rawseti(co, 2, i);
  lua_pushinteger(co, n);
  lua_setfield(co, 2, "n");
  lua_setiuservalue(co, 1, UV_RESULTS);
  t->ok = (status == LUA_OK || status == LUA_YIELD);
  t->code = t->ok ? NULL : (t->cancelled ? "cancelled" : "error");
  t->cleanup = 1;
  lua_getiuservalue(co, 1, UV_DEFERS);
  lua_Integer nd = luaL_len(co, -1);
  lua_pop(co, 1);
  return run_defers_k(co, LUA_OK, (lua_KContext)nd);
}

/* Body of every task's coroutine.  Stack: [task, fn, args...] */
static int task_main(lua_State *co) {
  int nargs = lua_gettop(co) - 2;
  int st = lua_pcallk(co, nargs, LUA_MULTRET, 0, 0, task_finish_k);
  return task_finish_k(co, st, 0);
}

/* Creates a task running fn(args...) from stack [fn, args...] above `base`; pushes it. */
cs_task *cs_loop_spawn(lua_State *L, cs_loop *lp, int fnidx) {
  int top = lua_gettop(L);
  luaL_checktype(L, fnidx, LUA_TFUNCTION);
  cs_task *t = lua_newuserdatauv(L, sizeof *t, 2);
  memset(t, 0, sizeof *t);
  t->loop = lp;
  t->fd = -1;
  t->heap_idx = NO_HEAP;
  t->id = lp->next_id++;
  luaL_setmetatable(L, TASK_MT);
  lua_newtable(L);
  lua_setiuservalue(L, -2, UV_DEFERS);
  lua_pushvalue(L, -1);
  t->self_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  t->co = lua_newthread(L);
  t->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushcfunction(t->co, task_main);
  lua_pushvalue(L, -1);            /* the task userdata */
  lua_xmove(L, t->co, 1);
  for (int i = fnidx; i <= top; i++) lua_pushvalue(L, i);
  lua_xmove(L, t->co, top - fnidx + 1);
  t->aprev = NULL;
  t->anext = lp->all_head;
  if (lp->all_head) lp->all_head->aprev = t;
  lp->all_head = t;
  lp->live++;
  ready_push(lp, t);
  return t;
}


static void task_done(lua_State *L, cs_loop *lp, cs_task *t) {
  t->state = T_DONE;
  if (t->anext) t->anext->aprev = t->aprev;
  if (t->aprev) t->aprev->anext = t->anext; else lp->all_head = t->anext;
  lp->live--;
  cs_waitq_wake(L, &t->joiners);
  if (t == lp->main) {
    lp->main = NULL;
    cs_loop_cancel_all(lp);
  }
  luaL_unref(L, LUA_REGISTRYINDEX, t->co_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, t->self_ref);
  t->co = NULL;
}

/* A coroutine that died outside task_main's protection (cannot normally happen:
 * only a C continuation raising past pcallk would). Record it as the task's error. */
static void task_crashed(lua_State *L, cs_task *t) {
  lua_State *co = t->co;
  t->ok = 0;
  t->code = t->cancelled ? "cancelled" : "error";
  lua_rawgeti(L, LUA_REGISTRYINDEX, t->self_ref);
  lua_createtable(L, 1, 1);
  lua_xmove(co, L, 1);
  lua_rawseti(L, -2, 1);
  lua_pushinteger(L, 1);
  lua_setfield(L, -2, "n");
  lua_setiuservalue(L, -2, UV_RESULTS);
  lua_pop(L, 1);
  lua_resetthread(co);   /* closes pending to-be-closed variables */
}

static void resume(lua_State *L, cs_loop *lp, cs_task *t) {
  int nres, nargs = 0;
  lua_State *co = t->co;
  if (lua_status(co) == LUA_YIELD) {
    nargs = 0;   /* the wake reason travels in the task, read by cs_wake_status */
  } else {
    nargs = lua_gettop(co) - 1;   /* first run: [task_main, task, fn, args...] */
  }
  t->state = T_RUNNING;
  lp->current = t;
  sig_co = co;
  int st = lua_resume(co, L, nargs, &nres);
  sig_co = NULL;
  lp->current = NULL;
  if (lua_gethook(co) == busy_hook) lua_sethook(co, NULL, 0, 0);
  if (st == LUA_YIELD) {
    lua_pop(co, nres);
    if (t->state == T_RUNNING) {
      /* a plain coroutine.yield() inside a task: treat as "let others run" */
      t->wake = CS_WAKE_READY;
      ready_push(lp, t);
    }
    return;
  }
  if (st != LUA_OK) task_crashed(L, t);
  task_done(L, lp, t);
}

/* ---- signals ------------------------------------------------------------------------
 * SIGINT, SIGTERM, SIGHUP (a dropped operator session) and SIGQUIT cancel every task, so
 * destructors end remote commands and release locks; a second SIGINT leaves at once.
 * SIGPIPE gets a handler that does nothing: writes then fail with EPIPE, which callers
 * handle, and children (which get default dispositions back on exec) are not affected as
 * they would be by SIG_IGN. A task busy in Lua never reaches poll(), so the handler also
 * sets a hook on the running coroutine (lua.c's technique) that cancels from inside it. */

static const int CAUGHT[CS_NSIGNALS] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};

static volatile sig_atomic_t sig_count;
static int sig_fd = -1;

static void on_signal(int signo) {
  int saved = errno;
  if (signo == SIGPIPE) return;
  if (sig_count++ > 0 && signo == SIGINT) _exit(130);  /* second Ctrl-C: leave at once */
  unsigned char b = (unsigned char)signo;
  if (sig_fd >= 0 && write(sig_fd, &b, 1) < 0) { /* pipe full: a signal is pending anyway */ }
  lua_State *co = sig_co;
  if (co) lua_sethook(co, busy_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1000);
  errno = saved;
}

/* Reads the signals the handler queued: the first one names the interruption; each
 * cancels every task. */
static void take_signals(cs_loop *lp) {
  unsigned char b;
  while (lp->sigpipe[0] >= 0 && read(lp->sigpipe[0], &b, 1) == 1) {
    if (!lp->interrupted) lp->interrupted = b;
    cs_loop_cancel_all(lp);
  }
}

/* Runs in a busy task after a signal: cancels everything and raises in the task itself,
 * every 1000 instructions until it yields (a pcall that swallowed the first raise does
 * not keep it running). Destructors and shielded code are left to finish. */
static void busy_hook(lua_State *L, lua_Debug *ar) {
  (void)ar;
  cs_loop *lp = cs_loop_get(L);
  take_signals(lp);
  cs_task *t = lp->current;
  if (!t || t->co != L || !t->cancelled) {
    lua_sethook(L, NULL, 0, 0);
    return;
  }
  if (t->cleanup) return;
  lua_pushliteral(L, "cancelled");
  lua_error(L);
}

int cs_loop_signals_install(cs_loop *lp, struct sigaction old[CS_NSIGNALS]) {
  if (pipe2(lp->sigpipe, O_NONBLOCK | O_CLOEXEC) != 0) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sig_count = 0;
  sig_fd = lp->sigpipe[1];
  for (int i = 0; i < CS_NSIGNALS; i++) sigaction(CAUGHT[i], &sa, &old[i]);
  return 0;
}

void cs_loop_signals_restore(cs_loop *lp, struct sigaction old[CS_NSIGNALS]) {
  for (int i = 0; i < CS_NSIGNALS; i++) sigaction(CAUGHT[i], &old[i], NULL);
  sig_fd = -1;
  sig_co = NULL;
  close(lp->sigpipe[0]);
  close(lp->sigpipe[1]);
  lp->sigpipe[0] = lp->sigpipe[1] = -1;
}

/* Cancels t: a waiting task resumes at once with CS_WAKE_CANCELLED; a task in its
 * destructors is left to finish them. */
void cs_loop_cancel_task(cs_loop *lp, cs_task *t) {
  if (t->state == T_DONE) return;
  t->cancelled = 1;
  if (t->state == T_WAITING && !t->cleanup) make_ready(lp, t, CS_WAKE_CANCELLED);
}

void cs_loop_cancel_all(cs_loop *lp) {
  for (cs_task *t = lp->all_head; t; t = t->anext) cs_loop_cancel_task(lp, t);
}

/* ---- one turn: poll fds and timers, wake what is due -------------------------------- */

static int poll_once(lua_State *L, cs_loop *lp) {
  size_t n = 1;
  for (cs_task *t = lp->fd_head; t; t = t->fdnext) n++;
  if (n > lp->pfd_cap) {
    struct pollfd *p = realloc(lp->pfds, n * sizeof *p);
    if (!p) return luaL_error(L, "out of memory");
    lp->pfds = p;
    cs_task **pt = realloc(lp->pfd_task, n * sizeof *pt);
    if (!pt) return luaL_error(L, "out of memory");
    lp->pfd_task = pt;
    lp->pfd_cap = n;
  }
  lp->pfds[0] = (struct pollfd){.fd = lp->sigpipe[0], .events = POLLIN};
  n = 1;
  for (cs_task *t = lp->fd_head; t; t = t->fdnext, n++) {
    lp->pfds[n] = (struct pollfd){.fd = t->fd, .events = t->events};
    lp->pfd_task[n] = t;
  }
  int timeout = -1;
  if (lp->ready_head) timeout = 0;
  else if (lp->heap_len) {
    double d = lp->heap[0]->deadline - cs_now();
    timeout = d <= 0 ? 0 : (int)ceil(d * 1000.0);
  } else if (n == 1) {
    return 0;  /* nothing can ever wake the waiting tasks */
  }
  int r = poll(lp->pfds, n, timeout);
  if (r < 0 && errno != EINTR) return luaL_error(L, "poll: %s", strerror(errno));
  if (r > 0) {
    if (lp->pfds[0].revents) take_signals(lp);
    for (size_t i = 1; i < n; i++) {
      cs_task *t = lp->pfd_task[i];
      if (!lp->pfds[i].revents || t->state != T_WAITING) continue;
      t->revents = lp->pfds[i].revents;
      if (t->q) cs_waitq_wake(L, t->q); else make_ready(lp, t, CS_WAKE_READY);
    }
  }
  double now = cs_now();
  while (lp->heap_len && lp->heap[0]->deadline <= now)
    make_ready(lp, lp->heap[0], CS_WAKE_TIMEOUT);
  return 1;
}

/* Runs until every task has ended. */
void cs_loop_run_all(lua_State *L, cs_loop *lp) {
  while (lp->live > 0) {
    /* resume only what is ready now; tasks made ready meanwhile wait for the next turn */
    cs_task *end = lp->ready_tail;
    while (lp->ready_head) {
      cs_task *t = lp->ready_head;
      lp->ready_head = t->rnext;
      if (!lp->ready_head) lp->ready_tail = NULL;
      resume(L, lp, t);
      if (t == end) break;
    }
    if (lp->live == 0) break;
    if (!poll_once(L, lp)) {
      /* deadlock: tasks wait on queues nobody will wake; cancel them so they unwind */
      cs_task *t = lp->all_head;
      for (; t; t = t->anext) {
        if (t->state == T_WAITING) {
          t->cancelled = 1;
          make_ready(lp, t, CS_WAKE_CANCELLED);
        }
      }
    }
  }
}


/* proc.c - child processes on the loop: spawn with pipes, reads, writes and exits that yield. */
#include "cs.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#define PROC_MT "cargoship.proc"
#define READ_MAX 65536
/* After SIGKILL a process ends at once unless it sleeps in the kernel (D state); we give it
 * this long, without yielding, before leaving it to a later reap (see take_strays). */
#define KILL_GRACE_MS 1000
#define MAX_STRAYS 64

enum { S_IN, S_OUT, S_ERR };
enum { M_PIPE, M_NULL, M_INHERIT, M_STDOUT };

typedef struct {
  pid_t pid;              /* 0 before the spawn */
  int pidfd;              /* -1: its end is learnt from the SIGCHLD self-pipe */
  int fd[3];              /* our ends: stdin (write), stdout, stderr (read); -1 absent or closed */
  int piped[3];
  int busy[3];            /* a task waits on fd[i]: it is neither closed nor shared under it */
  int busy_exit;          /* a task waits for the exit: the pidfd stays open */
  int reaped, lost, status, closed;
  char name[64];          /* argv[0], for messages */
} cs_proc;

/* Tests set this to take the SIGCHLD path a kernel without pidfd_open (< 5.3) takes. */
int cs_proc_force_sigchld;

/* ---- the SIGCHLD self-pipe (only when pidfd_open is unavailable) ------------------------ */

static int chld_pipe[2] = {-1, -1};
static cs_waitq chld_q;
static struct sigaction chld_old;

static void on_sigchld(int signo, siginfo_t *info, void *uc) {
  int saved = errno;
  if (write(chld_pipe[1], "c", 1) < 0) { /* full: a wake-up is pending anyway */ }
  if (chld_old.sa_flags & SA_SIGINFO) {
    if (chld_old.sa_sigaction) chld_old.sa_sigaction(signo, info, uc);
  } else if (chld_old.sa_handler != SIG_DFL && chld_old.sa_handler != SIG_IGN) {
    chld_old.sa_handler(signo);
  }
  errno = saved;
}

/* Installs the handler once for the process's life; 0 or -1 with errno. */
static int chld_setup(void) {
  if (chld_pipe[0] >= 0) return 0;
  if (pipe2(chld_pipe, O_NONBLOCK | O_CLOEXEC) != 0) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigchld;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&sa.sa_mask);
  return sigaction(SIGCHLD, &sa, &chld_old);
}

/* Empties the self-pipe before a reap is tried: an exit after it writes a new byte. */
static void chld_drain(void) {
  char buf[64];
  while (chld_pipe[0] >= 0 && read(chld_pipe[0], buf, sizeof buf) > 0) continue;
}

/* ---- reaping ------------------------------------------------------------------------------ */

/* Processes killed whose exit did not come within KILL_GRACE_MS: reaped at a later spawn. */
static pid_t strays[MAX_STRAYS];
static int nstrays;

static void take_strays(void) {
  for (int i = 0; i < nstrays;) {
    pid_t r = waitpid(strays[i], NULL, WNOHANG);
    if (r == 0) i++; else strays[i] = strays[--nstrays];
  }
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* Collects p's exit status if it has ended; 1 once reaped. */
static int try_reap(cs_proc *p) {
  if (p->reaped || p->pid <= 0) return p->reaped;
  int st;
  pid_t r;
  do r = waitpid(p->pid, &st, WNOHANG); while (r < 0 && errno == EINTR);
  if (r == 0) return 0;
  p->reaped = 1;
  if (r == p->pid) p->status = st;
  else p->lost = 1;   /* ECHILD: somebody else reaped it (SIGCHLD set to SIG_IGN by a library) */
  if (!p->busy_exit) close_fd(&p->pidfd);
  return 1;
}

/* Kills p's whole process group (the child leads its own session) and reaps the child,
 * without yielding. The group is signalled only before the reap: until then the child's
 * zombie holds the group id, so the signal cannot reach a stranger's group. */
static void terminate(cs_proc *p) {
  if (p->pid <= 0 || try_reap(p)) return;
  kill(-p->pid, SIGKILL);
  if (p->pidfd >= 0) {
    struct pollfd pfd = {.fd = p->pidfd, .events = POLLIN};
    while (poll(&pfd, 1, KILL_GRACE_MS) < 0 && errno == EINTR) continue;
  } else {
    for (int ms = 0; ms < KILL_GRACE_MS && !try_reap(p); ms++)
      nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
  }
  if (try_reap(p)) return;
  if (nstrays < MAX_STRAYS) strays[nstrays++] = p->pid;
  else waitpid(p->pid, NULL, 0);   /* 64 unkillable children: nothing better is left */
  p->reaped = p->lost = 1;
}

/* ---- the object ----------------------------------------------------------------------------- */

static cs_proc *check_proc(lua_State *L) {
  cs_proc *p = luaL_checkudata(L, 1, PROC_MT);
  if (p->closed) luaL_error(L, "attempt to use a closed process");
  return p;
}

/* Kills and reaps the child if it still runs, closes what no task waits on.
 * __gc, __close and p:close(); no task can wait on p when it is collected. */
static void proc_close(cs_proc *p) {
  terminate(p);
  for (int i = 0; i < 3; i++) if (!p->busy[i]) close_fd(&p->fd[i]);
  if (!p->busy_exit) close_fd(&p->pidfd);
  p->closed = 1;
}

static int l_proc_close(lua_State *L) {
  proc_close(luaL_checkudata(L, 1, PROC_MT));
  return 0;
}

static int l_proc_pid(lua_State *L) {
  lua_pushinteger(L, check_proc(L)->pid);
  return 1;
}

static int l_proc_tostring(lua_State *L) {
  cs_proc *p = luaL_checkudata(L, 1, PROC_MT);
  lua_pushfstring(L, "process %d (%s)%s", (int)p->pid, p->name, p->reaped ? " ended" : "");
  return 1;
}

/* A signal by number or name ("TERM", "SIGTERM").  [-0, +0, v] */
static int check_signal(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TNUMBER) return (int)luaL_checkinteger(L, idx);
  const char *name = luaL_optstring(L, idx, "TERM");
  if (strncmp(name, "SIG", 3) == 0) name += 3;
  for (int s = 1; s < NSIG; s++) {
    const char *abbrev = sigabbrev_np(s);
    if (abbrev && strcmp(abbrev, name) == 0) return s;
  }
  return luaL_argerror(L, idx, lua_pushfstring(L, "unknown signal '%s'", name));
}

/* p:kill([sig]) -> true | false when the child was already reaped | nil, msg, "io"
 * Signals the whole process group (default TERM); p:wait() collects the exit. */
static int l_proc_kill(lua_State *L) {
  cs_proc *p = check_proc(L);
  int sig = check_signal(L, 2);
  if (try_reap(p)) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (kill(-p->pid, sig) != 0) return cs_fail(L, p->name, "kill", strerror(errno), "io");
  lua_pushboolean(L, 1);
  return 1;
}

/* p:close_stdin(): the child reads end of file. */
static int l_proc_close_stdin(lua_State *L) {
  cs_proc *p = check_proc(L);
  if (p->busy[S_IN]) return luaL_error(L, "%s: close_stdin: a task is writing to it", p->name);
  close_fd(&p->fd[S_IN]);
  return 0;
}

/* ---- waiting for the exit ------------------------------------------------------------------- */

/* Stack while waiting: [p, timeout, deadline]. */
static int wait_k(lua_State *L, int status, lua_KContext ctx);

/* Pushes how the reaped child ended, as p:wait returns it.  [-0, +1|2|3, m] */
static int push_exit(lua_State *L, cs_proc *p) {
  if (p->lost) return cs_fail(L, p->name, "wait", "its exit status was collected elsewhere", "io");
  if (WIFSIGNALED(p->status)) {
    int sig = WTERMSIG(p->status);
    const char *name = sigabbrev_np(sig);
    lua_pushinteger(L, 128 + sig);
    if (name) lua_pushstring(L, name); else lua_pushfstring(L, "%d", sig);
    return 2;
  }
  lua_pushinteger(L, WEXITSTATUS(p->status));
  return 1;
}

/* Reaps, or yields until the exit may have come (pidfd readable, or a SIGCHLD byte).  [-0, +(1..3), e] */
static int wait_step(lua_State *L, cs_proc *p) {
  if (p->pidfd < 0) chld_drain();
  if (try_reap(p)) return push_exit(L, p);
  double deadline = lua_tonumber(L, 3);
  if (deadline > 0 && cs_now() >= deadline)
    return cs_fail(L, p->name, "wait", "timed out", "timeout");
  p->busy_exit = 1;
  if (p->pidfd >= 0) return cs_wait(L, p->pidfd, POLLIN, NULL, deadline, 0, wait_k);
  return cs_wait(L, chld_pipe[0], POLLIN, &chld_q, deadline, 0, wait_k);
}

static int wait_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  cs_proc *p = luaL_checkudata(L, 1, PROC_MT);
  p->busy_exit = 0;
  int w = cs_wake_status(L);
  if (w == CS_WAKE_CANCELLED) {
    terminate(p);
    return cs_raise_cancelled(L);
  }
  if (p->closed) close_fd(&p->pidfd);
  if (w == CS_WAKE_TIMEOUT) {
    if (try_reap(p)) return push_exit(L, p);
    return cs_fail(L, p->name, "wait", "timed out", "timeout");
  }
  return wait_step(L, p);
}

/* p:wait([timeout]) -> code [, signal] | nil, msg, "timeout"|"io"
 * code is the exit status, or 128 + the signal's number when a signal ended it, with the
 * signal's name ("TERM") second. Yields; cancelled, it kills the process group and reaps. */
static int l_proc_wait(lua_State *L) {
  cs_proc *p = check_proc(L);
  double timeout = luaL_optnumber(L, 2, -1);
  cs_loop_running_task(L);
  if (p->busy_exit) return luaL_error(L, "%s: wait: another task is waiting for it", p->name);
  lua_settop(L, 2);
  lua_pushnumber(L, timeout >= 0 ? cs_now() + timeout : 0);
  return wait_step(L, p);
}

/* ---- reading and writing -------------------------------------------------------------------- */

/* Stack while reading: [p, which, max, deadline]. */
static int read_k(lua_State *L, int status, lua_KContext ctx);

/* Reads what is there, or yields until the pipe is readable.  [-0, +(1..3), e] */
static int read_step(lua_State *L, cs_proc *p, int i) {
  /* not a luaL_Buffer: dropping its box with lua_settop trips Lua 5.4.4's settop bug */
  static char buf[READ_MAX];
  size_t max = (size_t)lua_tointeger(L, 3);
  if (p->fd[i] < 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  ssize_t r;
  do r = read(p->fd[i], buf, max < sizeof buf ? max : sizeof buf); while (r < 0 && errno == EINTR);
  if (r > 0) {
    lua_pushlstring(L, buf, (size_t)r);
    return 1;
  }
  if (r == 0) {
    close_fd(&p->fd[i]);
    lua_pushliteral(L, "");
    return 1;
  }
  if (errno != EAGAIN) return cs_fail(L, p->name, i == S_OUT ? "read stdout" : "read stderr", strerror(errno), "io");
  double deadline = lua_tonumber(L, 4);
  if (deadline > 0 && cs_now() >= deadline)
    return cs_fail(L, p->name, i == S_OUT ? "read stdout" : "read stderr", "timed out", "timeout");
  p->busy[i] = 1;
  return cs_wait(L, p->fd[i], POLLIN, NULL, deadline, (lua_KContext)i, read_k);
}

static int read_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  cs_proc *p = luaL_checkudata(L, 1, PROC_MT);
  int i = (int)ctx;
  p->busy[i] = 0;
  int w = cs_wake_status(L);
  if (w == CS_WAKE_CANCELLED) {
    terminate(p);
    return cs_raise_cancelled(L);
  }
  if (w == CS_WAKE_TIMEOUT)
    return cs_fail(L, p->name, i == S_OUT ? "read stdout" : "read stderr", "timed out", "timeout");
  return read_step(L, p, i);
}

/* p:read("stdout"|"stderr" [, max [, timeout]]) -> data | "" at end of file | nil, msg, code
 * At most max bytes (default and cap 65536) of what is there; yields while there is nothing. */
static int l_proc_read(lua_State *L) {
  static const char *const which[] = {"stdout", "stderr", NULL};
  cs_proc *p = check_proc(L);
  int i = luaL_checkoption(L, 2, NULL, which) + 1;
  lua_Integer max = luaL_optinteger(L, 3, READ_MAX);
  double timeout = luaL_optnumber(L, 4, -1);
  luaL_argcheck(L, max > 0, 3, "must be positive");
  cs_loop_running_task(L);
  if (!p->piped[i]) return luaL_error(L, "%s: read: %s is not a pipe", p->name, which[i - 1]);
  if (p->busy[i]) return luaL_error(L, "%s: read: another task is reading %s", p->name, which[i - 1]);
  lua_settop(L, 3);
  lua_pushinteger(L, max);
  lua_replace(L, 3);
  lua_pushnumber(L, timeout >= 0 ? cs_now() + timeout : 0);
  return read_step(L, p, i);
}

/* Stack while writing: [p, data, deadline, offset]. */
static int write_k(lua_State *L, int status, lua_KContext ctx);

/* Writes from the offset at 4 on, or yields until the pipe has room.  [-0, +(1..3), e] */
static int write_step(lua_State *L, cs_proc *p) {
  size_t len;
  const char *data = lua_tolstring(L, 2, &len);
  size_t off = (size_t)lua_tointeger(L, 4);
  while (off < len) {
    ssize_t w = write(p->fd[S_IN], data + off, len - off);
    if (w > 0) {
      off += (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      lua_pushinteger(L, (lua_Integer)off);
      lua_replace(L, 4);
      double deadline = lua_tonumber(L, 3);
      if (deadline > 0 && cs_now() >= deadline) return cs_fail(L, p->name, "write stdin", "timed out", "timeout");
      p->busy[S_IN] = 1;
      return cs_wait(L, p->fd[S_IN], POLLOUT, NULL, deadline, 0, write_k);
    }
    /* the loop's SIGPIPE handler does nothing: a child that stopped reading is EPIPE */
    if (errno == EPIPE) return cs_fail(L, p->name, "write stdin", "the process closed its input", "closed");
    return cs_fail(L, p->name, "write stdin", strerror(errno), "io");
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int write_k(lua_State *L, int status, lua_KContext ctx) {
  (void)status; (void)ctx;
  cs_proc *p = luaL_checkudata(L, 1, PROC_MT);
  p->busy[S_IN] = 0;
  int w = cs_wake_status(L);
  if (w == CS_WAKE_CANCELLED) {
    terminate(p);
    return cs_raise_cancelled(L);
  }
  if (w == CS_WAKE_TIMEOUT) return cs_fail(L, p->name, "write stdin", "timed out", "timeout");
  return write_step(L, p);
}

/* p:write(data [, timeout]) -> true | nil, msg, "closed"|"timeout"|"io"
 * Writes all of data to the child's stdin, yielding while the pipe is full. */
static int l_proc_write(lua_State *L) {
  cs_proc *p = check_proc(L);
  luaL_checkstring(L, 2);
  double timeout = luaL_optnumber(L, 3, -1);
  cs_loop_running_task(L);
  if (!p->piped[S_IN]) return luaL_error(L, "%s: write: stdin is not a pipe", p->name);
  if (p->fd[S_IN] < 0) return luaL_error(L, "%s: write: stdin is closed", p->name);
  if (p->busy[S_IN]) return luaL_error(L, "%s: write: another task is writing", p->name);
  lua_settop(L, 2);
  lua_pushnumber(L, timeout >= 0 ? cs_now() + timeout : 0);
  lua_pushinteger(L, 0);
  return write_step(L, p);
}

/* ---- spawning --------------------------------------------------------------------------------- */

/* Options table at 1. Pushes a NULL-terminated char* array (a userdata) built from the list
 * at field `argv`; its strings stay anchored by that table.  [-0, +1, v] */
static char **build_argv(lua_State *L) {
  if (lua_getfield(L, 1, "argv") != LUA_TTABLE) luaL_error(L, "proc.spawn: argv must be a list of strings");
  int t = lua_gettop(L);
  lua_Integer n = luaL_len(L, t);
  if (n < 1) luaL_error(L, "proc.spawn: argv is empty");
  char **argv = lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *argv, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_rawgeti(L, t, i) != LUA_TSTRING) luaL_error(L, "proc.spawn: argv[%d] is not a string", (int)i);
    argv[i - 1] = (char *)lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  argv[n] = NULL;
  lua_remove(L, t);   /* the options table still holds the argv table */
  return argv;
}

/* The child's environment: ours, with the table at field `env` laid over it (false removes a
 * variable), or that table alone when `clear_env` is true. Pushes one value that keeps the
 * array and its strings alive; returns environ itself when nothing changes.  [-0, +1, v] */
static char **build_env(lua_State *L) {
  int clear = lua_getfield(L, 1, "clear_env") != LUA_TNIL && lua_toboolean(L, -1);
  lua_pop(L, 1);
  int et = lua_getfield(L, 1, "env");
  if (et == LUA_TNIL && !clear) return environ;
  if (et == LUA_TNIL) {
    lua_pop(L, 1);
    lua_newtable(L);
  } else if (et != LUA_TTABLE) {
    luaL_error(L, "proc.spawn: env must be a table");
  }
  int e = lua_gettop(L);
  size_t n = 0, ours = 0;
  for (lua_pushnil(L); lua_next(L, e); lua_pop(L, 1)) {
    if (lua_type(L, -2) != LUA_TSTRING || strchr(lua_tostring(L, -2), '=') || !*lua_tostring(L, -2))
      luaL_error(L, "proc.spawn: env keys must be variable names");
    if (lua_type(L, -1) != LUA_TSTRING && !(lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1)))
      luaL_error(L, "proc.spawn: env.%s must be a string or false", lua_tostring(L, -2));
    n++;
  }
  if (!clear) for (char **v = environ; *v; v++) ours++;
  char **envp = lua_newuserdatauv(L, (n + ours + 1) * sizeof *envp, 1);
  lua_newtable(L);   /* the "K=V" strings we make */
  int anchor = lua_gettop(L);
  size_t k = 0;
  for (size_t i = 0; i < ours; i++) {
    const char *eq = strchr(environ[i], '=');
    if (!eq) continue;
    lua_pushlstring(L, environ[i], (size_t)(eq - environ[i]));
    int overridden = lua_rawget(L, e) != LUA_TNIL;
    lua_pop(L, 1);
    if (!overridden) envp[k++] = environ[i];
  }
  for (lua_pushnil(L); lua_next(L, e); lua_pop(L, 1)) {
    if (lua_type(L, -1) != LUA_TSTRING) continue;
    envp[k++] = (char *)lua_pushfstring(L, "%s=%s", lua_tostring(L, -2), lua_tostring(L, -1));
    lua_rawseti(L, anchor, (lua_Integer)k);
  }
  envp[k] = NULL;
  lua_setiuservalue(L, e + 1, 1);   /* the array keeps its strings */
  lua_remove(L, e);
  return envp;
}

/* The mode of stdin/stdout/stderr from the options table at 1.  [-0, +0, v] */
static int stream_mode(lua_State *L, const char *field, int def) {
  static const char *const modes[] = {"pipe", "null", "inherit", "stdout"};
  int m = def;
  if (lua_getfield(L, 1, field) != LUA_TNIL) {
    const char *s = lua_tostring(L, -1);
    for (m = 0; m < 4 && !(s && strcmp(s, modes[m]) == 0); m++) continue;
    if (m == 4 || (m == M_STDOUT && strcmp(field, "stderr") != 0))
      luaL_error(L, "proc.spawn: %s must be \"pipe\", \"null\" or \"inherit\"%s", field,
                 strcmp(field, "stderr") == 0 ? " or \"stdout\"" : "");
  }
  lua_pop(L, 1);
  return m;
}

/* Sets up the child's fd `target` in fa; a pipe's ends go to ends[0] (child), ends[1] (ours).
 * 0 or an errno. */
static int plan_stream(posix_spawn_file_actions_t *fa, int target, int mode, int ends[2]) {
  if (mode == M_INHERIT) return 0;
  if (mode == M_STDOUT) return posix_spawn_file_actions_adddup2(fa, 1, 2);
  if (mode == M_NULL) return posix_spawn_file_actions_addopen(fa, target, "/dev/null", target ? O_WRONLY : O_RDONLY, 0);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return errno;
  ends[0] = target ? fds[1] : fds[0];
  ends[1] = target ? fds[0] : fds[1];
  if (fcntl(ends[1], F_SETFL, O_NONBLOCK) != 0) return errno;
  return posix_spawn_file_actions_adddup2(fa, ends[0], target);
}

/* Starts the child: its own session, signals at their defaults, the pipes asked for. */
static int start(cs_proc *p, char **argv, char **envp, const char *cwd, const int mode[3], int child[3]) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t none, all;
  int err = posix_spawn_file_actions_init(&fa);
  if (err) return err;
  if ((err = posix_spawnattr_init(&at)) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    return err;
  }
  sigemptyset(&none);
  sigfillset(&all);
  err = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  if (!err) err = posix_spawnattr_setsigmask(&at, &none);
  if (!err) err = posix_spawnattr_setsigdefault(&at, &all);
  for (int i = 0; i < 3 && !err; i++) {
    int ends[2] = {-1, -1};
    err = plan_stream(&fa, i, mode[i], ends);
    child[i] = ends[0];
    p->fd[i] = ends[1];
    p->piped[i] = mode[i] == M_PIPE;
  }
  if (!err && cwd) err = posix_spawn_file_actions_addchdir_np(&fa, cwd);
  if (!err) err = posix_spawnp(&p->pid, argv[0], &fa, &at, argv, envp);
  if (err) p->pid = 0;
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  return err;
}

/* proc.spawn{argv = {...}, env = {K = V | false}, clear_env = false, cwd = nil,
 *            stdin = "null", stdout = "pipe", stderr = "pipe" | "stdout"}
 *   -> process | nil, "argv0: spawn: detail", "missing"|"io"
 * Streams are "pipe", "null" or "inherit". The child leads a new session (so its process
 * group is killed whole, and a terminal's Ctrl-C reaches us, not it), with every signal at
 * its default and none blocked. argv[0] is searched in our PATH. "missing": no such program. */
static int l_proc_spawn(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  char **argv = build_argv(L);
  char **envp = build_env(L);
  int mode[3] = {stream_mode(L, "stdin", M_NULL), stream_mode(L, "stdout", M_PIPE), stream_mode(L, "stderr", M_PIPE)};
  const char *cwd = NULL;
  int ct = lua_getfield(L, 1, "cwd");
  if (ct != LUA_TNIL && ct != LUA_TSTRING) return luaL_error(L, "proc.spawn: cwd must be a string");
  if (ct == LUA_TSTRING) cwd = lua_tostring(L, -1);
  struct stat st;
  if (cwd && stat(cwd, &st) != 0) return cs_fail(L, cwd, "spawn", strerror(errno), "io");
  if (cwd && !S_ISDIR(st.st_mode)) return cs_fail(L, cwd, "spawn", "not a directory", "io");
  cs_proc *p = lua_newuserdatauv(L, sizeof *p, 0);
  memset(p, 0, sizeof *p);
  p->pidfd = p->fd[0] = p->fd[1] = p->fd[2] = -1;
  snprintf(p->name, sizeof p->name, "%s", argv[0]);
  luaL_setmetatable(L, PROC_MT);
  take_strays();
  int use_sigchld = cs_proc_force_sigchld;
  if (use_sigchld && chld_setup() != 0) return cs_fail(L, p->name, "spawn", strerror(errno), "io");
  int child[3] = {-1, -1, -1};
  int err = start(p, argv, envp, cwd, mode, child);
  for (int i = 0; i < 3; i++) close_fd(&child[i]);
  if (err) {
    proc_close(p);
    return cs_fail(L, p->name, "spawn", strerror(err), err == ENOENT ? "missing" : "io");
  }
  if (!use_sigchld) p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
  if (p->pidfd < 0 && chld_setup() != 0) {
    proc_close(p);
    return cs_fail(L, p->name, "spawn", "neither pidfd_open nor a SIGCHLD pipe is available", "io");
  }
  return 1;
}

static const luaL_Reg proc_methods[] = {
  {"read", l_proc_read},
  {"write", l_proc_write},
  {"close_stdin", l_proc_close_stdin},
  {"wait", l_proc_wait},
  {"kill", l_proc_kill},
  {"pid", l_proc_pid},
  {"close", l_proc_close},
  {NULL, NULL}
};

static const luaL_Reg proc_funcs[] = {
  {"spawn", l_proc_spawn},
  {NULL, NULL}
};

int luaopen_cargoship_proc(lua_State *L) {
  if (luaL_newmetatable(L, PROC_MT)) {
    lua_newtable(L);
    luaL_setfuncs(L, proc_methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_proc_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_proc_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, l_proc_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  luaL_newlib(L, proc_funcs);
  return 1;
}

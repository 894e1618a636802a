/* term.c - line editing for the repl: libedit's readline callback interface, fed by the loop. */
#include "cs.h"

#include <editline/readline.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

/* The caller waits for fd 0 with loop.wait_fd and then hands one keystroke to libedit
 * (ed:read_char), so the loop keeps every other task running while the prompt waits.
 * libedit's readline emulation is a single global editor: one cargoship.editor at a time.
 *
 * What Debian's libedit-dev (3.1-20221030, <editline/readline.h>) emulates and we use:
 * rl_callback_handler_install / rl_callback_read_char / rl_callback_handler_remove (the
 * handler's removal cooks the terminal, its installation makes it raw and draws the
 * prompt), add_history / read_history / write_history / stifle_history,
 * rl_attempted_completion_function + rl_completion_matches, rl_add_defun (a key bound to a
 * C function), rl_parse_and_bind (passes editline commands: setty, bind), rl_catch_signals
 * (read once by rl_initialize). Declared but "not implemented" there: rl_cleanup_after_signal,
 * rl_free_line_state, keymaps; rl_bind_key binds rl_insert only. */
#define EDITOR_MT "cargoship.editor"

enum { ST_NONE, ST_LINE, ST_EOF, ST_INTR };

typedef struct {
  int open;               /* libedit initialised, termios saved */
  int reading;            /* callback handler installed: raw mode, prompt shown */
  int trapped;            /* SIGINT goes to intr_pipe, not to the loop */
  struct termios saved;   /* the terminal as we found it */
  int have_saved;
  int complete_ref;       /* registry: function(word, line, start, stop) -> {candidates} */
  char *history;          /* history file, or NULL */
  int intr_pipe[2];
  struct sigaction old_int;
} cs_editor;

static cs_editor *active;
/* What the callbacks saw during one rl_callback_read_char; read back by read_char. */
static int state;
static char *done_line;
/* The task that called read_char: the completion callback runs Lua on it (cannot yield). */
static lua_State *complete_L;
static char **cands;
static size_t ncands, next_cand;
static volatile sig_atomic_t intr_count;
static int intr_wfd = -1;
static struct sigaction *intr_next;

/* Word breaks for Lua: '.' and ':' stay inside a word, so "h1.facts.os" completes as a path. */
static const char BREAKS[] = " \t\n\"\\'`@$><=;|&{}(),[]+-*/%^~#";

static cs_editor *check_editor(lua_State *L) {
  cs_editor *ed = luaL_checkudata(L, 1, EDITOR_MT);
  if (!ed->open) luaL_error(L, "editor: closed");
  return ed;
}

static void on_line(char *line) {
  if (line == NULL) {
    state = ST_EOF;
    return;
  }
  free(done_line);
  done_line = line;
  state = ST_LINE;
}

/* Bound to Ctrl-C (the terminal's ISIG is off while editing): drop the line, not the run. */
static int on_interrupt(int count, int key) {
  (void)count; (void)key;
  state = ST_INTR;
  return 0;
}

static void free_cands(void) {
  for (size_t i = next_cand; i < ncands; i++) free(cands[i]);
  free(cands);
  cands = NULL;
  ncands = next_cand = 0;
}

static char *next_candidate(const char *text, int st) {
  (void)text; (void)st;
  if (next_cand >= ncands) return NULL;
  return cands[next_cand++];   /* libedit owns (and frees) what we hand it */
}

/* Asks the Lua callback; leaves its candidates in cands.  [-0, +0, -] */
static void ask_lua(lua_State *L, int ref, const char *text, int start, int end) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
  lua_pushstring(L, text);
  lua_pushstring(L, rl_line_buffer ? rl_line_buffer : "");
  lua_pushinteger(L, start);
  lua_pushinteger(L, end);
  /* a failing completer completes nothing; the prompt must survive it */
  if (lua_pcall(L, 4, 1, 0) != LUA_OK || !lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  lua_Integer n = luaL_len(L, -1);
  cands = calloc(n > 0 ? (size_t)n : 1, sizeof *cands);
  for (lua_Integer i = 1; cands && i <= n; i++) {
    lua_rawgeti(L, -1, i);
    const char *s = lua_tostring(L, -1);
    if (s && (cands[ncands] = strdup(s)) != NULL) ncands++;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

static char **on_complete(const char *text, int start, int end) {
  rl_attempted_completion_over = 1;   /* never fall back to file names */
  if (!active || !complete_L || active->complete_ref == LUA_NOREF) return NULL;
  free_cands();
  ask_lua(complete_L, active->complete_ref, text, start, end);
  char **matches = ncands ? rl_completion_matches(text, next_candidate) : NULL;
  free_cands();
  return matches;
}

/* ---- SIGINT while the repl evaluates --------------------------------------------- */

/* The first Ctrl-C asks the repl to stop what it evaluates; the next ones go to the
 * handler we displaced (the loop's: cancel everything, then leave). */
static void on_sigint(int signo) {
  int saved = errno;
  if (intr_count++ == 0 && intr_wfd >= 0) {
    unsigned char b = 1;
    if (write(intr_wfd, &b, 1) < 0) { /* pipe full: an interrupt is pending anyway */ }
  } else if (intr_next && intr_next->sa_handler != SIG_DFL && intr_next->sa_handler != SIG_IGN) {
    intr_next->sa_handler(signo);
  } else if (!intr_next || intr_next->sa_handler == SIG_DFL) {
    signal(signo, SIG_DFL);
    raise(signo);
  }
  errno = saved;
}

static void drain(int fd) {
  unsigned char buf[64];
  while (read(fd, buf, sizeof buf) > 0) {}
}

static void untrap(cs_editor *ed) {
  if (!ed->trapped) return;
  sigaction(SIGINT, &ed->old_int, NULL);
  intr_wfd = -1;
  intr_next = NULL;
  drain(ed->intr_pipe[0]);
  ed->trapped = 0;
}

static void stop_reading(cs_editor *ed) {
  if (!ed->reading) return;
  rl_callback_handler_remove();
  ed->reading = 0;
}

static void close_editor(lua_State *L, cs_editor *ed) {
  if (!ed->open) return;
  untrap(ed);
  if (ed->reading) {
    /* leaving with a prompt on screen (SIGTERM): what follows starts on a line of its own */
    stop_reading(ed);
    fputc('\n', stdout);
    fflush(stdout);
  }
  if (ed->have_saved) tcsetattr(STDIN_FILENO, TCSADRAIN, &ed->saved);
  luaL_unref(L, LUA_REGISTRYINDEX, ed->complete_ref);
  ed->complete_ref = LUA_NOREF;
  free(ed->history);
  ed->history = NULL;
  close(ed->intr_pipe[0]);
  close(ed->intr_pipe[1]);
  free(done_line);
  done_line = NULL;
  ed->open = 0;
  if (active == ed) active = NULL;
}

/* ---- Lua API ------------------------------------------------------------------------ */

/* term.editor{history = path, history_size = n, complete = fn} -> editor
 * Raises when stdin is not a terminal or another editor is open. A history file that
 * does not exist yet is not an error; one that cannot be read starts an empty history. */
static int l_term_editor(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (active) return luaL_error(L, "term.editor: an editor is already open (libedit has one)");
  if (!isatty(STDIN_FILENO)) return luaL_error(L, "term.editor: stdin is not a terminal");
  /* A host program linked with GNU readline (Debian's lua5.4) wins the rl_* symbols, and
   * mixing the two libraries crashes: only libedit's emulation is driven here. */
  if (!rl_library_version || strncmp(rl_library_version, "EditLine", 8) != 0)
    return luaL_error(L, "term.editor: rl_* resolve to %s, not libedit, in this process; "
                      "use the cargoship executable", rl_library_version ? rl_library_version : "?");
  lua_getfield(L, 1, "history");
  const char *history = luaL_optstring(L, -1, NULL);
  lua_getfield(L, 1, "history_size");
  lua_Integer size = luaL_optinteger(L, -1, 1000);
  lua_getfield(L, 1, "complete");
  if (!lua_isnil(L, -1)) luaL_checktype(L, -1, LUA_TFUNCTION);
  cs_editor *ed = lua_newuserdatauv(L, sizeof *ed, 0);
  memset(ed, 0, sizeof *ed);
  ed->complete_ref = LUA_NOREF;
  if (pipe2(ed->intr_pipe, O_NONBLOCK | O_CLOEXEC) != 0) return luaL_error(L, "term.editor: pipe: %s", strerror(errno));
  luaL_setmetatable(L, EDITOR_MT);
  ed->open = 1;
  ed->have_saved = tcgetattr(STDIN_FILENO, &ed->saved) == 0;
  if (history) ed->history = strdup(history);
  lua_pushvalue(L, -2);
  ed->complete_ref = lua_isnil(L, -1) ? (lua_pop(L, 1), LUA_NOREF) : luaL_ref(L, LUA_REGISTRYINDEX);
  active = ed;
  rl_readline_name = "cargoship";
  /* libedit's own handlers re-raise a signal with kill(0, ...), i.e. at our whole process
   * group (a script that started us included); the loop's handlers are the ones to run */
  rl_catch_signals = 0;
  rl_initialize();
  rl_attempted_completion_function = on_complete;
  rl_basic_word_break_characters = BREAKS;
  rl_completion_append_character = '\0';
  rl_completion_query_items = 500;
  /* Ctrl-C at the prompt discards the line (bound below); it must not reach the loop,
   * whose SIGINT cancels the whole session */
  rl_parse_and_bind("setty -d -isig");
  rl_add_defun("cargoship-interrupt", on_interrupt, 3);
  /* Ctrl-Z would stop us in raw mode with no handler to restore the terminal */
  rl_parse_and_bind("bind ^Z ed-unassigned");
  stifle_history(size > 0 && size < 1000000 ? (int)size : 1000);
  if (ed->history) read_history(ed->history);
  return 1;
}

/* ed:start(prompt): shows the prompt and puts the terminal in raw mode. */
static int l_editor_start(lua_State *L) {
  cs_editor *ed = check_editor(L);
  const char *prompt = luaL_checkstring(L, 2);
  stop_reading(ed);
  state = ST_NONE;
  rl_callback_handler_install(prompt, on_line);
  ed->reading = 1;
  return 0;
}

/* ed:read_char() -> "pending" | "line", text | "eof" | "interrupt"
 * Call when fd 0 is readable. Anything but "pending" ends the line: the prompt is gone
 * and the terminal is cooked again until the next ed:start. */
static int l_editor_read_char(lua_State *L) {
  cs_editor *ed = check_editor(L);
  if (!ed->reading) return luaL_error(L, "editor: read_char before start");
  struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
  /* a hung-up terminal reads nothing for ever, and libedit would say so by not calling us */
  if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLNVAL))) {
    state = ST_EOF;
  } else {
    state = ST_NONE;
    complete_L = L;
    rl_callback_read_char();
    complete_L = NULL;
  }
  if (state == ST_NONE) {
    lua_pushliteral(L, "pending");
    return 1;
  }
  stop_reading(ed);
  if (state == ST_LINE) {
    lua_pushliteral(L, "line");
    lua_pushstring(L, done_line);
    free(done_line);
    done_line = NULL;
    return 2;
  }
  if (state == ST_INTR) {
    fputs("^C\n", stdout);
    fflush(stdout);
    lua_pushliteral(L, "interrupt");
    return 1;
  }
  fputc('\n', stdout);
  fflush(stdout);
  lua_pushliteral(L, "eof");
  return 1;
}

/* ed:stop(): removes the prompt and gives the terminal back in cooked mode. */
static int l_editor_stop(lua_State *L) {
  stop_reading(check_editor(L));
  return 0;
}

static int l_editor_add_history(lua_State *L) {
  check_editor(L);
  add_history(luaL_checkstring(L, 2));
  return 0;
}

/* ed:save_history() -> true | nil, msg, "io"   (the file is the operator's only: 0600) */
static int l_editor_save_history(lua_State *L) {
  cs_editor *ed = check_editor(L);
  if (!ed->history) {
    lua_pushboolean(L, 1);
    return 1;
  }
  mode_t old = umask(077);
  int err = write_history(ed->history);
  umask(old);
  if (err != 0) return cs_fail(L, ed->history, "save history", strerror(err), "io");
  if (chmod(ed->history, 0600) != 0) return cs_fail(L, ed->history, "chmod", strerror(errno), "io");
  lua_pushboolean(L, 1);
  return 1;
}

/* ed:trap_interrupt(on): while on, the first Ctrl-C only makes ed:interrupt_fd() readable. */
static int l_editor_trap_interrupt(lua_State *L) {
  cs_editor *ed = check_editor(L);
  int on = lua_toboolean(L, 2);
  if (!on) {
    untrap(ed);
    return 0;
  }
  if (ed->trapped) return 0;
  drain(ed->intr_pipe[0]);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  intr_count = 0;
  intr_wfd = ed->intr_pipe[1];
  intr_next = &ed->old_int;
  if (sigaction(SIGINT, &sa, &ed->old_int) != 0) {
    intr_wfd = -1;
    intr_next = NULL;
    return luaL_error(L, "editor: sigaction: %s", strerror(errno));
  }
  ed->trapped = 1;
  return 0;
}

static int l_editor_interrupt_fd(lua_State *L) {
  lua_pushinteger(L, check_editor(L)->intr_pipe[0]);
  return 1;
}

/* ed:close(): prompt removed, SIGINT handed back, the terminal as it was found. Idempotent. */
static int l_editor_close(lua_State *L) {
  cs_editor *ed = luaL_checkudata(L, 1, EDITOR_MT);
  close_editor(L, ed);
  return 0;
}

static const luaL_Reg editor_methods[] = {
  {"start", l_editor_start},
  {"read_char", l_editor_read_char},
  {"stop", l_editor_stop},
  {"add_history", l_editor_add_history},
  {"save_history", l_editor_save_history},
  {"trap_interrupt", l_editor_trap_interrupt},
  {"interrupt_fd", l_editor_interrupt_fd},
  {"close", l_editor_close},
  {NULL, NULL}
};

static const luaL_Reg term_funcs[] = {
  {"editor", l_term_editor},
  {NULL, NULL}
};

int luaopen_cargoship_term(lua_State *L) {
  if (luaL_newmetatable(L, EDITOR_MT)) {
    lua_newtable(L);
    luaL_setfuncs(L, editor_methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_editor_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_editor_close);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
  luaL_newlib(L, term_funcs);
  return 1;
}

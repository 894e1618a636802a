/* loop_int.h - the event loop's internals, shared by loop.c (the engine) and loop_lua.c (its Lua API). */
#ifndef CS_LOOP_INT_H
#define CS_LOOP_INT_H

#include "cs.h"

#include <signal.h>
#include <stdint.h>

#define TASK_MT "cargoship.task"
#define LOOP_MT "cargoship.loop"
#define NO_HEAP SIZE_MAX

enum { T_READY, T_RUNNING, T_WAITING, T_DONE };

typedef struct cs_loop cs_loop;

struct cs_task {
  cs_loop *loop;
  lua_State *co;
  int co_ref;            /* registry: the thread, while the task lives */
  int self_ref;          /* registry: this userdata, while the task lives */
  long id;
  int state;
  /* what it waits for */
  int fd;
  short events, revents;
  double deadline;
  size_t heap_idx;
  cs_waitq *q;           /* queue it sits in, if any */
  cs_task *qnext, *qprev;
  cs_task *fdnext, *fdprev; /* list of tasks waiting on a fd */
  cs_task *rnext;        /* ready list */
  cs_task *anext, *aprev; /* all live tasks */
  int wake;              /* CS_WAKE_* to hand to the continuation */
  int cancelled, cleanup;
  /* outcome */
  int ok;
  const char *code;      /* NULL, "error", "cancelled" */
  cs_waitq joiners;
};

struct cs_loop {
  int running;
  long next_id;
  cs_task *current;
  cs_task *main;         /* the task loop.run started; its end cancels the others */
  cs_task *ready_head, *ready_tail;
  cs_task *fd_head;
  cs_task *all_head;
  size_t live;
  cs_task **heap;
  size_t heap_len, heap_cap;
  struct pollfd *pfds;
  cs_task **pfd_task;
  size_t pfd_cap;
  int sigpipe[2];
  int interrupted;
};

/* Uservalue slots of a task: 1 = results table, 2 = destructors (a list). */
enum { UV_RESULTS = 1, UV_DEFERS = 2 };

cs_loop *cs_loop_get(lua_State *L);
int cs_loop_gc(lua_State *L);
cs_task *cs_loop_check_task(lua_State *L, int idx);
cs_task *cs_loop_running_task(lua_State *L);
/* A task running the function at fnidx with the values above it as arguments; pushes it. */
cs_task *cs_loop_spawn(lua_State *L, cs_loop *lp, int fnidx);
/* Runs until every task has ended. */
void cs_loop_run_all(lua_State *L, cs_loop *lp);
void cs_loop_cancel_task(cs_loop *lp, cs_task *t);
void cs_loop_cancel_all(cs_loop *lp);
/* SIGINT, SIGTERM, SIGHUP, SIGQUIT cancel; SIGPIPE is caught and does nothing. */
#define CS_NSIGNALS 5
int cs_loop_signals_install(cs_loop *lp, struct sigaction old[CS_NSIGNALS]);
void cs_loop_signals_restore(cs_loop *lp, struct sigaction old[CS_NSIGNALS]);

#endif

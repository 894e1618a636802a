/* cs.h - shared declarations of the cargoship runtime: families, the wait API, helpers. */
#ifndef CS_H
#define CS_H

#include <lua.h>
#include <lauxlib.h>
#include <stddef.h>

/* Every family's opener; runtime/modules.h lists them for main.c and module.c. */
#define CS_FAMILY(name) int luaopen_cargoship_##name(lua_State *L);
#include "modules.h"
#undef CS_FAMILY

/* ---- the loop (loop.c) ------------------------------------------------------------ */

typedef struct cs_task cs_task;

/* A FIFO of waiting tasks: a session's socket, a gate, a task's joiners. */
typedef struct cs_waitq {
  cs_task *head, *tail;
} cs_waitq;

/* Why a waiting task was resumed. */
enum { CS_WAKE_READY = 0, CS_WAKE_TIMEOUT = 1, CS_WAKE_CANCELLED = 2 };

/* Monotonic clock in seconds. */
double cs_now(void);

/* Suspends the running task until fd (>= 0) is ready for events (POLLIN/POLLOUT), or q
 * is woken by cs_waitq_wake, or the absolute deadline (cs_now() based; <= 0: none)
 * passes, or the task is cancelled. Never returns normally: it yields, and k(L, LUA_YIELD,
 * ctx) runs on resume; k takes the reason with cs_wake_status(L). When q is given and
 * fd becomes ready, every waiter on q is woken (a libssh2 session's packets are shared by
 * all its channels, so readiness belongs to the session, not to one channel).
 * Raises when called outside a task of the running loop.  [-0, +0, e] */
int cs_wait(lua_State *L, int fd, short events, cs_waitq *q, double deadline,
            lua_KContext ctx, lua_KFunction k);

/* In a continuation: why the task was resumed (CS_WAKE_*).  [-0, +0, e] */
int cs_wake_status(lua_State *L);

/* Makes every task waiting on q runnable (FIFO order); safe when q is empty. */
void cs_waitq_wake(lua_State *L, cs_waitq *q);
/* Wakes only the first waiter of q; returns 1 if there was one. */
int cs_waitq_wake_one(lua_State *L, cs_waitq *q);

/* The task running in L; raises outside a task of the running loop (for primitives that
 * refuse to start what they could not wait for).  [-0, +0, e] */
cs_task *cs_loop_running_task(lua_State *L);

/* Tests only: nonzero makes proc.spawn learn exits from SIGCHLD, as without pidfd_open. */
extern int cs_proc_force_sigchld;

/* Raises the cancellation error of the running task (after the caller has cleaned up). */
int cs_raise_cancelled(lua_State *L);

/* Adds loop.semaphore(n) to the table at -1 (sem.c).  [-0, +0, m] */
void cs_sem_register(lua_State *L);

/* True when the running task is in its destructors (waits then ignore cancellation). */
int cs_in_cleanup(lua_State *L);

/* ---- name resolution (resolve.c) ------------------------------------------------------ */

struct cs_resolve;
struct addrinfo;
/* Starts resolving host:port (TCP) in the background; NULL with *err (EAI_*) if it cannot. */
struct cs_resolve *cs_resolve_start(const char *host, int port, int *err);
/* EAI_INPROGRESS while waiting; 0 with *res (owned by r) when resolved; else the EAI_* error. */
int cs_resolve_poll(struct cs_resolve *r, struct addrinfo **res);
/* Frees r (and its result), or parks it until the resolver lets go of it. */
void cs_resolve_done(struct cs_resolve *r);

/* ---- helpers (util.c) --------------------------------------------------------------- */

/* Pushes nil, "<who>: <op>: <detail>", code and returns 3: the I/O failure triple. */
int cs_fail(lua_State *L, const char *who, const char *op, const char *detail, const char *code);

/* Appends to b the POSIX-shell single-quoted form of s[0..len). */
void cs_quote(luaL_Buffer *b, const char *s, size_t len);

#endif

/* ssh_int.h - the SSH family's shared state: sessions, gates and the stepping helpers. */
#ifndef CS_SSH_INT_H
#define CS_SSH_INT_H

#include "cs.h"

#include <stddef.h>
#include <libssh2.h>
#include <libssh2_sftp.h>

#define SSH_MT "cargoship.ssh_session"
#define KH_MT "cargoship.ssh_known_hosts"
#define EXEC_MT "cargoship.ssh_exec"
#define SFTP_MT "cargoship.ssh_sftp_op"

enum { HK_STRICT, HK_ACCEPT_NEW, HK_OFF };

enum {
  SS_NEW, SS_TCP, SS_HANDSHAKE, SS_AUTH, SS_READY, SS_CLOSING, SS_CLOSED, SS_BROKEN, SS_RESOLVE
};

/* A known_hosts collection (cargoship.ssh_known_hosts). */
typedef struct {
  LIBSSH2_SESSION *owner;  /* never connected: a collection is tied to the session that made it */
  LIBSSH2_KNOWNHOSTS *kh;
  char *path;
} cs_kh;

/* Adds ssh.known_hosts(path) -> collection | nil, msg, "io" to the table at -1. */
void cs_kh_register(lua_State *L);
/* The collection at idx; raises when closed.  [-0, +0, v] */
cs_kh *cs_kh_check(lua_State *L, int idx);
/* Comma list of host-key methods known_hosts holds for host:port, "" when none. */
void cs_kh_known_types(cs_kh *k, const char *host, int port, char *prefs, size_t len);
int cs_kh_type_of(int hostkey_type);
const char *cs_kh_label(int kh_type);
/* "SHA256:..." of the session's host key, as OpenSSH prints it. */
void cs_kh_fingerprint(LIBSSH2_SESSION *s, char *out, size_t len);
/* accept-new: remembers the key and appends its line to the file; 0 on success. */
int cs_kh_learn(cs_kh *k, const char *host, int port, const char *key, size_t klen, int type);

/* A block of a session's heap: what libssh2 allocated for it, listed (see cs_ssh_heap). */
typedef union cs_block {
  struct { union cs_block *prev, *next; } l;
  max_align_t align;
} cs_block;

typedef struct cs_ssh {
  LIBSSH2_SESSION *s;
  cs_block *heap;          /* every block libssh2 holds for this session, freed with it */
  int fd;
  int state;
  char *name;              /* the host as messages name it */
  cs_waitq q;              /* every task waiting on this session, whatever for */
  const void *send_owner;  /* op whose packet is half sent (notes/libssh2.md rule 2) */
  const void *ctl_owner;   /* op with a channel request in flight (rule 3) */
  const void *sftp_owner;  /* one SFTP transfer at a time: libssh2's SFTP state is shared */
  unsigned long rx;        /* bytes received: tells a call that drained the socket */
  int channels, max_channels;  /* channels counts the spare, and an orphaned spare open */
  LIBSSH2_CHANNEL *spare;  /* a session channel opened ahead of the next command (ssh_exec.c) */
  int spare_on;            /* open one ahead at all (connect's spare_channel, default on) */
  int spare_orphan;        /* a spare's open was left pending: the next open completes it */
  int openers;             /* commands waiting to open a channel: no spare while any does */
  unsigned long opened, ahead;  /* commands run, and how many of them on a spare */
  LIBSSH2_CHANNEL **dead;  /* abandoned channels still to close and free */
  int ndead, capdead;
  LIBSSH2_SFTP *sftp;
  int root;                /* login user is root */
  int jump_ref;            /* registry ref keeping a bastion tunnel alive */
  char *kh_path;           /* accept-new appends here */
  struct cs_resolve *resolve;  /* a host name being resolved */
  char why[96];            /* why the session broke, for every later failure message */
  unsigned long ka_rx;     /* ss->rx at the last keepalive tick */
  int ka_misses;           /* ticks in a row with an operation waiting and nothing received */
} cs_ssh;

/* The session at stack index idx; raises when it is not open.  [-0, +0, v] */
cs_ssh *cs_ssh_check(lua_State *L, int idx);

/* May op call into libssh2 now? Not while another op holds the send gate. */
int cs_ssh_may_call(cs_ssh *ss, const void *op);

/* After a libssh2 call made by op that returned rc, with rx0 = ss->rx before it: takes or
 * releases the send gate and wakes the session's other tasks when the call made progress
 * or drained the socket (their data may now sit in libssh2's packet list, unseen by poll). */
void cs_ssh_after(lua_State *L, cs_ssh *ss, const void *op, int rc, unsigned long rx0);

/* Waits for the session: its socket in the directions libssh2 blocked on, or for any
 * other task of the session to make progress or release a gate. */
int cs_ssh_wait(lua_State *L, cs_ssh *ss, const void *op, double deadline,
                lua_KContext ctx, lua_KFunction k);

/* Closes and frees abandoned channels as far as possible without waiting. */
void cs_ssh_reap(lua_State *L, cs_ssh *ss, const void *op);

/* Ends the open of a spare channel its command left pending (ssh_exec.c): libssh2 has one open
 * at a time per session, and any open of any kind would otherwise get that channel. Called
 * with the control gate held by op. -> 1 while it is still pending. */
int cs_ssh_orphan_step(lua_State *L, cs_ssh *ss, const void *op);

/* Hands a channel whose operation was cut short to the reaper. */
void cs_ssh_abandon(cs_ssh *ss, LIBSSH2_CHANNEL *ch);

/* The SSH family's one failure triple: pushes nil, "<host>: <op>: <detail>", code and
 * returns 3. detail is fmt formatted as lua_pushfstring does; with fmt NULL it is libssh2's
 * last error, or why the session broke. ss NULL names "localhost" (a local file failed).
 * code is one of timeout, refused, auth, hostkey, closed, exit, io: anything else is a bug
 * in the caller and raises.  [-0, +3, e] */
int cs_ssh_fail(lua_State *L, cs_ssh *ss, const char *code, const char *op, const char *fmt, ...);

/* Marks the session broken: socket shut down, every later call fails at once, naming why
 * (NULL: "connection lost"). */
void cs_ssh_break(lua_State *L, cs_ssh *ss, const char *why);

/* libssh2's allocator for a session (abstract = the cs_ssh): its blocks are listed in
 * ss->heap, so cs_ssh_hard_close frees whatever libssh2_session_free left behind. */
LIBSSH2_ALLOC_FUNC(cs_ssh_alloc);
LIBSSH2_REALLOC_FUNC(cs_ssh_realloc);
LIBSSH2_FREE_FUNC(cs_ssh_free);

/* Frees the session's libssh2 state and socket without a goodbye (abort, __gc). */
void cs_ssh_hard_close(cs_ssh *ss);

/* Adds ssh.connect (ssh_connect.c) to the module table at -1.  [-0, +0, m] */
void cs_ssh_connect_register(lua_State *L);

/* Registers the exec and sftp methods into the session method table at -1. */
void cs_ssh_agent_methods(lua_State *L);
void cs_ssh_exec_methods(lua_State *L);
void cs_ssh_sftp_methods(lua_State *L);
void cs_ssh_tunnel_methods(lua_State *L);

#endif

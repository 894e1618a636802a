/* resolve.c - host names to addresses without blocking the loop (glibc's getaddrinfo_a, polled). */
#include "cs.h"

#include <netdb.h>
#include <stdlib.h>
#include <string.h>

/* glibc resolves in helper threads of its own; the loop only asks whether the answer is
 * there yet, so one slow DNS server never stalls the other hosts' tasks. A request that
 * is abandoned while glibc still works on it cannot be freed: it is parked and freed by a
 * later call once glibc is done with it. */
struct cs_resolve {
  struct gaicb cb;
  struct addrinfo hints;
  char *host;
  char port[8];
  struct cs_resolve *next;   /* in the parked list */
};

static struct cs_resolve *parked;

static void resolve_free(struct cs_resolve *r) {
  if (r->cb.ar_result) freeaddrinfo(r->cb.ar_result);
  free(r->host);
  free(r);
}

static void reap_parked(void) {
  struct cs_resolve **p = &parked;
  while (*p) {
    struct cs_resolve *r = *p;
    if (gai_error(&r->cb) == EAI_INPROGRESS) {
      p = &r->next;
      continue;
    }
    *p = r->next;
    resolve_free(r);
  }
}

struct cs_resolve *cs_resolve_start(const char *host, int port, int *err) {
  reap_parked();
  struct cs_resolve *r = calloc(1, sizeof *r);
  if (!r || !(r->host = strdup(host))) {
    free(r);
    *err = EAI_MEMORY;
    return NULL;
  }
  snprintf(r->port, sizeof r->port, "%d", port);
  r->hints.ai_socktype = SOCK_STREAM;
  r->hints.ai_flags = AI_NUMERICSERV;
  r->cb.ar_name = r->host;
  r->cb.ar_service = r->port;
  r->cb.ar_request = &r->hints;
  struct gaicb *list[1] = {&r->cb};
  *err = getaddrinfo_a(GAI_NOWAIT, list, 1, NULL);
  if (*err != 0) {
    resolve_free(r);
    return NULL;
  }
  return r;
}

int cs_resolve_poll(struct cs_resolve *r, struct addrinfo **res) {
  int e = gai_error(&r->cb);
  if (e == EAI_INPROGRESS) return EAI_INPROGRESS;
  *res = e == 0 ? r->cb.ar_result : NULL;
  return e;
}

void cs_resolve_done(struct cs_resolve *r) {
  if (!r) return;
  if (gai_error(&r->cb) == EAI_INPROGRESS && gai_cancel(&r->cb) == EAI_NOTCANCELED) {
    r->next = parked;
    parked = r;
    return;
  }
  resolve_free(r);
}

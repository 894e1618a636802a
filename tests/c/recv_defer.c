/* recv_defer.c - LD_PRELOAD shim (integration/recv_defer): bytes waiting on a TCP socket are first answered EAGAIN. */
/* Each arrival on a non-blocking TCP socket is seen by the second recv that could read it, not
 * the first: as if it landed just after the first looked. A runtime that reads a socket in
 * several calls and then waits for more must not have queued, in a later call, what an
 * earlier call looked for (the exec hang of stop 31: stdout's data read by the stderr read). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/types.h>

typedef ssize_t (*recv_fn)(int, void *, size_t, int);

static unsigned char deferred[65536];

static int deferrable(int fd, int flags) {
  int v = 0;
  socklen_t n = sizeof v;
  if (fd < 0 || fd >= (int)sizeof deferred || (flags & MSG_PEEK)) return 0;
  if (!(fcntl(fd, F_GETFL) & O_NONBLOCK)) return 0;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &n) != 0 || v != SOCK_STREAM) return 0;
  n = sizeof v;
  return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &n) == 0 && (v == AF_INET || v == AF_INET6);
}

ssize_t recv(int fd, void *buf, size_t len, int flags) {
  static recv_fn real;
  if (!real) real = (recv_fn)dlsym(RTLD_NEXT, "recv");
  if (deferrable(fd, flags)) {
    char c;
    if (!deferred[fd] && real(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
      deferred[fd] = 1;
      errno = EAGAIN;
      return -1;
    }
    deferred[fd] = 0;
  }
  return real(fd, buf, len, flags);
}

/* cs-lab-delay: a lab host's link as a pair of taps, every frame held for a fixed time each way (netem in user space). */
/*
 * The lab's kernel has neither netem nor fq, so a link with latency is built here: one tap in
 * the host's network namespace (its eth0) and one in the lab's (a bridge port), and this
 * process copies each Ethernet frame from one to the other DELAY_US microseconds after it
 * arrived, in order, in both directions. Everything the host says crosses it (SSH, the
 * engines' ports, ARP). A frame to or from CLIENT_IP (the lab's own address, where cargoship,
 * ssh and ansible run) is held DELAY_US, any other DELAY_US / 2: a frame between two hosts
 * crosses two such links, so every pair (client and host, host and host) sees the same
 * RTT = 2 x DELAY_US. Each class keeps its own queue, so frames of one flow stay in order.
 *
 *   cs-lab-delay HOST_NETNS HOST_IF LAB_NETNS LAB_IF DELAY_US CLIENT_IP
 *
 * HOST_NETNS / LAB_NETNS are paths (/run/netns/NAME). The taps are created, then the process
 * forks: the parent prints the child's pid and exits 0 (the links exist by then), the child
 * relays until killed; the taps vanish with it. A queue holds at most QMAX frames per
 * direction: beyond that frames are dropped, as a full router queue would (TCP recovers).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define QMAX 16384
#define FRAME_MAX 65536

struct frame {
  int64_t due;
  size_t len;
  unsigned char data[];
};

struct queue {
  struct frame *f[QMAX];
  unsigned head, n;
  unsigned long dropped;
};

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void die(const char *what) {
  fprintf(stderr, "cs-lab-delay: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Opens a tap named `name` inside the network namespace at `ns_path`, then returns to `home`. */
static int open_tap(const char *ns_path, const char *name, int home) {
  int ns = open(ns_path, O_RDONLY | O_CLOEXEC);
  if (ns < 0) die(ns_path);
  if (setns(ns, CLONE_NEWNET) < 0) die("setns");
  close(ns);
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die("/dev/net/tun");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  if (strlen(name) >= IFNAMSIZ) {
    errno = ENAMETOOLONG;
    die(name);
  }
  strcpy(ifr.ifr_name, name);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) die(name);
  if (setns(home, CLONE_NEWNET) < 0) die("setns back");
  return fd;
}

/* 1 when an Ethernet frame carries IPv4 from or to `client` (network order). */
static int to_client(const unsigned char *b, ssize_t len, uint32_t client) {
  if (len < 34 || b[12] != 0x08 || b[13] != 0x00) return 0;
  uint32_t src, dst;
  memcpy(&src, b + 26, 4);
  memcpy(&dst, b + 30, 4);
  return src == client || dst == client;
}

/* Reads every frame waiting on fd into q[class], stamped due at now + that class's delay. */
static void take(int fd, struct queue q[2], const int64_t delay[2], uint32_t client, unsigned char *buf) {
  for (;;) {
    ssize_t r = read(fd, buf, FRAME_MAX);
    if (r < 0) {
      if (errno == EAGAIN || errno == EINTR) return;
      die("read");
    }
    if (r == 0) return;
    int c = to_client(buf, r, client);
    struct queue *qc = &q[c];
    if (qc->n == QMAX) {
      qc->dropped++;
      continue;
    }
    struct frame *f = malloc(sizeof *f + (size_t)r);
    if (!f) {
      qc->dropped++;
      continue;
    }
    f->due = now_us() + delay[c];
    f->len = (size_t)r;
    memcpy(f->data, buf, (size_t)r);
    qc->f[(qc->head + qc->n) % QMAX] = f;
    qc->n++;
  }
}

/* Writes the frames of q that are due to fd; returns 1 when the tap pushed back (EAGAIN). */
static int give(int fd, struct queue *q, int64_t now) {
  while (q->n > 0) {
    struct frame *f = q->f[q->head];
    if (f->due > now) return 0;
    if (write(fd, f->data, f->len) < 0) {
      if (errno == EAGAIN) return 1;
      if (errno == EINTR) continue;
      /* a frame the other side refuses (its link down, say) is lost, as on a wire */
    }
    free(f);
    q->head = (q->head + 1) % QMAX;
    q->n--;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: cs-lab-delay HOST_NETNS HOST_IF LAB_NETNS LAB_IF DELAY_US CLIENT_IP\n");
    return 2;
  }
  char *end;
  long long delay = strtoll(argv[5], &end, 10);
  if (*end || delay < 0 || delay > 10000000) {
    fprintf(stderr, "cs-lab-delay: DELAY_US must be 0..10000000, not %s\n", argv[5]);
    return 2;
  }
  struct in_addr client;
  if (inet_pton(AF_INET, argv[6], &client) != 1) {
    fprintf(stderr, "cs-lab-delay: CLIENT_IP must be an IPv4 address, not %s\n", argv[6]);
    return 2;
  }
  const int64_t delays[2] = {delay / 2, delay};
  int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (home < 0) die("/proc/self/ns/net");
  int fd[2];
  fd[0] = open_tap(argv[1], argv[2], home);
  fd[1] = open_tap(argv[3], argv[4], home);
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid > 0) {
    printf("%d\n", (int)pid);
    return 0;
  }
  setsid();
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
    close(null);
  }
  signal(SIGPIPE, SIG_IGN);
  static unsigned char buf[FRAME_MAX];
  static struct queue q[2][2]; /* q[i][c]: frames read from fd[i], bound for fd[1 - i], class c */
  int blocked[2] = {0, 0};  /* fd[i] refused a write: wait for POLLOUT on it */
  for (;;) {
    int64_t now = now_us();
    int64_t next = -1;
    blocked[0] = blocked[1] = 0;
    for (int i = 0; i < 2; i++)
      for (int c = 0; c < 2; c++) {
        struct queue *qc = &q[i][c];
        if (!blocked[1 - i]) blocked[1 - i] = give(fd[1 - i], qc, now);
        if (qc->n > 0 && !blocked[1 - i]) {
          int64_t due = qc->f[qc->head]->due;
          if (next < 0 || due < next) next = due;
        }
      }
    struct pollfd p[2];
    for (int i = 0; i < 2; i++) {
      p[i].fd = fd[i];
      p[i].events = POLLIN | (blocked[i] ? POLLOUT : 0);
      p[i].revents = 0;
    }
    struct timespec ts, *tsp = NULL;
    if (next >= 0) {
      int64_t wait = next - now_us();
      if (wait < 0) wait = 0;
      ts.tv_sec = wait / 1000000;
      ts.tv_nsec = (wait % 1000000) * 1000;
      tsp = &ts;
    }
    if (ppoll(p, 2, tsp, NULL) < 0 && errno != EINTR) die("ppoll");
    for (int i = 0; i < 2; i++)
      if (p[i].revents & POLLIN) take(fd[i], q[i], delays, client.s_addr, buf);
    for (int i = 0; i < 2; i++)
      if (p[i].revents & (POLLERR | POLLHUP | POLLNVAL)) {
        fprintf(stderr, "cs-lab-delay: %s: link gone\n", argv[i == 0 ? 2 : 4]);
        return 0;
      }
  }
}

/* An LD_PRELOAD shim for the checkpoint tests: every pwritev to a "*.partial" file (a
   checkpoint's tensor bytes, which only the background writer writes that way) sleeps
   FLEXSP_SLOW_WRITE_MS milliseconds first, so that a test can kill a rank while a
   background write is under way and training goes on. The production code carries no
   test hook; this library exists only in the test build (tests/CMakeLists.txt) and
   changes nothing without the variable. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static void maybe_sleep(int fd) {
  const char* ms = getenv("FLEXSP_SLOW_WRITE_MS");
  if (ms == NULL) return;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return;
  path[n] = '\0';
  const size_t k = strlen(".partial");
  if ((size_t)n < k || strcmp(path + n - k, ".partial") != 0) return;
  const long v = atol(ms);
  struct timespec t = {v / 1000, (v % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  static ssize_t (*real)(int, const struct iovec*, int, off_t) = NULL;
  if (real == NULL) real = (ssize_t(*)(int, const struct iovec*, int, off_t))dlsym(RTLD_NEXT, "pwritev");
  maybe_sleep(fd);
  return real(fd, iov, cnt, off);
}

ssize_t pwritev64(int fd, const struct iovec* iov, int cnt, off_t off) {
  static ssize_t (*real)(int, const struct iovec*, int, off_t) = NULL;
  if (real == NULL) real = (ssize_t(*)(int, const struct iovec*, int, off_t))dlsym(RTLD_NEXT, "pwritev64");
  maybe_sleep(fd);
  return real(fd, iov, cnt, off);
}

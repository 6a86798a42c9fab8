/* An LD_PRELOAD shim for the disk-full tests: the disk fills up in the middle of a write,
   after every free-space check has passed. Writes to files whose path contains
   FLEXSP_ENOSPC_MATCH go through until FLEXSP_ENOSPC_AFTER bytes (per process, over all
   such files) have been written; the write that crosses it writes what is left of the
   allowance and the next one fails with ENOSPC, as a file system does when it runs out.
   FLEXSP_ENOSPC_ERRNO=EIO fails them with EIO instead (a disk that breaks rather than
   fills). Every write entry point a libc, HDF5 or MPI-IO may use is covered. The
   production code carries no test hook; this library exists only in the test build
   (tests/CMakeLists.txt) and changes nothing without the variables. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static long long written = 0;

/* How many of `want` bytes to fd may go through (-1: fail with ENOSPC now). */
static ssize_t allowance(int fd, size_t want) {
  const char* match = getenv("FLEXSP_ENOSPC_MATCH");
  const char* after = getenv("FLEXSP_ENOSPC_AFTER");
  if (match == NULL || after == NULL || want == 0) return (ssize_t)want;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return (ssize_t)want;
  path[n] = '\0';
  if (strstr(path, match) == NULL) return (ssize_t)want;
  const long long left = atoll(after) - written;
  if (left <= 0) return -1;
  const size_t ok = (long long)want < left ? want : (size_t)left;
  written += (long long)ok;
  return (ssize_t)ok;
}

/* The errno a refused write fails with. */
static int refusal(void) {
  const char* e = getenv("FLEXSP_ENOSPC_ERRNO");
  return e != NULL && strcmp(e, "EIO") == 0 ? EIO : ENOSPC;
}

typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec*, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec*, int, off_t);
typedef ssize_t (*pwritev2_fn)(int, const struct iovec*, int, off_t, int);
#define REAL(name, type) \
  static type real = NULL; \
  if (real == NULL) real = (type)dlsym(RTLD_NEXT, name)

static size_t iov_bytes(const struct iovec* iov, int cnt) {
  size_t sum = 0;
  for (int k = 0; k < cnt; ++k) sum += iov[k].iov_len;
  return sum;
}

ssize_t write(int fd, const void* buf, size_t count) {
  REAL("write", write_fn);
  const ssize_t ok = allowance(fd, count);
  if (ok < 0) return errno = refusal(), -1;
  return real(fd, buf, (size_t)ok);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t off) {
  REAL("pwrite", pwrite_fn);
  const ssize_t ok = allowance(fd, count);
  if (ok < 0) return errno = refusal(), -1;
  return real(fd, buf, (size_t)ok, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off_t off) {
  REAL("pwrite64", pwrite_fn);
  const ssize_t ok = allowance(fd, count);
  if (ok < 0) return errno = refusal(), -1;
  return real(fd, buf, (size_t)ok, off);
}

/* Vectored writes go through whole or fail (a short vectored write would need the
   buffers cut). */
ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  REAL("writev", writev_fn);
  const ssize_t ok = allowance(fd, iov_bytes(iov, cnt));
  if (ok < (ssize_t)iov_bytes(iov, cnt)) return errno = refusal(), -1;
  return real(fd, iov, cnt);
}

ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  REAL("pwritev", pwritev_fn);
  const ssize_t ok = allowance(fd, iov_bytes(iov, cnt));
  if (ok < (ssize_t)iov_bytes(iov, cnt)) return errno = refusal(), -1;
  return real(fd, iov, cnt, off);
}

ssize_t pwritev64(int fd, const struct iovec* iov, int cnt, off_t off) {
  REAL("pwritev64", pwritev_fn);
  const ssize_t ok = allowance(fd, iov_bytes(iov, cnt));
  if (ok < (ssize_t)iov_bytes(iov, cnt)) return errno = refusal(), -1;
  return real(fd, iov, cnt, off);
}

ssize_t pwritev2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  REAL("pwritev2", pwritev2_fn);
  const ssize_t ok = allowance(fd, iov_bytes(iov, cnt));
  if (ok < (ssize_t)iov_bytes(iov, cnt)) return errno = refusal(), -1;
  return real(fd, iov, cnt, off, flags);
}

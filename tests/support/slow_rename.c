/* An LD_PRELOAD shim for the checkpoint tests: it holds the rename of a "*.partial" file
   (a finished checkpoint about to be published) for FLEXSP_SLOW_RENAME_MS milliseconds,
   so that a test can signal or kill a rank while a checkpoint write is under way. The
   production code carries no test hook; this library exists only in the test build
   (tests/CMakeLists.txt) and changes nothing without the variable. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int rename(const char* from, const char* to) {
  static int (*real_rename)(const char*, const char*) = NULL;
  if (real_rename == NULL) real_rename = (int (*)(const char*, const char*))dlsym(RTLD_NEXT, "rename");
  const char* ms = getenv("FLEXSP_SLOW_RENAME_MS");
  const size_t n = strlen(from), k = strlen(".partial");
  if (ms != NULL && n >= k && strcmp(from + n - k, ".partial") == 0) {
    const long v = atol(ms);
    struct timespec t = {v / 1000, (v % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
  }
  return real_rename(from, to);
}

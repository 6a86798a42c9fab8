// pwritev / preadv of file runs (see raw_io.h).
#include "io/checkpoint/raw_io.h"

#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "lib/util/error.h"

namespace flexsp {

namespace {

// One pass over runs [first, last): every stretch of file-contiguous runs is moved by
// repeated calls of io(iov, count, offset) (pwritev or preadv), each of up to IOV_MAX
// pieces and kRawChunk bytes, resuming after partial transfers. `io` returns the bytes
// moved, 0 at the end of the file, -1 with errno on failure.
template <typename Io, typename Ptr>
void move_runs(const std::vector<FileRun>& runs, size_t first, size_t last, Ptr ptr, Io io,
               const std::atomic<bool>* stop, const std::string& what, const std::string& name) {
  std::vector<iovec> iov;
  size_t i = first;
  uint64_t done = 0;  // bytes of runs[i] already moved
  while (i < last) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) return;
    const uint64_t at = runs[i].file + done;
    iov.clear();
    size_t bytes = 0;
    for (size_t j = i; j < last && iov.size() < IOV_MAX && bytes < kRawChunk; ++j) {
      if (j > i && runs[j].file != runs[j - 1].file + 4 * static_cast<uint64_t>(runs[j - 1].n)) break;
      const uint64_t skip = j == i ? done : 0;
      const size_t len = std::min<size_t>(4 * static_cast<uint64_t>(runs[j].n) - skip, kRawChunk - bytes);
      iov.push_back({reinterpret_cast<char*>(ptr(runs[j])) + skip, len});
      bytes += len;
    }
    const ssize_t got = io(iov.data(), static_cast<int>(iov.size()), static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    FLEXSP_CHECK(got >= 0, "{}: cannot {}: {}", name, what, std::strerror(errno));
    FLEXSP_CHECK(got > 0, "{}: cannot {}: the file ends at byte {} (truncated?)", name, what, at);
    uint64_t left = static_cast<uint64_t>(got);
    while (left > 0) {  // advance over whole and partial runs
      const uint64_t rest = 4 * static_cast<uint64_t>(runs[i].n) - done;
      if (left < rest) {
        done += left;
        left = 0;
      } else {
        left -= rest;
        done = 0;
        ++i;
      }
    }
  }
}

}  // namespace

void write_runs(int fd, const std::vector<FileRun>& runs, const float* const bufs[kCheckpointGroups],
                const std::string& name, const std::atomic<bool>* stop) {
  move_runs(
      runs, 0, runs.size(), [&](const FileRun& r) { return const_cast<float*>(bufs[r.buf] + r.at); },
      [&](const iovec* v, int n, off_t off) { return ::pwritev(fd, v, n, off); }, stop, "write", name);
}

void read_runs(int fd, const std::vector<FileRun>& runs, size_t first, size_t last,
               float* const bufs[kCheckpointGroups], const std::string& name) {
  move_runs(
      runs, first, last, [&](const FileRun& r) { return bufs[r.buf] + r.at; },
      [&](const iovec* v, int n, off_t off) { return ::preadv(fd, v, n, off); }, nullptr, "read", name);
}

}  // namespace flexsp

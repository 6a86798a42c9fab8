// pwritev / preadv of file runs (see raw_io.h).
#include "io/checkpoint/raw_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>

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

constexpr uint64_t kDirectAlign = 4096;           // offsets, lengths and memory
constexpr size_t kStageBytes = size_t(32) << 20;  // one staging buffer (two in use)
constexpr int kReadDepth = 3;                     // staging buffers of a read: reads in flight
constexpr uint64_t kReadThrough = uint64_t(4) << 20;  // a gap between runs read rather than skipped

uint64_t align_down(uint64_t x) { return x / kDirectAlign * kDirectAlign; }
uint64_t align_up(uint64_t x) { return align_down(x + kDirectAlign - 1); }
uint64_t run_end(const FileRun& r) { return r.file + 4 * static_cast<uint64_t>(r.n); }

bool contiguous(const FileRun& a, const FileRun& b) { return b.file == a.file + 4 * static_cast<uint64_t>(a.n); }

// Writes len bytes of src at byte `at` of fd. After a partial write the rest goes through
// `rest_fd` (the buffered descriptor: what a direct write leaves need not be aligned).
void pwrite_all(int fd, int rest_fd, const char* src, uint64_t len, uint64_t at, const std::string& name) {
  while (len > 0) {
    iovec v{const_cast<char*>(src), len};  // pwritev, as write_runs: one call moves tensor bytes
    const ssize_t got = ::pwritev(fd, &v, 1, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    FLEXSP_CHECK(got > 0, "{}: cannot write: {}", name, got < 0 ? std::strerror(errno) : "no progress");
    fd = rest_fd;
    src += got;
    len -= static_cast<uint64_t>(got);
    at += static_cast<uint64_t>(got);
  }
}

// The runs' bytes in file order, copied out len bytes at a time.
struct RunBytes {
  const std::vector<FileRun>& runs;
  const float* const* bufs;
  size_t i = 0;
  uint64_t done = 0;  // bytes of runs[i] already taken

  void take(char* dst, uint64_t len) {
    while (len > 0) {
      const FileRun& r = runs[i];
      const uint64_t k = std::min(4 * static_cast<uint64_t>(r.n) - done, len);
      std::memcpy(dst, reinterpret_cast<const char*>(bufs[r.buf] + r.at) + done, k);
      dst += k;
      len -= k;
      done += k;
      if (done == 4 * static_cast<uint64_t>(r.n)) {
        ++i;
        done = 0;
      }
    }
  }
};

struct FreeAligned {
  void operator()(char* p) const { std::free(p); }
};

std::unique_ptr<char, FreeAligned> staging_buffer(const std::string& name, const char* what) {
  void* p = nullptr;
  FLEXSP_CHECK(::posix_memalign(&p, kDirectAlign, kStageBytes) == 0,
               "{}: cannot {}: no memory for a {} MiB staging buffer", name, what, kStageBytes >> 20);
  return std::unique_ptr<char, FreeAligned>(static_cast<char*>(p));
}

// An aligned block of the file to read: [begin, end), of which [begin, need) holds runs.
struct ReadBlock {
  uint64_t begin = 0, end = 0, need = 0;
};

// The blocks that cover the runs, in file order: each starts at an aligned byte past the
// previous one, spans up to kStageBytes and reads through gaps of up to kReadThrough.
std::vector<ReadBlock> read_blocks(const std::vector<FileRun>& runs) {
  std::vector<ReadBlock> out;
  uint64_t covered = 0;  // every byte below it is in an earlier block
  for (size_t i = 0; i < runs.size();) {
    ReadBlock b;
    b.begin = std::max(align_down(runs[i].file), covered);
    const uint64_t limit = b.begin + kStageBytes;
    b.need = b.begin;
    for (size_t j = i; j < runs.size() && runs[j].file < limit; ++j) {
      if (j > i && runs[j].file > run_end(runs[j - 1]) + kReadThrough) break;
      b.need = std::min(run_end(runs[j]), limit);
      if (run_end(runs[j]) > limit) break;
    }
    b.end = std::min(align_up(b.need), limit);
    covered = b.end;
    while (i < runs.size() && run_end(runs[i]) <= covered) ++i;
    out.push_back(b);
  }
  return out;
}

// Reads block b into stage (aligned); what lies past the end of the file comes back short,
// which is fine past b.need.
void pread_block(int fd, char* stage, const ReadBlock& b, const std::string& name) {
  uint64_t got = 0;
  while (b.begin + got < b.need) {
    const ssize_t k = ::pread(fd, stage + got, b.end - b.begin - got, static_cast<off_t>(b.begin + got));
    if (k < 0 && errno == EINTR) continue;
    FLEXSP_CHECK(k >= 0, "{}: cannot read: {}", name, std::strerror(errno));
    got += static_cast<uint64_t>(k);
    FLEXSP_CHECK(k > 0 && (b.begin + got >= b.need || got % kDirectAlign == 0),
                 "{}: cannot read: the file ends at byte {} (truncated?)", name, b.begin + got);
  }
}

}  // namespace

int open_direct_for_write(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
}

int open_direct_for_read(const std::string& path) { return ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC); }

void read_runs_direct(int direct_fd, const std::vector<FileRun>& runs, float* const bufs[kCheckpointGroups],
                      const std::string& name, const std::function<void(uint64_t)>& progress) {
  const std::vector<ReadBlock> blocks = read_blocks(runs);
  std::unique_ptr<char, FreeAligned> stage[kReadDepth];
  for (auto& s : stage) s = staging_buffer(name, "read");
  std::future<void> reading[kReadDepth];  // declared after the buffers: destroyed (waited) first
  auto start = [&](size_t b) {
    if (b < blocks.size())
      reading[b % kReadDepth] = std::async(std::launch::async, [&, b] {
        pread_block(direct_fd, stage[b % kReadDepth].get(), blocks[b], name);
      });
  };
  for (size_t b = 0; b < static_cast<size_t>(kReadDepth); ++b) start(b);
  size_t i = 0;  // the first run not yet wholly copied out
  for (size_t b = 0; b < blocks.size(); ++b) {
    reading[b % kReadDepth].get();  // rethrows the read's error
    const ReadBlock& blk = blocks[b];
    const char* src = stage[b % kReadDepth].get();
    for (size_t j = i; j < runs.size() && runs[j].file < blk.need; ++j) {
      const uint64_t lo = std::max(runs[j].file, blk.begin), hi = std::min(run_end(runs[j]), blk.need);
      if (lo < hi)
        std::memcpy(reinterpret_cast<char*>(bufs[runs[j].buf] + runs[j].at) + (lo - runs[j].file),
                    src + (lo - blk.begin), hi - lo);
    }
    while (i < runs.size() && run_end(runs[i]) <= blk.need) ++i;
    start(b + kReadDepth);
    progress(blk.need);
  }
}

void write_runs_direct(int direct_fd, int fd, const std::vector<FileRun>& runs,
                       const float* const bufs[kCheckpointGroups], const std::string& name,
                       const std::atomic<bool>* stop) {
  std::unique_ptr<char, FreeAligned> stage[2];
  for (auto& s : stage) s = staging_buffer(name, "write");
  std::future<void> writing[2];  // the block each buffer holds, being written
  auto finish = [&](int k) {
    if (writing[k].valid()) writing[k].get();  // rethrows the write's error
  };
  auto stopped = [stop] { return stop != nullptr && stop->load(std::memory_order_relaxed); };
  RunBytes bytes{runs, bufs};
  int k = 0;
  for (size_t first = 0; first < runs.size() && !stopped();) {
    size_t last = first + 1;
    while (last < runs.size() && contiguous(runs[last - 1], runs[last])) ++last;
    const uint64_t end = runs[last - 1].file + 4 * static_cast<uint64_t>(runs[last - 1].n);
    for (uint64_t pos = runs[first].file; pos < end && !stopped();) {
      // An aligned block goes direct, up to a staging buffer; the bytes before the
      // stretch's first block boundary and after its last go buffered.
      const uint64_t down = end / kDirectAlign * kDirectAlign;
      const bool direct = pos % kDirectAlign == 0 && down > pos;
      const uint64_t len = direct ? std::min<uint64_t>(kStageBytes, down - pos)
                           : pos % kDirectAlign != 0 ? std::min(end, (pos / kDirectAlign + 1) * kDirectAlign) - pos
                                                     : end - pos;
      finish(k);
      bytes.take(stage[k].get(), len);
      writing[k] = std::async(std::launch::async, [to = direct ? direct_fd : fd, fd, p = stage[k].get(), len, pos, &name] {
        pwrite_all(to, fd, p, len, pos, name);
      });
      k ^= 1;
      pos += len;
    }
    first = last;
  }
  finish(0);
  finish(1);
}

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

// bench_checkpoint: checkpoint write and load bandwidth against dd on the same disk, in the
// same run (bench/bench_checkpoint.sh drives it over presets, rank counts and ZeRO stages).
//
//   mpirun -np N bench_checkpoint --preset 350m --zero 0|3 --dir DIR [--reps R] [--no-load]
//
// The state is the preset's initialised parameters (lib/model's init_params, no training)
// and two moments derived from them, laid out as ZeRO would hold it on this rank: stage 0
// keeps everything on every rank and each rank writes its share (ShardRanges' replicas);
// stage 3 keeps a 1/N piece of every parameter unit (the formula of lib/runtime/zero's
// stage 3 with world groups). A stage-0 buffer is mapped whole but only the share the
// writer reads is touched, so 1.3b fits on 4 ranks of a small machine.
//
// Per repetition: the checkpoint is written (checkpoint_save, barrier to barrier: the
// file fsync'ed and renamed); then rank 0 writes the same number of bytes with
// `dd bs=16M conv=fsync` into the same directory, and again with oflag=direct (what the
// disk takes past the page cache, as the writer's direct path); the checkpoint file is evicted from the
// page cache (posix_fadvise on clean pages: no root needed) and loaded with
// checkpoint_load (checksums verified, into the same buffers; at stage 0 every page of them
// touched first, as a run's state is); evicted again and read by `dd bs=16M`, then by
// `dd bs=16M iflag=direct` (what the disk gives past the page cache). Rank 0
// prints one line per repetition: size, seconds and MB/s of each, and the ratios.
#include <fcntl.h>
#include <fmt/format.h>
#include <mpi.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint.h"
#include "lib/config/config.h"
#include "lib/model/llama.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"
#include "lib/util/host_memory.h"

namespace {

using namespace flexsp;
namespace fs = std::filesystem;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Lazily backed memory: pages cost nothing until touched.
struct Mapped {
  float* p = nullptr;
  size_t bytes = 0;
  explicit Mapped(int64_t n) : bytes(std::max<size_t>(4096, static_cast<size_t>(n) * sizeof(float))) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    FLEXSP_CHECK(m != MAP_FAILED, "bench_checkpoint: cannot map {} bytes", bytes);
    p = static_cast<float*>(m);
  }
  ~Mapped() { munmap(p, bytes); }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
};

// This rank's state ranges at ZeRO stage `zero` over `world` ranks.
ShardRanges shards_of(const ParamTable& t, int zero, int rank, int world) {
  ShardRanges s;
  if (zero == 0) {
    s.ranges.emplace_back(0, t.total);
    s.replica = rank;
    s.replicas = world;
    return s;
  }
  for (int u = 0; u < param_units(t); ++u) {
    const int64_t b = param_unit_begin(t, u), e = param_unit_end(t, u);
    const int64_t block = (e - b + world - 1) / world;
    s.ranges.emplace_back(std::min(b + rank * block, e), std::min(b + (rank + 1) * block, e));
  }
  return s;
}

// Fills the share of s this rank writes (stage 0: its part of each range; else all).
void fill(const ModelConfig& c, const ParamTable& t, const ShardRanges& s, float* p, float* m, float* v) {
  int64_t at = 0;
  for (const auto& [b, e] : s.ranges) {
    const int64_t len = e - b;
    const int64_t lo = len * s.replica / s.replicas, hi = len * (s.replica + 1) / s.replicas;
    init_params(c, t, 1234, p + at + lo, b + lo, b + hi);
    for (int64_t i = at + lo; i < at + hi; ++i) {
      m[i] = 0.01f * p[i];
      v[i] = p[i] * p[i];
    }
    at += len;
  }
}

void evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Seconds `cmd` took; exits the benchmark when it fails.
double timed_system(const std::string& cmd) {
  const double t0 = now_s();
  FLEXSP_CHECK(std::system(cmd.c_str()) == 0, "bench_checkpoint: failed: {}", cmd);
  return now_s() - t0;
}

struct Args {
  std::string preset = "350m", dir;
  int zero = 0, reps = 1;
  bool load = true;
};

void run(const Args& a, int rank, int world) {
  ModelSection ms;
  ms.preset = a.preset;
  ms.vocab = 32000;
  const ModelConfig c = resolve_model_config(ms, {}, 0);
  const ParamTable t = make_param_table(c);
  const ShardRanges s = shards_of(t, a.zero, rank, world);
  const int64_t n = s.size();
  Mapped p(n), m(n), v(n);
  fill(c, t, s, p.p, m.p, v.p);
  CheckpointShard mine{s, p.p, m.p, v.p};
  const std::string dir = (fs::path(a.dir) / fmt::format("bench_{}_z{}_n{}", a.preset, a.zero, world)).string();
  if (rank == 0) {  // fresh: older checkpoints there would outrank this run's (checkpoint.keep)
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  // The load reads into the same buffers (the checksums prove it read the right bytes). At
  // stage 0 every rank reads every tensor whole: the parts it did not write get touched.
  double extra = a.zero == 0 ? static_cast<double>(3 * (n - n / world)) * sizeof(float) : 0;
  MPI_Allreduce(MPI_IN_PLACE, &extra, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double avail = static_cast<double>(host_memory_available());
  MPI_Bcast(&avail, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  const bool load = a.load && extra < 0.8 * avail;
  if (rank == 0 && a.load && !load)
    std::printf("# load skipped: it needs %.1f GB more, %.1f GB are available\n", extra / 1e9, avail / 1e9);
  for (int r = 0; r < a.reps; ++r) {
    CheckpointMeta meta;
    meta.step = r + 1;
    meta.world_size = world;
    meta.zero = a.zero;
    meta.config_ini = "[model]\npreset = " + a.preset + "\n";
    meta.version = "bench";
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    const std::string path = checkpoint_save(MPI_COMM_WORLD, dir, 1, c, t, meta, mine);
    MPI_Barrier(MPI_COMM_WORLD);
    const double write_s = now_s() - t0;
    double size = 0, dd_write_s = 0, dd_direct_s = 0, dd_read_s = 0, dd_direct_read_s = 0, load_s = 0;
    if (rank == 0) {
      size = static_cast<double>(fs::file_size(path));
      const std::string dd = (fs::path(dir) / "dd.bin").string();
      const int64_t blocks = static_cast<int64_t>((size + (16 << 20) - 1) / (16 << 20));
      const double part = size / static_cast<double>(blocks * (16 << 20));
      dd_write_s = timed_system(fmt::format("dd if=/dev/zero of={} bs=16M count={} conv=fsync status=none", dd, blocks)) * part;
      fs::remove(dd);
      dd_direct_s = timed_system(fmt::format("dd if=/dev/zero of={} bs=16M count={} oflag=direct conv=fsync status=none",
                                             dd, blocks)) * part;
      fs::remove(dd);
      evict(path);
    }
    if (load) {
      if (a.zero == 0 && r == 0)  // memory a run's state holds already (the trainer's buffers are filled)
        for (Mapped* b : {&p, &m, &v}) std::memset(b->p, 0, b->bytes);
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = now_s();
      checkpoint_load(MPI_COMM_WORLD, 0, path, c, t, s, p.p, s, m.p, v.p);
      MPI_Barrier(MPI_COMM_WORLD);
      load_s = now_s() - t0;
    }
    if (rank == 0) {
      evict(path);
      dd_read_s = timed_system(fmt::format("dd if={} of=/dev/null bs=16M status=none", path));
      dd_direct_read_s = timed_system(fmt::format("dd if={} of=/dev/null bs=16M iflag=direct status=none", path));
      const double mb = size / 1e6;
      std::printf("| %s | %d | %d | %.2f | %.2f | %.0f | %.0f | %.0f%% | %.0f | %.0f%% |", a.preset.c_str(), world,
                  a.zero, size / 1e9, write_s, mb / write_s, mb / dd_write_s, 100 * dd_write_s / write_s,
                  mb / dd_direct_s, 100 * dd_direct_s / write_s);
      if (load)
        std::printf(" %.2f | %.0f | %.0f | %.0f%% | %.0f | %.0f%% |\n", load_s, mb / load_s, mb / dd_read_s,
                    100 * dd_read_s / load_s, mb / dd_direct_read_s, 100 * dd_direct_read_s / load_s);
      else
        std::printf(" - | - | %.0f | - | %.0f | - |\n", mb / dd_read_s, mb / dd_direct_read_s);
      std::fflush(stdout);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string o = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (o == "--preset") a.preset = next();
    else if (o == "--zero") a.zero = std::atoi(next().c_str());
    else if (o == "--dir") a.dir = next();
    else if (o == "--reps") a.reps = std::atoi(next().c_str());
    else if (o == "--no-load") a.load = false;
    else {
      if (rank == 0) std::fprintf(stderr, "bench_checkpoint: unknown option %s\n", o.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  int rc = 0;
  try {
    FLEXSP_CHECK(!a.dir.empty(), "bench_checkpoint: --dir is required");
    FLEXSP_CHECK(a.zero == 0 || a.zero == 3, "bench_checkpoint: --zero must be 0 or 3");
    run(a, rank, world);
  } catch (const AgreedFailure& f) {
    rc = f.exit_code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_checkpoint: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}

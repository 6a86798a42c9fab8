// Checkpoint writes in the background (see writer.h): the job a save starts, its
// threads, the poll that agrees on its outcome, and publishing.
#include "io/checkpoint/writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "io/checkpoint/checksum.h"
#include "io/checkpoint/file_format.h"
#include "io/checkpoint/layout.h"
#include "io/checkpoint/raw_io.h"
#include "io/util/atomic_file.h"
#include "lib/comm/progress.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace flexsp {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A job's outcome, ordered so that the worst over the ranks is the maximum.
enum class State : int { done, failed, stopped, running };

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: durability, not correctness
  ::fsync(fd);
  ::close(fd);
}

// Rank 0, after the file is complete: rename it into place, point `latest` at it, prune.
// The new `latest` is written (the last write, which a full disk can still refuse) before
// anything becomes visible; on any failure the new files go and the old state stays.
void publish(const std::string& dir, const std::string& tmp, const std::string& path, int keep) {
  const std::string latest = (fs::path(dir) / "latest").string(), ltmp = latest + ".tmp";
  try {
    fsync_path(tmp);
    {
      std::ofstream out(ltmp, std::ios::trunc);
      out << fs::path(path).filename().string() << "\n";
      out.close();
      FLEXSP_CHECK(out.good(), "{}: cannot write: {}", ltmp, std::strerror(errno));
    }
    fsync_path(ltmp);
    FLEXSP_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "{}: cannot rename {} into place: {}",
                 path, tmp, std::strerror(errno));
    if (std::rename(ltmp.c_str(), latest.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      std::remove(path.c_str());  // `latest` must name the newest checkpoint (resume refuses newer ones)
      fail(fmt::format("{}: cannot replace: {}", latest, why));
    }
  } catch (...) {
    std::remove(ltmp.c_str());
    std::remove(tmp.c_str());
    throw;
  }
  fsync_path(dir);
  const std::vector<int64_t> steps = checkpoint_steps(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i) {
    std::error_code ec;
    fs::remove(fs::path(dir) / checkpoint_file_name(steps[i]), ec);
  }
}

// The bytes a checkpoint of t takes: three float32 copies of the whole tensors (t may be a
// tensor-parallel block of them), and room for HDF5's metadata (object headers,
// attributes, alignment, the run config).
uint64_t checkpoint_bytes(const ParamTable& t) {
  uint64_t b = 64 << 10;
  for (const ParamView& v : t.views) {
    uint64_t numel = 1;
    for (const int64_t d : v.full_shape()) numel *= static_cast<uint64_t>(d);
    b += 3 * (4 * numel + 2048 + (4 * numel >= (64 << 10) ? 4096 : 0));
  }
  return b;
}

}  // namespace

// A write in flight. Its threads read the caller's buffers and the fields above `stop`;
// the caller's thread reads the ones below `state` after seeing it leave `running`.
struct CheckpointJob {
  MPI_Comm comm = MPI_COMM_NULL;  // the writer's own (its thread's collectives)
  int rank = 0, keep = 1;
  std::string dir, path, tmp;
  int64_t step = 0;
  ParamTable t;
  ShardRanges shards;
  const float* bufs[kCheckpointGroups] = {};
  std::vector<uint64_t> offsets;
  std::vector<FileRun> runs;
  double stall_ms = 0, snapshot_ms = 0;  // the caller's thread's only
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<State> state{State::running};
  std::vector<uint64_t> sums;  // this rank's share of every dataset's checksum, then all
  std::string error;           // this rank's failure
  double write_ms = 0;
};

namespace {

// This rank's share of every checksum (copy 0 of a tensor tp ranks replicate hashes it).
void hash_share(CheckpointJob& j) {
  const size_t n = j.t.views.size();
  for (int k = 0; k < kCheckpointGroups; ++k)
    for (size_t i = 0; i < n && !j.stop.load(std::memory_order_relaxed); ++i) {
      const ParamView& v = j.t.views[i];
      if (v.tp_replica != 0) continue;
      for (const Piece& p : pieces_of(j.shards, true, v.offset, valid_end(v)))
        j.sums[k * n + i] += block_checksum(v, j.bufs[k] + p.at, p.begin - v.offset, p.end - v.offset);
    }
}

// This rank's bytes, hashed beside the writes, fsync'ed. Returns its outcome: done,
// stopped (asked to) or failed (j.error says why).
State write_share(CheckpointJob& j) {
  try {
    std::thread hasher([&j] { hash_share(j); });
    struct Join {
      std::thread& t;
      ~Join() { t.join(); }
    } join{hasher};
    const int fd = ::open(j.tmp.c_str(), O_WRONLY | O_CLOEXEC);
    FLEXSP_CHECK(fd >= 0, "{}: cannot open for writing: {}", j.path, std::strerror(errno));
    struct Close {
      int fd;
      ~Close() { if (fd >= 0) ::close(fd); }
    } closer{fd};
    Close direct_closer{open_direct_for_write(j.tmp)};
    if (direct_closer.fd >= 0)
      write_runs_direct(direct_closer.fd, fd, j.runs, j.bufs, j.path, &j.stop);
    else
      write_runs(fd, j.runs, j.bufs, j.path, &j.stop);
    if (j.stop.load()) return State::stopped;
    FLEXSP_CHECK(::fsync(fd) == 0, "{}: cannot write (fsync): {}", j.path, std::strerror(errno));
    closer.fd = -1;
    FLEXSP_CHECK(::close(fd) == 0, "{}: cannot write (close): {}", j.path, std::strerror(errno));
  } catch (const std::exception& e) {
    j.error = e.what();
    return State::failed;
  }
  return State::done;
}

// The background thread of every rank: its share, then -- with the other ranks' threads,
// on the writer's communicator, whatever happened -- the worst outcome and the summed
// checksums; rank 0 then fills in the checksums and publishes, or removes the file.
void run_job(CheckpointJob& j) {
  const Clock::time_point t0 = Clock::now();
  State mine = write_share(j);
  int worst = static_cast<int>(mine);  // done < failed < stopped
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MAX, j.comm);
  MPI_Allreduce(MPI_IN_PLACE, j.sums.data(), static_cast<int>(j.sums.size()), MPI_UINT64_T, MPI_SUM, j.comm);
  if (j.rank == 0) {
    if (worst == static_cast<int>(State::done)) {
      try {
        fill_checksums(j.tmp, j.path, j.t, j.offsets, j.sums);
        publish(j.dir, j.tmp, j.path, j.keep);
      } catch (const std::exception& e) {
        j.error = e.what();
        mine = State::failed;
      }
    } else {
      std::remove(j.tmp.c_str());
    }
  }
  j.write_ms = ms_since(t0);
  j.state = mine;
}

}  // namespace

CheckpointWriter::CheckpointWriter(MPI_Comm comm, std::string dir, int keep)
    : comm_(comm), dir_(std::move(dir)), keep_(keep) {
  require_mpi_thread_multiple("the checkpoint writer");
  MPI_Comm_dup(comm, &thread_comm_);
  MPI_Comm_rank(comm_, &rank_);
}

CheckpointWriter::~CheckpointWriter() {
  if (job_) {  // the threads finish their collectives with the other ranks', which stop too
    job_->stop = true;
    job_->thread.join();
    if (rank_ == 0) std::remove(job_->tmp.c_str());
  }
  MPI_Comm_free(&thread_comm_);
}

std::string CheckpointWriter::start(const ModelConfig& c, const ParamTable& t, const CheckpointMeta& meta,
                                    const CheckpointShard& mine, double snapshot_ms) {
  FLEXSP_ASSERT(!job_);
  const Clock::time_point t0 = Clock::now();
  auto j = std::make_unique<CheckpointJob>();
  j->comm = thread_comm_;
  j->rank = rank_;
  j->keep = keep_;
  j->dir = dir_;
  j->path = (fs::path(dir_) / checkpoint_file_name(meta.step)).string();
  j->tmp = j->path + ".partial";
  j->step = meta.step;
  j->t = t;
  j->shards = mine.shards;
  j->bufs[0] = mine.params, j->bufs[1] = mine.exp_avg, j->bufs[2] = mine.exp_avg_sq;
  j->offsets.assign(kCheckpointGroups * t.views.size(), kNoOffset);
  agree(comm_, [&] {
    if (rank_ != 0) return;
    const uint64_t bytes = checkpoint_bytes(t);
    check_room(j->path, bytes, "a checkpoint");
    j->offsets = create_checkpoint_file(j->tmp, j->path, c, t, meta, bytes);
  });
  MPI_Bcast(j->offsets.data(), static_cast<int>(j->offsets.size()), MPI_UINT64_T, 0, comm_);
  const ShardRanges* shards[kCheckpointGroups] = {&j->shards, &j->shards, &j->shards};
  j->runs = file_runs(j->t, j->offsets, shards, /*cover=*/true);
  j->sums.assign(j->offsets.size(), 0);
  j->snapshot_ms = snapshot_ms;
  j->stall_ms = snapshot_ms + ms_since(t0);
  j->thread = std::thread(run_job, std::ref(*j));
  job_ = std::move(j);
  return job_->path;
}

std::optional<CheckpointSaved> CheckpointWriter::poll(bool wait) {
  if (!job_) return std::nullopt;
  const Clock::time_point t0 = Clock::now();
  if (wait) job_->thread.join();
  int busy = job_->state == State::running;
  MPI_Allreduce(MPI_IN_PLACE, &busy, 1, MPI_INT, MPI_MAX, comm_);
  if (busy != 0) {
    job_->stall_ms += ms_since(t0);
    return std::nullopt;
  }
  // Finished on every rank (published, or removed after a failure): the job ends here.
  std::unique_ptr<CheckpointJob> j = std::move(job_);
  if (j->thread.joinable()) j->thread.join();
  agree(comm_, [&] {
    if (j->state == State::failed) fail(j->error);
  });
  CheckpointSaved s;
  s.path = j->path;
  s.step = j->step;
  std::error_code ec;
  if (rank_ == 0) s.bytes = fs::file_size(j->path, ec);
  s.stall_ms = j->stall_ms + ms_since(t0);
  s.snapshot_ms = j->snapshot_ms;
  s.write_ms = j->write_ms;
  return s;
}

std::string checkpoint_save(MPI_Comm comm, const std::string& dir, int keep, const ModelConfig& c,
                            const ParamTable& t, const CheckpointMeta& meta,
                            const CheckpointShard& mine) {
  CheckpointWriter w(comm, dir, keep);
  const std::string path = w.start(c, t, meta, mine);
  w.poll(/*wait=*/true);
  return path;
}

}  // namespace flexsp

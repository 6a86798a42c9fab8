// Checkpoints during training: snapshot buffers and the background writer (see
// train_checkpoints.h).
#include "lib/train/train_checkpoints.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "lib/util/error.h"
#include "lib/util/host_memory.h"

namespace flexsp {

namespace {

// Whether every node's snapshots fit in half of its available host memory (collective).
bool snapshots_fit(MPI_Comm comm, uint64_t bytes, double* node_gb, double* avail_gb) {
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  double need = static_cast<double>(bytes);
  MPI_Allreduce(MPI_IN_PLACE, &need, 1, MPI_DOUBLE, MPI_SUM, node);
  MPI_Comm_free(&node);
  const double avail = static_cast<double>(host_memory_available());
  int fits = need <= avail / 2;
  MPI_Allreduce(MPI_IN_PLACE, &fits, 1, MPI_INT, MPI_MIN, comm);
  *node_gb = need / 1e9;
  *avail_gb = avail / 1e9;
  return fits != 0;
}

}  // namespace

TrainCheckpoints::TrainCheckpoints(const CheckpointSection& cfg, MPI_Comm comm, Backend& be,
                                   int64_t elements)
    : be_(be), elements_(elements), writer_(std::make_unique<CheckpointWriter>(comm, cfg.dir, cfg.keep)) {
  if (!cfg.async) return;
  const uint64_t bytes = 3 * static_cast<uint64_t>(elements) * sizeof(float);
  double node_gb = 0, avail_gb = 0;
  async_ = snapshots_fit(comm, bytes, &node_gb, &avail_gb);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (!async_) {
    if (rank == 0)
      std::printf("note: checkpoint.async is off for this run: a snapshot of the state takes %.1f GB of host "
                  "memory per node, more than half of the %.1f GB available; checkpoints are written "
                  "while training waits\n",
                  node_gb, avail_gb);
    return;
  }
  for (float*& b : bufs_) b = static_cast<float*>(be_.alloc_host(static_cast<size_t>(elements) * sizeof(float)));
}

TrainCheckpoints::~TrainCheckpoints() {
  writer_.reset();  // stops a write in flight: its threads read the buffers
  release();
}

void TrainCheckpoints::release() {
  for (float*& b : bufs_) {
    if (async_)
      be_.free_host(b);
    else
      std::free(b);
    b = nullptr;
  }
}

float* const* TrainCheckpoints::snapshot() {
  record(writer_->poll(/*wait=*/true));
  if (!async_) {
    release();
    for (float*& b : bufs_) {
      b = static_cast<float*>(std::malloc(std::max<size_t>(1, static_cast<size_t>(elements_) * sizeof(float))));
      FLEXSP_CHECK(b != nullptr, "out of host memory for a checkpoint's snapshot ({} bytes)", elements_ * 4);
    }
  }
  return bufs_;
}

std::string TrainCheckpoints::start(const ModelConfig& c, const ParamTable& t, const CheckpointMeta& meta,
                                    const ShardRanges& shards, double snapshot_ms, bool wait) {
  const CheckpointShard mine{shards, bufs_[0], bufs_[1], bufs_[2]};
  std::string path;
  try {
    path = writer_->start(c, t, meta, mine, snapshot_ms);
    if (wait || !async_) record(writer_->poll(/*wait=*/true));
  } catch (...) {
    if (!async_) release();
    throw;
  }
  if (!async_) release();
  return path;
}

void TrainCheckpoints::poll() { record(writer_->poll(/*wait=*/false)); }

void TrainCheckpoints::record(std::optional<CheckpointSaved> s) {
  if (s) saved_.push_back(std::move(*s));
}

std::vector<CheckpointSaved> TrainCheckpoints::take_saved() { return std::exchange(saved_, {}); }

}  // namespace flexsp

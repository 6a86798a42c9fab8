// Checkpoints during training (docs/checkpoints.md): the host snapshot of the state that
// a save writes from, and whether writes run in the background (checkpoint.async).
//
// With checkpoint.async the snapshot buffers are allocated once, from the backend's host
// memory (page-locked on a GPU, so the device-to-host copy runs at full speed), and kept:
// a save waits for the write in flight (it reads them), copies the state in, starts the
// write (io/checkpoint/writer.h) and returns; the step after it goes on while a
// background thread writes. Every step boundary polls the write, which publishes it once
// all ranks are done or stops the run with one line if one failed. Async is off when the
// node's snapshots would take more than half of the host memory available at start (a
// note says so): a save then fills temporary buffers and waits for its write.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint/writer.h"
#include "lib/backend/backend.h"
#include "lib/config/config.h"

namespace flexsp {

class TrainCheckpoints {
 public:
  // Collective over comm. elements: the length of each of the three buffers a save
  // fills on this rank (the parameters and the two moments of its share).
  TrainCheckpoints(const CheckpointSection& cfg, MPI_Comm comm, Backend& be, int64_t elements);
  ~TrainCheckpoints();
  TrainCheckpoints(const TrainCheckpoints&) = delete;
  TrainCheckpoints& operator=(const TrainCheckpoints&) = delete;

  bool async() const { return async_; }

  // Collective. Waits for the write in flight, then returns the three buffers to copy the
  // state into (valid until start()'s write is published).
  float* const* snapshot();
  // Collective. Starts writing what snapshot() holds (mine.shards over those buffers);
  // waits for it when not async or when `wait` (the run's last checkpoint).
  // snapshot_ms: the copy's time. Returns the file's path.
  std::string start(const ModelConfig& c, const ParamTable& t, const CheckpointMeta& meta,
                    const ShardRanges& shards, double snapshot_ms, bool wait);
  // Collective at each step boundary: publishes a finished write; throws AgreedFailure
  // (the line printed) when one failed.
  void poll();
  // The checkpoints published since the last call.
  std::vector<CheckpointSaved> take_saved();

 private:
  Backend& be_;
  int64_t elements_ = 0;
  bool async_ = false;
  float* bufs_[3] = {};
  std::unique_ptr<CheckpointWriter> writer_;
  std::vector<CheckpointSaved> saved_;
  void release();
  void record(std::optional<CheckpointSaved> s);
};

}  // namespace flexsp

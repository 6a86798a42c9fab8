// Writing checkpoints off the training's critical path (docs/checkpoints.md).
//
// start (collective, the caller's thread): rank 0 checks that the file system has room
// for the whole file and creates the file's HDF5 structure (file_format.h); every rank
// learns the datasets' byte offsets; a background thread on every rank takes over and
// start returns. The thread writes the rank's share of the state (its ZeRO shard, cut
// among the ranks that replicate it; never a gathered tensor) from the caller's host
// buffers with pwritev (raw_io.h) while a second thread hashes the same share
// (checksum.h), and fsyncs. Then the ranks' threads agree, on a communicator of their
// own, on the worst outcome and the summed checksums; rank 0's fills the checksums in
// and publishes -- the file renamed into place, `latest` replaced, all but the newest
// checkpoint.keep removed -- or removes the file if any rank failed.
//
// poll (collective, the caller's thread, at a step boundary while a write is in flight):
// one small all-reduce tells every rank whether all threads are done, so that every rank
// learns the outcome at the same step; a failure anywhere (a full disk, any I/O error)
// then ends the run on every rank with one line naming the file, `latest` and every
// earlier checkpoint untouched. A synchronous save is start followed by poll(wait).
//
// The background threads call no HDF5 (the library is not thread-safe here; the report
// and the dataset use it on the caller's thread) and use MPI only on their own
// communicator (flexsp runs with MPI_THREAD_MULTIPLE). A process killed at any point
// leaves at most a `.partial` file behind, never a visible half-written checkpoint.
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>

#include "io/checkpoint/checkpoint.h"

namespace flexsp {

// A checkpoint made visible.
struct CheckpointSaved {
  std::string path;
  int64_t step = 0;
  uint64_t bytes = 0;   // the file's size (rank 0)
  double stall_ms = 0;     // what training waited for it: the snapshot, start, polls, waits
  double snapshot_ms = 0;  // of which the caller's copy of the state (start's snapshot_ms)
  double write_ms = 0;     // the background write, from start to published (rank 0)
};

struct CheckpointJob;  // a write in flight (writer.cpp)

class CheckpointWriter {
 public:
  // comm, dir and keep as for checkpoint_save.
  CheckpointWriter(MPI_Comm comm, std::string dir, int keep);
  // Stops a write in flight and waits for its threads; rank 0 removes the unpublished
  // file (the previous checkpoint stays the latest).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Collective; no write may be in flight (poll(true) first). Starts writing the
  // checkpoint of meta.step from mine, whose buffers must stay valid and unchanged until
  // a poll has published it (or failed). snapshot_ms: what the caller spent making mine,
  // counted in the stall. Returns the checkpoint's path. Throws AgreedFailure (after one
  // line, nothing left behind) when the room check or the file's creation fails.
  std::string start(const ModelConfig& c, const ParamTable& t, const CheckpointMeta& meta,
                    const CheckpointShard& mine, double snapshot_ms = 0);

  // Collective while a write is in flight (free otherwise). Publishes it once every
  // rank's write has finished; wait: waits for that. Returns what was published, if
  // anything. Throws AgreedFailure when a write failed on any rank (see above).
  std::optional<CheckpointSaved> poll(bool wait);

  bool in_flight() const { return job_ != nullptr; }

 private:
  MPI_Comm comm_;                       // the caller's thread's
  MPI_Comm thread_comm_ = MPI_COMM_NULL;  // the background threads' (a duplicate)
  std::string dir_;
  int keep_ = 1, rank_ = 0;
  std::unique_ptr<CheckpointJob> job_;
};

}  // namespace flexsp

// Building the communicators for buffers in backend memory, as comm_choice.h chooses them.
// The set is built once per run, collectively, after the backend exists, and removed
// before the backend dies (BackendComms): staging holds the backend, NCCL its stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/backend/backend.h"
#include "lib/comm/comm_choice.h"
#include "lib/comm/comm_staged.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"

namespace flexsp {

// Collective over host_world: true when every rank has a GPU and no two share one.
bool ranks_have_own_gpus(const Grid& g, Comm& host_world);
// True when the n ids of `width` bytes each, back to back, are pairwise distinct.
bool ids_distinct(const uint8_t* ids, int n, size_t width);

// The groups of `host`, staged through the mover's host memory (one StagingArea).
std::unique_ptr<CommSet> staged_comm_set(const CommSet& host, std::shared_ptr<HostMover> mover);
// A HostMover over a backend's copies and host allocations. be must outlive it.
std::shared_ptr<HostMover> backend_mover(Backend& be);

// Sets groups.device for the choice (nothing for host; one staged set for every purpose;
// an NCCL set per purpose) and resets it on destruction.
// Collective over the grid. Keep it inside the backend's lifetime.
class BackendComms {
 public:
  BackendComms(Groups& groups, const Grid& grid, Backend& be, CommChoice choice);
  ~BackendComms();
  BackendComms(const BackendComms&) = delete;
  BackendComms& operator=(const BackendComms&) = delete;

 private:
  Groups& groups_;
};

}  // namespace flexsp

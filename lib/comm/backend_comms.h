// The communicators for buffers in backend memory (parallel.comm), and building them.
//
//   parallel.comm  cpu backend                  cuda backend
//   auto           the host set (MPI)           NCCL where built and every rank has a GPU
//                                               of its own, else MPI staged
//   mpi            the host set                 MPI staged through page-locked host memory
//   nccl           error                        NCCL (error: not built, or a GPU shared)
//   mpi-staged     MPI staged (tests the path)  MPI staged
//
// Design choices:
//  - Debian's Open MPI is not CUDA-aware, so MPI never sees a device pointer: the staged
//    set (comm_staged.h) copies through host buffers with the backend's own copies.
//  - NCCL refuses two ranks of one communicator on one GPU, so `auto` checks the GPUs'
//    UUIDs over all ranks and falls back to staged MPI when any GPU is shared (several
//    ranks on one GPU is how a one-GPU machine tests multi-rank training).
//  - The set is built once per run, collectively, after the backend exists, and removed
//    before the backend dies (BackendComms): staging holds the backend, NCCL its stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "lib/backend/backend.h"
#include "lib/comm/comm_staged.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"

namespace flexsp {

enum class CommChoice { host, staged, nccl };
const char* comm_choice_name(CommChoice c);  // "mpi", "mpi-staged", "nccl"

// The choice for parallel.comm = mode (no communication: a pure function). Throws Error
// naming parallel.comm when the mode cannot be met.
CommChoice choose_comm(const std::string& mode, const std::string& backend, bool nccl_built,
                       bool gpu_per_rank);

// Whether this build has the NCCL communicator.
bool nccl_built();

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

// The communicators of a grid, created once at start-up. Creating a communicator is
// collective over the whole world, so doing it lazily inside a step (when only some
// ranks need a group) would deadlock; instead every aligned power-of-two block size is
// split up front: log2(world)+1 splits, cheap. A plan then only looks groups up.
//
// Two sets of the same groups: the host set (MPI, host memory: scalars, plans, timings)
// and, while a device backend trains, a set for buffers in the backend's memory (NCCL,
// or MPI staged through host memory; lib/platform/backend_comms.h). Callers name the memory
// by the set they pick: for_backend() for backend buffers, the host members otherwise.
// With the CPU backend there is no second set: backend memory is host memory.
//
// Purposes: communication that runs beside compute is kept apart by what it is for
// (CommPurpose): gradient reductions, parameter gathers and Ulysses' all-to-alls. A
// device transport that queues work on streams (NCCL) builds one set per purpose, each
// with its own communicators and stream, so a started gradient reduce-scatter does not
// hold up the next unit's parameter gather queued behind it, nor an all-to-all. Transports
// that order work on the host (MPI, staged MPI) serve every purpose with one set.
//
// The host set owns the progress engine of its MPI communicators (lib/comm/progress.h):
// started collectives advance while the rank computes.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "lib/comm/comm.h"
#include "lib/comm/progress.h"
#include "lib/grid/grid.h"

namespace flexsp {

enum class CommPurpose : int { grad_reduce, param_gather, all_to_all, count };
constexpr size_t kCommPurposes = static_cast<size_t>(CommPurpose::count);

struct CommSet {
  std::unique_ptr<Comm> world;       // the grid's communicator
  std::unique_ptr<Comm> node;        // the ranks of my node (emulated nodes included)
  std::unique_ptr<Comm> cross_node;  // one rank per node: those with my local rank
  // blocks[k]: my aligned block of 2^k ranks [rank & ~(2^k-1), +2^k); null when that
  // block would run past the last rank (world size not a multiple of 2^k).
  std::vector<std::unique_ptr<Comm>> blocks;

  // My block of d ranks; throws Error if d is not a power of two or the block is incomplete.
  Comm& block(int d) const;
};

// The host set (the grid owns the world's MPI handle) plus the optional backend sets.
struct Groups : CommSet {
  // device[p]: the set for purpose p; a null entry falls back to device[0] (grad_reduce),
  // and a null device[0] to the host set (host memory serves the backend too).
  std::array<std::unique_ptr<CommSet>, kCommPurposes> device;
  std::shared_ptr<ProgressEngine> progress;  // advances the host set's started collectives

  const CommSet& for_backend(CommPurpose p = CommPurpose::grad_reduce) const {
    if (const auto& d = device[static_cast<size_t>(p)]) return *d;
    if (device[0]) return *device[0];
    return *this;
  }
  bool has_device() const { return device[0] != nullptr; }
  void reset_device() {
    for (auto& d : device) d.reset();
  }
};

// Collective over g.comm: the host set, with a progress engine (needs
// MPI_THREAD_MULTIPLE; throws Error naming the provided level otherwise).
Groups groups_create(const Grid& g);

}  // namespace flexsp

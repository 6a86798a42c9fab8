// The communicators of a grid, created once at start-up. Creating a communicator is
// collective over the whole world, so doing it lazily inside a step (when only some
// ranks need a group) would deadlock; instead every aligned power-of-two block size is
// split up front: log2(world)+1 splits, cheap. A plan then only looks groups up.
//
// Two sets of the same groups: the host set (MPI, host memory: scalars, plans, timings)
// and, while a device backend trains, a set for buffers in the backend's memory (NCCL,
// or MPI staged through host memory; lib/comm/backend_comms.h). Callers name the memory
// by the set they pick: for_backend() for backend buffers, the host members otherwise.
// With the CPU backend there is no second set: backend memory is host memory.
#pragma once

#include <memory>
#include <vector>

#include "lib/comm/comm.h"
#include "lib/grid/grid.h"

namespace flexsp {

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

// The host set (the grid owns the world's MPI handle) plus the optional backend set.
struct Groups : CommSet {
  std::unique_ptr<CommSet> device;  // null: host memory serves the backend too
  const CommSet& for_backend() const {
    if (device) return *device;
    return *this;
  }
};

// Collective over g.comm: the host set.
Groups groups_create(const Grid& g);

}  // namespace flexsp

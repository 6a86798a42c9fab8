// The communicators of a grid, created once at start-up. Creating a communicator is
// collective over the whole world, so doing it lazily inside a step (when only some
// ranks need a group) would deadlock; instead every aligned power-of-two block size is
// split up front: log2(world)+1 splits, cheap. A plan then only looks groups up.
#pragma once

#include <memory>
#include <vector>

#include "lib/comm/comm.h"
#include "lib/grid/grid.h"

namespace flexsp {

struct Groups {
  std::unique_ptr<Comm> world;       // the grid's communicator (the grid owns the MPI handle)
  std::unique_ptr<Comm> node;        // the ranks of my node (emulated nodes included)
  std::unique_ptr<Comm> cross_node;  // one rank per node: those with my local rank
  // blocks[k]: my aligned block of 2^k ranks [rank & ~(2^k-1), +2^k); null when that
  // block would run past the last rank (world size not a multiple of 2^k).
  std::vector<std::unique_ptr<Comm>> blocks;

  // My block of d ranks; throws Error if d is not a power of two or the block is incomplete.
  Comm& block(int d) const;
};

// Collective over g.comm.
Groups groups_create(const Grid& g);

}  // namespace flexsp

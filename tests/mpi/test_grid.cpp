// Process grid and group communicators: node numbering, emulated nodes, aligned blocks.
#include <gtest/gtest.h>

#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/util/error.h"

namespace flexsp {
namespace {

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

TEST(Grid, DetectedNodesFormContiguousBlocks) {
  Grid g = grid_create(MPI_COMM_WORLD, 0);
  EXPECT_EQ(g.size, world_size());
  EXPECT_EQ(g.nodes * g.ranks_per_node, g.size);
  EXPECT_EQ(g.rank, g.node * g.ranks_per_node + g.local_rank);
  EXPECT_FALSE(g.emulated);
  // One machine: every rank shares memory with every other.
  EXPECT_EQ(g.nodes, 1);
  EXPECT_EQ(g.real_local_rank, g.local_rank);
#ifndef FLEXSP_HAVE_CUDA
  EXPECT_EQ(g.device, -1);
#endif
  grid_destroy(g);
}

TEST(Grid, EmulatedNodes) {
  const int n = world_size();
  for (int rpn = 1; rpn <= n; rpn *= 2) {
    if (n % rpn) continue;
    Grid g = grid_create(MPI_COMM_WORLD, rpn);
    EXPECT_TRUE(g.emulated);
    EXPECT_EQ(g.ranks_per_node, rpn);
    EXPECT_EQ(g.nodes, n / rpn);
    EXPECT_EQ(g.node, g.rank / rpn);
    EXPECT_EQ(g.local_rank, g.rank % rpn);
    Groups gr = groups_create(g);
    EXPECT_EQ(gr.node->size(), rpn);
    EXPECT_EQ(gr.node->rank(), g.local_rank);
    EXPECT_EQ(gr.cross_node->size(), n / rpn);
    EXPECT_EQ(gr.cross_node->rank(), g.node);
    // Block within node iff the block does not cross a multiple of rpn.
    for (int d = 1; d <= n; d *= 2)
      for (int first = 0; first + d <= n; first += d)
        EXPECT_EQ(grid_block_in_node(g, first, d), d <= rpn);
    gr = Groups{};
    grid_destroy(g);
  }
}

TEST(Grid, RanksPerNodeMustDivideWorld) {
  const int n = world_size();
  if (n < 2) GTEST_SKIP() << "needs 2+ ranks";
  // n + 1 never divides n: every rank throws the same Error (no hang).
  EXPECT_THROW(grid_create(MPI_COMM_WORLD, n + 1), Error);
}

TEST(Groups, AlignedBlocks) {
  Grid g = grid_create(MPI_COMM_WORLD, 0);
  Groups gr = groups_create(g);
  for (int d = 1; d <= g.size; d *= 2) {
    Comm& b = gr.block(d);
    EXPECT_EQ(b.size(), d);
    EXPECT_EQ(b.rank(), g.rank % d);
    // The block's members are ranks [first, first + d): sum of grid ranks checks it.
    int64_t r = g.rank, sum = 0;
    b.all_reduce(&r, &sum, 1, DType::i64, ReduceOp::sum);
    const int64_t first = g.rank / d * d;
    EXPECT_EQ(sum, d * first + int64_t(d) * (d - 1) / 2);
  }
  EXPECT_THROW(gr.block(3), Error);
  EXPECT_THROW(gr.block(2 * g.size), Error);
  gr = Groups{};
  grid_destroy(g);
}

TEST(Grid, PipelineStagesAreOutermost) {
  const int n = world_size();
  for (int pp = 1; pp <= n; pp *= 2) {
    const int rps = n / pp;
    for (int tp = 1; tp <= rps; tp *= 2) {
      // Emulated nodes of 2 ranks (when possible): stages both inside and across nodes.
      const int rpn = n % 2 == 0 ? 2 : 1;
      if (rpn % tp != 0) continue;
      Grid g = grid_create(MPI_COMM_WORLD, rpn, tp, pp);
      EXPECT_EQ(g.pp_size, pp);
      EXPECT_EQ(g.pp_rank, g.rank / rps);
      EXPECT_EQ(g.dp_size, rps / tp);
      EXPECT_EQ(g.rank, g.pp_rank * rps + g.dp_rank * tp + g.tp_rank);
      Grid s = grid_stage(g);
      EXPECT_EQ(s.size, rps);
      EXPECT_EQ(s.rank, g.rank % rps);
      EXPECT_EQ(s.pp_size, 1);
      EXPECT_EQ(s.dp_rank, g.dp_rank);
      EXPECT_EQ(s.nodes * s.ranks_per_node, s.size);
      grid_destroy(s);
      grid_destroy(g);
    }
  }
  if (n >= 2) {
    EXPECT_THROW(grid_create(MPI_COMM_WORLD, 0, 1, n + 1), Error);
  }
}

}  // namespace
}  // namespace flexsp

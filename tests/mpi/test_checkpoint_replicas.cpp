// Checkpoint loads on ranks that hold the same elements (replicas: ZeRO 0's state, ZeRO 1
// and 2's parameters): each replica reads and hashes a share and the others receive it.
// Every rank must end with every element it holds, over several ranges, beside a buffer
// whose ranks hold different pieces (read as before): with the replicas on one node (the
// shares pass through a shared-memory window) and on a node each, as the grid numbers
// nodes (--ranks-per-node 1: the shares go by broadcasts).
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint.h"
#include "lib/config/config.h"

namespace flexsp {
namespace {

void load_on_nodes(bool node_per_rank) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  ModelSection ms;
  ms.preset = "tiny";
  ms.hidden = 64;
  const ModelConfig c = resolve_model_config(ms, {}, 300);
  const ParamTable t = make_param_table(c);
  std::mt19937 g(11);  // the same state on every rank
  std::normal_distribution<float> d;
  std::vector<float> p(t.total), m(t.total), v(t.total);
  for (int64_t i = 0; i < t.total; ++i) p[i] = d(g), m[i] = d(g), v[i] = std::abs(d(g));

  char dir[4096] = {};
  if (rank == 0) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "flexsp_replicas_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    tmpl.copy(dir, sizeof dir - 1);
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  ShardRanges all;  // ZeRO 0: every rank holds everything and writes its share
  all.ranges = {{0, t.total}};
  all.replica = rank;
  all.replicas = world;
  CheckpointMeta meta;
  meta.step = 3;
  meta.world_size = world;
  meta.version = "test";
  const std::string path = checkpoint_save(MPI_COMM_WORLD, dir, 1, c, t, meta, {all, p.data(), m.data(), v.data()});

  // Parameters: replicated over two ranges that cut tensors mid-row. Moments: a piece per
  // rank, no replicas.
  ShardRanges params = all;
  const int64_t cut = t.total / 3 + 7;
  params.ranges = {{0, cut}, {cut, t.total}};
  ShardRanges state;
  state.ranges = {{t.total * rank / world, t.total * (rank + 1) / world}};
  std::vector<float> bp(t.total, NAN), bm(state.size(), NAN), bv(state.size(), NAN);
  checkpoint_load(MPI_COMM_WORLD, node_per_rank ? rank : 0, path, c, t, params, bp.data(), state, bm.data(), bv.data());
  for (int64_t i = 0; i < t.total; ++i) ASSERT_EQ(bp[i], p[i]) << "parameter " << i;
  const int64_t first = state.ranges[0].first;
  for (int64_t i = 0; i < state.size(); ++i) {
    ASSERT_EQ(bm[i], m[first + i]) << "first moment " << first + i;
    ASSERT_EQ(bv[i], v[first + i]) << "second moment " << first + i;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove_all(dir);
}

TEST(CheckpointReplicas, EveryRankEndsWithEveryElementOnOneNode) { load_on_nodes(false); }

TEST(CheckpointReplicas, EveryRankEndsWithEveryElementOnANodeEach) { load_on_nodes(true); }

}  // namespace
}  // namespace flexsp

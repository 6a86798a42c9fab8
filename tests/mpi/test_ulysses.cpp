// Ulysses attention in isolation: each rank of a group holds a token shard of q, k, v;
// the all-to-all + local-heads attention + all-to-all back must equal full attention over
// the whole stream (forward and backward), for GQA with split and replicated kv heads,
// streams shorter than the group (empty shards) and 1-token sequences; buffers reserved
// for longer streams than the one that runs change nothing, and are allocated once.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/runtime/ulysses.h"
#include "lib/util/error.h"
#include "support/attention_reference.h"
#include "support/rel_err.h"

namespace flexsp {
namespace {

void check_case(Groups& groups, int d, int heads, int kv_heads, std::vector<int32_t> cu,
                int64_t reserve_per_rank = 0) {
  const ModelConfig c = testing::attention_model(heads, kv_heads);
  Comm& comm = groups.block(d);
  const int j = comm.rank();
  const int64_t T = cu.back();
  const int nseq = static_cast<int>(cu.size()) - 1;
  const size_t Q = size_t(heads) * 8, K = size_t(kv_heads) * 8;
  auto be = make_cpu_backend();
  // Reference: full attention over the stream (the same inputs on every rank).
  const testing::FullAttention f = testing::full_attention(*be, c, cu);
  const auto &q = f.q, &k = f.k, &v = f.v, &dout = f.dout, &out = f.out, &dq = f.dq,
             &dk = f.dk, &dv = f.dv;
  // Ulysses on this rank's shard.
  const auto off = shard_offsets(T, d);
  const int64_t lo = off[j], n = off[j + 1] - off[j];
  auto slice = [&](const std::vector<float>& x, size_t w) {
    return std::vector<float>(x.begin() + lo * w, x.begin() + (lo + n) * w);
  };
  UlyssesAttention u(*be, c, std::max<int64_t>(T, reserve_per_rank * d), reserve_per_rank);
  u.set_layout(comm, cu.data(), nseq, off);
  auto ql = slice(q, Q), kl = slice(k, K), vl = slice(v, K), dol = slice(dout, Q);
  std::vector<float> ol(n * Q + 1), dql(n * Q + 1), dkl(n * K + 1), dvl(n * K + 1);
  u.forward(0, ql.data(), kl.data(), vl.data(), ol.data());
  u.backward(0, dol.data(), ql.data(), kl.data(), vl.data(), ol.data(), dql.data(), dkl.data(),
             dvl.data());
  ol.resize(n * Q), dql.resize(n * Q), dkl.resize(n * K), dvl.resize(n * K);
  if (n == 0) return;
  EXPECT_LT(norm_rel_err(ol, slice(out, Q)), 1e-6) << "d=" << d << " kv=" << kv_heads;
  EXPECT_LT(norm_rel_err(dql, slice(dq, Q)), 1e-6) << "d=" << d << " kv=" << kv_heads;
  EXPECT_LT(norm_rel_err(dkl, slice(dk, K)), 1e-6) << "d=" << d << " kv=" << kv_heads;
  EXPECT_LT(norm_rel_err(dvl, slice(dv, K)), 1e-6) << "d=" << d << " kv=" << kv_heads;
}

TEST(Ulysses, EqualsFullAttention) {
  Grid g = grid_create(MPI_COMM_WORLD, 0);
  Groups groups = groups_create(g);
  for (int d = 1; d <= g.size; d *= 2) {
    if (8 % d) continue;
    check_case(groups, d, 8, 8, {0, 5, 6, 40, 41, 100});  // kv = heads
    check_case(groups, d, 8, 4, {0, 37, 38, 90});          // split or replicated
    check_case(groups, d, 8, 1, {0, 1, 2, 70});            // one kv head for all
    check_case(groups, d, 8, 2, {0, 1, 2, 3});             // fewer tokens than ranks
    check_case(groups, d, 8, 4, {0, 37, 38, 90}, 64);      // buffers for 64 tokens a rank
  }
  groups = Groups{};
  grid_destroy(g);
}

// The backend bytes held after set_layout of a stream of t tokens, then of a longer one.
std::pair<size_t, size_t> held_after(Comm& comm, Backend& be, UlyssesAttention& u, int64_t t1,
                                     int64_t t2) {
  const int d = comm.size();
  std::vector<int32_t> a{0, static_cast<int32_t>(t1)}, b{0, static_cast<int32_t>(t2)};
  u.set_layout(comm, a.data(), 1, shard_offsets(t1, d));
  const size_t first = be.allocated_bytes();
  u.set_layout(comm, b.data(), 1, shard_offsets(t2, d));
  return {first, be.allocated_bytes()};
}

TEST(Ulysses, ReserveAllocatesOncePerGroupSize) {
  Grid g = grid_create(MPI_COMM_WORLD, 0);
  Groups groups = groups_create(g);
  const ModelConfig c = testing::attention_model(8, 4);
  for (int d = 1; d <= g.size && 8 % d == 0; d *= 2) {
    Comm& comm = groups.block(d);
    auto be = make_cpu_backend();
    {  // reserved for 64 tokens a rank: a stream of 10 per rank, then 64, allocate the same
      UlyssesAttention u(*be, c, 64 * d, 64);
      const auto [first, then] = held_after(comm, *be, u, 10 * d, 64 * d);
      EXPECT_EQ(then, first) << "d=" << d;
    }
    {  // no reserve: sized for each stream, so the longer one grows them
      UlyssesAttention u(*be, c, 64 * d);
      const auto [first, then] = held_after(comm, *be, u, 10 * d, 64 * d);
      EXPECT_GT(then, first) << "d=" << d;
    }
  }
  groups = Groups{};
  grid_destroy(g);
}

TEST(Ulysses, RejectsGroupsTheModelCannotRun) {
  ModelConfig c;
  c.heads = 12;
  c.kv_heads = 3;
  EXPECT_THROW(ulysses_check(c, 8), Error);  // 8 does not divide 12 heads
  EXPECT_THROW(ulysses_check(c, 4), Error);  // 4 and 3 kv heads
  EXPECT_NO_THROW(ulysses_check(c, 1));
  c.kv_heads = 2;
  EXPECT_NO_THROW(ulysses_check(c, 4));
}

}  // namespace
}  // namespace flexsp

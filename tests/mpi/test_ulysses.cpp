// Ulysses attention in isolation: each rank of a group holds a token shard of q, k, v;
// the all-to-all + local-heads attention + all-to-all back must equal full attention over
// the whole stream (forward and backward), for GQA with split and replicated kv heads,
// streams shorter than the group (empty shards) and 1-token sequences.
#include <gtest/gtest.h>

#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/runtime/ulysses.h"
#include "lib/util/error.h"
#include "support/attention_reference.h"
#include "support/rel_err.h"

namespace flexsp {
namespace {

void check_case(Groups& groups, int d, int heads, int kv_heads, std::vector<int32_t> cu) {
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
  UlyssesAttention u(*be, c, T);
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

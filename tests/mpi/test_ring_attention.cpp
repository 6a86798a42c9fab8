// Ring attention and USP in isolation: every member of a u x r group holds its zigzag share
// of q, k, v (lib/runtime/ring_attention.h); the ring (with Ulysses' all-to-alls around it
// when u > 1) must equal full attention over the whole stream, forward and backward, for
// GQA, documents of 1, 2, odd and 2r-1 tokens, many documents, and padded positions; a
// reserve sizes the buffers once per group shape.
#include <gtest/gtest.h>

#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/runtime/ring_attention.h"
#include "support/attention_reference.h"
#include "support/rel_err.h"

namespace flexsp {
namespace {

using testing::share_rows;

void check_case(Groups& groups, int d, int u, int multiple, int heads, int kv_heads,
                const std::vector<int32_t>& cu) {
  const ModelConfig c = testing::attention_model(heads, kv_heads, 2);
  const int r = d / u;
  Comm& group = groups.block(d);
  const int j = group.rank();
  const int64_t T = cu.back();
  const int nseq = static_cast<int>(cu.size()) - 1;
  const size_t Q = size_t(heads) * 8, K = size_t(kv_heads) * 8;
  auto be = make_cpu_backend();
  const testing::FullAttention f = testing::full_attention(*be, c, cu);
  const auto &q = f.q, &k = f.k, &v = f.v, &dout = f.dout, &out = f.out, &dq = f.dq,
             &dk = f.dk, &dv = f.dv;

  const ZigzagLayout z = zigzag_layout(cu.data(), nseq, r);
  const auto padded = cp_padded_tokens(z, multiple);
  const auto idx = zigzag_indices(z, j / u);
  const auto off = shard_offsets(padded[j / u], u);
  const int64_t lo = off[j % u], hi = off[j % u + 1], n = hi - lo;
  RingAttention ring(*be, c, T + d * multiple);
  ring.set_layout(group, groups.block(u), z, padded);
  auto ql = share_rows(q, Q, idx, lo, hi, 0.5f), kl = share_rows(k, K, idx, lo, hi, 0.5f),
       vl = share_rows(v, K, idx, lo, hi, 0.5f), dol = share_rows(dout, Q, idx, lo, hi, 0.f);
  std::vector<float> ol(n * Q + 1), dql(n * Q + 1), dkl(n * K + 1), dvl(n * K + 1);
  for (int layer = 0; layer < 2; ++layer) {
    ring.forward(layer, ql.data(), kl.data(), vl.data(), ol.data());
  }
  for (int layer = 1; layer >= 0; --layer)
    ring.backward(layer, dol.data(), ql.data(), kl.data(), vl.data(), ol.data(), dql.data(),
                  dkl.data(), dvl.data());
  ol.resize(n * Q), dql.resize(n * Q), dkl.resize(n * K), dvl.resize(n * K);
  const std::string what = "d=" + std::to_string(d) + " u=" + std::to_string(u) +
                           " kv=" + std::to_string(kv_heads) + " T=" + std::to_string(T);
  // Padding rows: out 0 and no gradient.
  EXPECT_LT(norm_rel_err(ol, share_rows(out, Q, idx, lo, hi, 0.f)), 1e-6) << what;
  EXPECT_LT(norm_rel_err(dql, share_rows(dq, Q, idx, lo, hi, 0.f)), 1e-6) << what;
  EXPECT_LT(norm_rel_err(dkl, share_rows(dk, K, idx, lo, hi, 0.f)), 1e-6) << what;
  EXPECT_LT(norm_rel_err(dvl, share_rows(dv, K, idx, lo, hi, 0.f)), 1e-6) << what;
}

TEST(RingAttention, EqualsFullAttention) {
  Grid g = grid_create(MPI_COMM_WORLD, 0);
  Groups groups = groups_create(g);
  for (int d = 2; d <= g.size; d *= 2) {
    for (int u = 1; u < d; u *= 2) {
      const int r = d / u;
      // Documents of 1, 2, odd and 2r - 1 tokens, and longer ones.
      check_case(groups, d, u, 1, 4, 4, {0, 1, 3, 10, 10 + 2 * r - 1, 60, 61, 100});
      check_case(groups, d, u, 2, 4, 2, {0, 37, 38, 90});  // padded positions
      check_case(groups, d, u, 1, 4, 1, {0, 1, 2, 3, 4, 5});  // many tiny documents
      check_case(groups, d, u, 1, 4, 4, {0, 1});               // one token for the group
      std::vector<int32_t> many{0};
      for (int i = 0; i < 40; ++i) many.push_back(many.back() + 1 + (i * 7) % 13);
      check_case(groups, d, u, 3, 4, 2, many);
    }
  }
  groups = Groups{};
  grid_destroy(g);
}

// The backend bytes held after set_layout of a one-document stream of t1 tokens, then t2.
std::pair<size_t, size_t> held_after(Groups& groups, Backend& be, RingAttention& ring, int d, int u,
                                     int32_t t1, int32_t t2) {
  size_t held[2];
  int i = 0;
  for (int32_t t : {t1, t2}) {
    const std::vector<int32_t> cu{0, t};
    const ZigzagLayout z = zigzag_layout(cu.data(), 1, d / u);
    ring.set_layout(groups.block(d), groups.block(u), z, cp_padded_tokens(z, u));
    held[i++] = be.allocated_bytes();
  }
  return {held[0], held[1]};
}

TEST(RingAttention, ReserveAllocatesOncePerGroupShape) {
  Grid g = grid_create(MPI_COMM_WORLD, 0);
  Groups groups = groups_create(g);
  const ModelConfig c = testing::attention_model(4, 2, 2);
  for (int d = 2; d <= g.size; d *= 2)
    for (int u = 1; u < d && u <= 2; u *= 2) {
      auto be = make_cpu_backend();
      const std::string what = "d=" + std::to_string(d) + " u=" + std::to_string(u);
      {  // reserved for 64 tokens a rank: a stream of 10 per rank, then 64, allocate the same
        RingAttention ring(*be, c, 64 * d + 2 * d, 64);
        const auto [first, then] = held_after(groups, *be, ring, d, u, 10 * d, 64 * d);
        EXPECT_EQ(then, first) << what;
      }
      {  // no reserve: sized for each stream, so the longer one grows them
        RingAttention ring(*be, c, 64 * d + 2 * d);
        const auto [first, then] = held_after(groups, *be, ring, d, u, 10 * d, 64 * d);
        EXPECT_GT(then, first) << what;
      }
    }
  groups = Groups{};
  grid_destroy(g);
}

}  // namespace
}  // namespace flexsp

// Seq1F1B's chunks in a ring / USP group (lib/runtime/ring_chunks.h) in isolation: a
// stream cut into chunks (seq_chunks_cut), each chunk zigzag-split over the ring on its
// own, forwards in chunk order and backwards in reverse over 2 layers, must equal full
// causal attention over the whole stream (output, dq, dk, dv of every member's rows), for
// GQA, padded positions and documents of 1, 2, odd and 2r-1 tokens (empty segments).
#include <gtest/gtest.h>

#include <memory>

#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/runtime/ring_chunks.h"
#include "support/attention_reference.h"
#include "support/rel_err.h"

namespace flexsp {
namespace {

using testing::share_rows;
using testing::stream_chunks;

struct Member : testing::RingChunkMember {  // one chunk's state on this rank
  std::vector<float> q, k, v, dout, out;
};

void check_case(Groups& groups, int d, int u, int multiple, int chunks, int kv_heads,
                const std::vector<int32_t>& cu) {
  const int heads = 4, layers = 2;
  const ModelConfig c = testing::attention_model(heads, kv_heads, layers);
  Comm& group = groups.block(d);
  const size_t Q = size_t(heads) * 8, K = size_t(kv_heads) * 8;
  auto be = make_cpu_backend();
  const testing::FullAttention f = testing::full_attention(*be, c, cu);

  const std::vector<HostMicroBatch> parts = stream_chunks(cu, chunks);
  SeqChunkScratch scratch;
  std::vector<Member> m(static_cast<size_t>(chunks));
  std::vector<RingChunkAttention*> before;
  for (int i = 0; i < chunks; ++i) {
    Member& x = m[i];
    testing::ring_chunk_member(*be, c, parts[i], u, multiple, group, groups.block(u), cu.back() + d * multiple,
                               scratch, before, x);
    x.q = share_rows(f.q, Q, x.src, x.lo, x.hi, 0.5f);
    x.k = share_rows(f.k, K, x.src, x.lo, x.hi, 0.5f);
    x.v = share_rows(f.v, K, x.src, x.lo, x.hi, 0.5f);
    x.dout = share_rows(f.dout, Q, x.src, x.lo, x.hi, 0.f);
    x.out.assign(x.q.size() + 1, 0.f);
    for (int l = 0; l < layers; ++l)
      x.op->forward(l, x.q.data(), x.k.data(), x.v.data(), x.out.data());
  }
  const std::string what = "d=" + std::to_string(d) + " u=" + std::to_string(u) +
                           " kv=" + std::to_string(kv_heads) + " chunks=" +
                           std::to_string(chunks) + " T=" + std::to_string(cu.back());
  for (int i = chunks - 1; i >= 0; --i) {
    Member& x = m[i];
    const size_t n = static_cast<size_t>(x.hi - x.lo);
    for (int l = layers - 1; l >= 0; --l) {
      std::vector<float> dq(n * Q + 1), dk(n * K + 1), dv(n * K + 1);
      x.op->backward(l, x.dout.data(), x.q.data(), x.k.data(), x.v.data(), x.out.data(),
                     dq.data(), dk.data(), dv.data());
      dq.resize(n * Q), dk.resize(n * K), dv.resize(n * K);
      // Every layer sees the same data: each one's gradients are the whole ones.
      EXPECT_LT(norm_rel_err(dq, share_rows(f.dq, Q, x.src, x.lo, x.hi, 0.f)), 1e-5) << what << " chunk " << i;
      EXPECT_LT(norm_rel_err(dk, share_rows(f.dk, K, x.src, x.lo, x.hi, 0.f)), 1e-5) << what << " chunk " << i;
      EXPECT_LT(norm_rel_err(dv, share_rows(f.dv, K, x.src, x.lo, x.hi, 0.f)), 1e-5) << what << " chunk " << i;
    }
    x.out.resize(n * Q);
    EXPECT_LT(norm_rel_err(x.out, share_rows(f.out, Q, x.src, x.lo, x.hi, 0.f)), 1e-5) << what << " chunk " << i;
  }
}

TEST(RingChunkAttention, EqualsFullAttention) {
  Grid g = grid_create(MPI_COMM_WORLD, 0);
  Groups groups = groups_create(g);
  for (int d = 2; d <= g.size; d *= 2)
    for (int u = 1; u < d; u *= 2) {
      const int r = d / u;
      for (int chunks : {2, 3}) {
        // Documents of 1, 2, odd and 2r - 1 tokens, and longer ones.
        check_case(groups, d, u, 1, chunks, 4, {0, 1, 3, 10, 10 + 2 * r - 1, 60, 61, 100});
        check_case(groups, d, u, 2, chunks, 2, {0, 37, 38, 90});  // padded positions
        check_case(groups, d, u, 1, chunks, 1, {0, 1, 2, 3, 4, 5});  // many tiny documents
        check_case(groups, d, u, 1, chunks, 4, {0, 1});  // one token for the group
      }
    }
  groups = Groups{};
  grid_destroy(g);
}

}  // namespace
}  // namespace flexsp

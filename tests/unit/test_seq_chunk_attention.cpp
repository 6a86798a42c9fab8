// SeqChunkAttention (lib/runtime/seq_chunks.h) against the backend's attention over whole
// sequences: a micro-batch of sequences of 1..9 tokens cut into 3 chunks (empty segments
// included), forwards in chunk order, backwards in reverse, each layer's output and the
// gradients of q, k and v gathered back per token, equal to 1e-5; with padding sequences
// past `real` too.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "lib/backend/backend.h"
#include "lib/platform/backend_factory.h"
#include "lib/runtime/seq_chunks.h"

namespace flexsp {
namespace {

TEST(SeqChunkAttention, MatchesWholeSequences) {
  auto be = make_backend({BackendKind::cpu, Precision::fp32});
  ModelConfig c;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  const int Q = c.heads * c.head_dim, K = c.kv_heads * c.head_dim, chunks = 3;
  HostMicroBatch mb;
  mb.cu_seqlens = {0};
  for (int n : {9, 1, 2, 5, 3}) {
    for (int t = 0; t < n; ++t) {
      mb.ids.push_back(1);
      mb.positions.push_back(t);
      mb.targets.push_back(-1);
    }
    mb.cu_seqlens.push_back(static_cast<int32_t>(mb.ids.size()));
  }
  const int64_t T = static_cast<int64_t>(mb.ids.size());
  const int nseq = static_cast<int>(mb.cu_seqlens.size()) - 1;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  auto randv = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = u(rng);
    return v;
  };
  const std::vector<float> q = randv(T * Q), k = randv(T * K), v = randv(T * K), dout = randv(T * Q);
  AttnShape whole{nullptr, nseq, c.heads, c.kv_heads, c.head_dim,
                  1.0 / std::sqrt(static_cast<double>(c.head_dim)), mb.cu_seqlens.data()};
  Buffer<int32_t> cu(*be, mb.cu_seqlens.size());
  be->copy_from_host(cu.get(), mb.cu_seqlens.data(), cu.bytes());
  whole.cu_seqlens = cu.get();
  std::vector<float> out(q.size()), lse(static_cast<size_t>(T * c.heads)), dq(q.size()),
      dk(k.size()), dv(v.size());
  be->attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), whole);
  be->attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                         v.data(), out.data(), lse.data(), whole);

  // Token t of the micro-batch is row r of chunk j: the same cut as seq_chunks_cut.
  std::vector<HostMicroBatch> parts;
  seq_chunks_cut(mb, chunks, 1.0, 1.0, parts);
  std::vector<std::vector<int64_t>> origin(chunks);
  for (int s = 0; s < nseq; ++s) {
    const std::vector<int64_t> b =
        seq_chunk_bounds(mb.cu_seqlens[s + 1] - mb.cu_seqlens[s], chunks, 1.0, 1.0);
    for (int j = 0; j < chunks; ++j)
      for (int64_t t = b[j]; t < b[j + 1]; ++t) origin[j].push_back(mb.cu_seqlens[s] + t);
  }
  auto rows = [&](const std::vector<float>& x, int j, int w) {
    std::vector<float> r;
    for (int64_t t : origin[j]) r.insert(r.end(), x.begin() + t * w, x.begin() + (t + 1) * w);
    if (j == 1) r.resize(r.size() + 2 * static_cast<size_t>(w), 0.5f);  // a padding sequence
    return r;
  };
  SeqChunkScratch scratch;
  std::vector<std::unique_ptr<SeqChunkAttention>> ops;
  std::vector<SeqChunkAttention*> before;
  std::vector<std::vector<float>> cq, ck, cv, cout(chunks), cdo;
  for (int j = 0; j < chunks; ++j) {
    HostMicroBatch& p = parts[j];
    if (j == 1) p.cu_seqlens.push_back(p.cu_seqlens.back() + 2);  // padding: sequence nseq
    ops.push_back(std::make_unique<SeqChunkAttention>(*be, c, scratch));
    ops[j]->set_layout(p.cu_seqlens.data(), static_cast<int>(p.cu_seqlens.size()) - 1, nseq,
                       before, c.heads, c.kv_heads);
    before.push_back(ops[j].get());
    cq.push_back(rows(q, j, Q));
    ck.push_back(rows(k, j, K));
    cv.push_back(rows(v, j, K));
    cdo.push_back(rows(dout, j, Q));
    cout[j].resize(cq[j].size());
    for (int l = 0; l < c.layers; ++l)
      ops[j]->forward(l, cq[j].data(), ck[j].data(), cv[j].data(), cout[j].data());
    const std::vector<float> want = rows(out, j, Q);
    for (size_t i = 0; i < origin[j].size() * Q; ++i) EXPECT_NEAR(cout[j][i], want[i], 1e-5) << j;
  }
  for (int j = chunks - 1; j >= 0; --j)
    for (int l = c.layers - 1; l >= 0; --l) {
      std::vector<float> gq(cq[j].size()), gk(ck[j].size()), gv(cv[j].size());
      ops[j]->backward(l, cdo[j].data(), cq[j].data(), ck[j].data(), cv[j].data(),
                       cout[j].data(), gq.data(), gk.data(), gv.data());
      const std::vector<float> wq = rows(dq, j, Q), wk = rows(dk, j, K), wv = rows(dv, j, K);
      for (size_t i = 0; i < origin[j].size() * Q; ++i) EXPECT_NEAR(gq[i], wq[i], 1e-5);
      // Layers are the same data here: each layer's key gradient is the whole one.
      for (size_t i = 0; i < origin[j].size() * K; ++i) {
        EXPECT_NEAR(gk[i], wk[i], 1e-5) << "chunk " << j << " layer " << l << " i " << i;
        EXPECT_NEAR(gv[i], wv[i], 1e-5);
      }
    }
}

}  // namespace
}  // namespace flexsp

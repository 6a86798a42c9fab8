// Full attention over a whole packed stream on random inputs: the reference the
// sequence-parallel attention tests (Ulysses, ring, USP) compare a rank's share against.
#pragma once

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/model/model_config.h"
#include "lib/runtime/ring_attention.h"
#include "lib/runtime/ring_chunks.h"
#include "lib/runtime/seq_chunks.h"

namespace flexsp::testing {

// A one-layer model of `heads` x 8-dimensional heads (only the attention shape matters).
inline ModelConfig attention_model(int heads, int kv_heads, int layers = 1) {
  ModelConfig c;
  c.hidden = heads * 8;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.head_dim = 8;
  c.ffn = 16;
  c.vocab = 10;
  return c;
}

inline std::vector<float> randn(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Inputs (the same on every rank: fixed seeds) and full attention's outputs and gradients.
struct FullAttention {
  std::vector<float> q, k, v, dout, out, lse, dq, dk, dv;
};
inline FullAttention full_attention(Backend& be, const ModelConfig& c,
                                    const std::vector<int32_t>& cu) {
  const size_t T = static_cast<size_t>(cu.back());
  const size_t Q = size_t(c.heads) * c.head_dim, K = size_t(c.kv_heads) * c.head_dim;
  FullAttention f{randn(T * Q, 1), randn(T * K, 2), randn(T * K, 3), randn(T * Q, 4),
                  std::vector<float>(T * Q), std::vector<float>(T * c.heads),
                  std::vector<float>(T * Q), std::vector<float>(T * K),
                  std::vector<float>(T * K)};
  cpu::AttnShape s{cu.data(), static_cast<int>(cu.size()) - 1, c.heads, c.kv_heads,
                   c.head_dim, 1.0 / std::sqrt(static_cast<double>(c.head_dim))};
  be.attention_forward(f.out.data(), f.lse.data(), f.q.data(), f.k.data(), f.v.data(), s);
  be.attention_backward(f.dq.data(), f.dk.data(), f.dv.data(), f.dout.data(), f.q.data(),
                        f.k.data(), f.v.data(), f.out.data(), f.lse.data(), s);
  return f;
}

// Rows [lo, hi) of a rank's share of x (width w): row i is stream token idx[i]; rows past
// idx's end (padding) are `pad`.
inline std::vector<float> share_rows(const std::vector<float>& x, size_t w,
                                     const std::vector<int64_t>& idx, int64_t lo, int64_t hi,
                                     float pad) {
  std::vector<float> out;
  for (int64_t i = lo; i < hi; ++i)
    for (size_t c = 0; c < w; ++c)
      out.push_back(i < static_cast<int64_t>(idx.size()) ? x[idx[i] * w + c] : pad);
  return out;
}

// Seq1F1B's chunks (seq_chunks_cut, unit costs) of a stream of documents cu, whose token
// ids are their stream indices (to map a chunk's rows back to the stream).
inline std::vector<HostMicroBatch> stream_chunks(const std::vector<int32_t>& cu, int chunks) {
  HostMicroBatch mb;
  mb.cu_seqlens = cu;
  for (int32_t t = 0; t < cu.back(); ++t) {
    mb.ids.push_back(t);
    mb.positions.push_back(0);
    mb.targets.push_back(-1);
  }
  std::vector<HostMicroBatch> parts;
  seq_chunks_cut(mb, chunks, 1.0, 1.0, parts);
  return parts;
}

// Member `member` of a u x r group's share of one chunk (stream_chunks): the chunk's zigzag
// layout, its positions padded to `multiple`, and the member's rows [lo, hi) of its
// position, row i being stream token src[i].
struct ChunkShare {
  ZigzagLayout z;
  std::vector<int64_t> padded, src;
  int64_t lo = 0, hi = 0;
};
inline ChunkShare chunk_share(const HostMicroBatch& part, int u, int r, int multiple, int member) {
  ChunkShare x;
  x.z = zigzag_layout(part.cu_seqlens.data(), static_cast<int>(part.cu_seqlens.size()) - 1, r);
  x.padded = cp_padded_tokens(x.z, multiple);
  for (int64_t t : zigzag_indices(x.z, member / u)) x.src.push_back(part.ids[t]);
  const std::vector<int64_t> off = shard_offsets(x.padded[member / u], u);
  x.lo = off[member % u];
  x.hi = off[member % u + 1];
  return x;
}

// One chunk's ring and chunk attention on this rank (the CPU and GPU tests add buffers).
struct RingChunkMember : ChunkShare {
  std::unique_ptr<RingAttention> ring;
  std::unique_ptr<RingChunkAttention> op;
};

// x for one chunk (stream_chunks' part) on this rank of a u x r group (`group`, its Ulysses
// sub-groups `ulysses`): its share (chunk_share), a ring sized for cap tokens and its op
// laid out after the earlier chunks' ops in `before` (to which it is added), as the
// pipeline lays out each chunk before its forward.
inline void ring_chunk_member(Backend& be, const ModelConfig& c, const HostMicroBatch& part, int u, int multiple,
                              Comm& group, Comm& ulysses, int64_t cap, SeqChunkScratch& scratch,
                              std::vector<RingChunkAttention*>& before, RingChunkMember& x) {
  static_cast<ChunkShare&>(x) = chunk_share(part, u, group.size() / u, multiple, group.rank());
  x.ring = std::make_unique<RingAttention>(be, c, cap);
  x.op = std::make_unique<RingChunkAttention>(be, c, scratch);
  x.op->set_layout(*x.ring, group, ulysses, x.z, x.padded, before);
  before.push_back(x.op.get());
}

}  // namespace flexsp::testing

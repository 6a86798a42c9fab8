// Seq1F1B's chunks in a ring or USP group (docs/parallel.md): one chunk's attention when
// the group's stream is dealt out over r ring positions (lib/runtime/ring_attention.h).
//
// Design: the zigzag split applies per chunk. Chunk j of a micro-batch (its segment of
// every document, lib/runtime/seq_chunks.h) is the group's stream for that unit, so each
// position holds pieces p and 2r-1-p of every document's segment and the causal balance
// holds chunk by chunk. Attention of chunk j = RingAttention over the chunk (causal within
// it, as for a whole micro-batch) plus a prefix: the keys/values of the same documents in
// chunks < j, all visible. Every member keeps its own position's share of its chunk's
// keys/values per layer (head layout, Ulysses' heads) until the chunk's backward; chunk
// j's op gathers its position's share of the earlier chunks, per document, and the ring
// carries it behind the current block, so each query meets every earlier key once.
// Backward runs chunks in reverse: the prefix's gradients come back round the ring to
// their owner, which adds them to the earlier chunks' accumulators; a chunk's own
// gradients include what later chunks left there.
//
// The op is what the model sees and Ulysses' core (it notes the layer, which the core
// calls lack). Activation checkpointing re-runs a layer's forward before its backward:
// the kept keys/values are the same, and accumulators are cleared only by a layer's first
// forward after set_layout (as SeqChunkAttention).
#pragma once

#include <cstdint>
#include <vector>

#include "lib/runtime/ring_attention.h"
#include "lib/runtime/seq_chunks.h"

namespace flexsp {

class RingChunkAttention final : public AttentionOp, private HeadAttention {
 public:
  // c: the layers and head_dim (heads come with each layout).
  RingChunkAttention(Backend& be, const ModelConfig& c, SeqChunkScratch& scratch);
  // The next chunk: the ring that runs it (RingAttention::set_layout's arguments: the
  // chunk's zigzag layout and padded position sizes) and the earlier chunks of its
  // micro-batch, in order (they must stay until this chunk's backward; same documents).
  void set_layout(RingAttention& ring, Comm& group, Comm& ulysses, const ZigzagLayout& z,
                  const std::vector<int64_t>& padded,
                  const std::vector<RingChunkAttention*>& before);

  void forward(int layer, const act_t* q, const act_t* k, const act_t* v, act_t* out) override;
  void backward(int layer, const act_t* dout, const act_t* q, const act_t* k, const act_t* v,
                const act_t* out, act_t* dq, act_t* dk, act_t* dv) override;

 private:
  void forward(act_t* o, float* lse, const act_t* q, const act_t* k, const act_t* v) override;
  void backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dout, const act_t* q,
                const act_t* k, const act_t* v, const act_t* o, const float* lse) override;
  // The earlier chunks' rows of my position for a layer into the scratch, per document;
  // scatter adds the scratch's gradients back into their accumulators.
  void gather(int layer);
  void scatter(int layer);
  // f(chunk, its first row, rows, scratch row) for each piece of the prefix, in order.
  template <class F>
  void for_prefix(F f);

  Backend& be_;
  ModelConfig cfg_;
  SeqChunkScratch& sc_;
  size_t es_ = 4;
  RingAttention* ring_ = nullptr;
  ZigzagLayout z_;
  int p_ = 0, layer_ = 0;
  int64_t kv_ = 0;  // kv width
  std::vector<int64_t> early_at_, late_at_;  // [ndoc]: first row of each piece
  int64_t prefix_ = 0;                       // rows of the earlier chunks I gather
  std::vector<RingChunkAttention*> before_;
  ChunkKv kept_;  // my position's tokens of this chunk, per layer
};

}  // namespace flexsp

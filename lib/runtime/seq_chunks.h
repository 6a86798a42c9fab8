// Seq1F1B's chunks (docs/parallel.md): a micro-batch cut along its sequences, and the
// attention of one chunk over the keys and values of the chunks before it.
//
// Design:
//  - Chunk j of a micro-batch holds the j-th segment of every sequence, cut where
//    seq_chunk_bounds (lib/plan/seq_chunk_cuts.h) says: chunks of about equal causal cost,
//    a rule the planner prices too. Positions and targets are the whole sequence's: RoPE
//    continues across chunks and every prediction is made once.
//  - SeqChunkAttention is one chunk's AttentionOp. Its forward keeps the chunk's keys and
//    values per layer (until its backward) and runs the queries of the chunk over the keys
//    of the same sequence in this and every earlier chunk, the queries being the last rows
//    of that prefix (the kernels' default causal alignment). Backward runs chunks in
//    reverse: a chunk's key/value gradients for earlier chunks' rows are added to those
//    chunks' accumulators, and its own rows' gradients include what later chunks added.
//  - Sequences of a chunk past `real` (tensor parallelism's padding) have no earlier rows.
//  - Under Ulysses the op is the group's core attention (UlyssesAttention::set_core): it
//    sees the chunk's whole group stream with this rank's heads, whose count comes with
//    the layout. Buffers grow to the largest chunk met (never per step once warm).
//  - Activation checkpointing runs a layer's forward again right before its backward: the
//    keys and values it keeps are the same, and the accumulators are cleared only by a
//    layer's first forward after set_layout (later chunks may already have added to them).
#pragma once

#include <cstdint>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/model/llama.h"
#include "lib/model/model_config.h"
#include "lib/plan/seq_chunk_cuts.h"
#include "lib/runtime/micro_batch.h"

namespace flexsp {

// out[j] = chunk j of mb (out resized to chunks), cut by seq_chunk_bounds.
void seq_chunks_cut(const HostMicroBatch& mb, int chunks, double lin, double att,
                    std::vector<HostMicroBatch>& out);

// The keys and values of one layer's prefix and their gradients: scratch shared by the
// chunks of a stage (one runs at a time).
struct SeqChunkScratch {
  Buffer<int32_t> cuk;
  Buffer<unsigned char> kall, vall, dkall, dvall;
};

// One chunk's keys and values per layer, kept from its forward until its backward, and the
// gradient accumulators into which later chunks' backwards add (both chunk attentions: this
// file's and lib/runtime/ring_chunks.h's). A layer's first forward since reset() clears its
// accumulators; a recomputed forward (checkpointing) keeps them.
struct ChunkKv {
  Buffer<unsigned char> k, v, dk_acc, dv_acc;  // per layer, `rows` rows of kv elements
  int64_t rows = 0, kv = 0;
  size_t es = 4;
  std::vector<bool> seen;  // per layer: forward ran since reset()

  void reset(Backend& be, int layers, int64_t rows, int64_t kv);
  act_t* at(Buffer<unsigned char>& b, int layer, int64_t row) {
    return act_at(b.get(), (static_cast<int64_t>(layer) * rows + row) * kv, es);
  }
  void keep(Backend& be, int layer, const act_t* k, const act_t* v);
  // dk, dv (rows x kv) += what later chunks added to the layer's accumulators.
  void add_back(Backend& be, int layer, act_t* dk, act_t* dv);
};

class SeqChunkAttention final : public AttentionOp {
 public:
  // c: the layers and head_dim (heads come with each layout).
  SeqChunkAttention(Backend& be, const ModelConfig& c, SeqChunkScratch& scratch);
  // The next chunk: its sequences (host cu_seqlens over its tokens; sequences [real,
  // nseq) are padding), the earlier chunks of its micro-batch, in order (they must stay
  // until this chunk's backward), and the q and kv heads the op sees.
  void set_layout(const int32_t* cu_seqlens, int nseq, int real,
                  const std::vector<SeqChunkAttention*>& before, int heads, int kv_heads);
  void forward(int layer, const act_t* q, const act_t* k, const act_t* v, act_t* out) override;
  void backward(int layer, const act_t* dout, const act_t* q, const act_t* k, const act_t* v,
                const act_t* out, act_t* dq, act_t* dk, act_t* dv) override;
  void set_timers(PhaseTimes* t) { timers_ = t; }  // the attention phase (nullptr: untimed)

 private:
  // The prefix keys and values of every sequence for a layer into kall_ / vall_.
  void gather(int layer);
  AttnShape shape();

  Backend& be_;
  ModelConfig cfg_;
  SeqChunkScratch& sc_;
  int64_t kv_ = 0;  // kv width
  size_t es_ = 4;
  int nseq_ = 0, real_ = 0;
  std::vector<int32_t> cu_host_, cuk_host_;
  std::vector<SeqChunkAttention*> before_;
  Buffer<int32_t> cu_;
  ChunkKv kept_;       // this chunk's rows per layer
  Buffer<float> lse_;  // per layer
  PhaseTimes* timers_ = nullptr;
};

}  // namespace flexsp

// Ulysses sequence parallelism inside one SP group (docs/parallel.md, DeepSpeed-Ulysses).
//
// The group's sequences form one packed token stream of T tokens, cut into d contiguous
// shards; rank j of the group holds tokens [o_j, o_{j+1}). Projections, norms and the MLP
// run on the local shard. Core attention needs whole sequences, so an all-to-all turns
// [local tokens, all heads] into [all T tokens, H/d heads] for q, k and v; the backend's
// varlen attention runs on the local heads over the group's cu_seqlens; a second
// all-to-all brings the output back to [local tokens, all heads]. Backward mirrors it.
//
// Activations move in the backend's act_dtype (bf16 halves the all-to-all bytes); the
// log-sum-exp stays fp32.
//
// GQA: with d <= kv_heads each rank takes kv_heads/d kv heads (the ones its q heads use).
// With d > kv_heads, d/kv_heads ranks share one kv head: each gets a copy, and in backward
// the copies' gradients are summed back on the token owner. So d must divide heads, and
// either d divides kv_heads or kv_heads divides d.
//
// Every buffer is backend memory: packing for the all-to-alls is Backend::copy_2d (and
// axpy for the kv-replica sums), and the group Comm comes from the backend's set of
// communicators (Groups::for_backend: host MPI for the CPU backend, NCCL or staged MPI for
// a GPU). The gathered q, k, v, output and log-sum-exp of every layer are kept for
// backward, so a layer's backward needs no second forward all-to-all; under activation
// checkpointing only the current layer's are (one slot: the model re-runs a layer's
// forward, all-to-alls included, right before its backward), so the head-layout copies
// cost one layer of memory instead of all of them.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/comm/comm.h"
#include "lib/model/llama.h"
#include "lib/model/model_config.h"
#include "lib/util/timer.h"

namespace flexsp {

// Throws Error unless a group of d ranks can run this model (see above).
void ulysses_check(const ModelConfig& c, int d);

// Attention in head layout over a group's whole stream: what Ulysses runs between its
// all-to-alls. By default the backend's varlen attention on the layout's sequences; ring
// attention plugs in here for USP (lib/runtime/ring_attention.h). o, lse are written by
// forward and handed back to backward (merged results: the ring's backward needs them).
class HeadAttention {
 public:
  virtual ~HeadAttention() = default;
  virtual void forward(act_t* o, float* lse, const act_t* q, const act_t* k,
                       const act_t* v) = 0;
  virtual void backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dout, const act_t* q,
                        const act_t* k, const act_t* v, const act_t* o, const float* lse) = 0;
};

// Contiguous, balanced shards of a stream of T tokens over d ranks: o_j = floor(j T / d).
std::vector<int64_t> shard_offsets(int64_t tokens, int d);

class UlyssesAttention final : public AttentionOp {
 public:
  // max_group_tokens: the longest stream a group of this rank will hold.
  // reserve_tokens_per_rank (0: none): size the buffers for a stream of this many tokens
  // per group member (at most max_group_tokens in all) whatever the stream is, so that
  // they are allocated once per group size instead of again at every stream longer than
  // any before (see set_layout).
  UlyssesAttention(Backend& be, const ModelConfig& c, int64_t max_group_tokens,
                   int64_t reserve_tokens_per_rank = 0);

  // The next micro-batch: the group (size d, this rank at group->rank()), the stream's
  // sequence layout (host cu_seqlens over all T tokens) and the shard offsets [d + 1].
  void set_layout(Comm& group, const int32_t* cu_seqlens, int nseq,
                  const std::vector<int64_t>& offsets);

  void forward(int layer, const act_t* q, const act_t* k, const act_t* v, act_t* out) override;
  void backward(int layer, const act_t* dout, const act_t* q, const act_t* k, const act_t* v,
                const act_t* out, act_t* dq, act_t* dk, act_t* dv) override;

  void set_timers(PhaseTimes* t) { timers_ = t; }
  // Attention between the all-to-alls (null: the backend's, over set_layout's sequences).
  void set_core(HeadAttention* core) { core_ = core; }
  // After set_layout: q and kv heads per rank in head layout.
  int heads_per_rank() const { return hq_; }
  int kv_heads_per_rank() const { return hkv_; }

 private:
  struct Slot {
    act_t *q, *k, *v, *o;
    float* lse;
  };
  size_t slots() const;  // layers whose head-layout activations are kept
  Slot slot(int layer);
  // [local tokens, all heads] -> [all tokens, my heads]: head block of rank p starts at
  // column head0(p) * head_dim and is `heads_per_rank` heads wide.
  void to_heads(const act_t* local, int width_heads, int heads_per_rank, bool kv, act_t* full);
  // [all tokens, my heads] -> [local tokens, all heads]; accumulate adds (kv replicas).
  void to_tokens(const act_t* full, int width_heads, int heads_per_rank, bool kv, act_t* local,
                 bool accumulate);
  // Element i of an activation buffer.
  act_t* at(act_t* p, size_t i) const { return act_at(p, static_cast<int64_t>(i), es_); }
  const act_t* at(const act_t* p, size_t i) const {
    return act_at(p, static_cast<int64_t>(i), es_);
  }
  int kv_head0(int p) const;

  Backend& be_;
  ModelConfig cfg_;
  size_t es_ = 4;  // bytes per activation element
  int64_t max_tokens_ = 0, reserve_per_rank_ = 0;
  Comm* group_ = nullptr;
  int d_ = 1, me_ = 0, hq_ = 0, hkv_ = 0;  // group size, my index, my q and kv heads
  int64_t tokens_ = 0;
  std::vector<int64_t> offsets_;
  AttnShape shape_{};
  Buffer<int32_t> cu_;
  std::vector<int32_t> cu_host_;  // the same offsets on the host (a GPU's tile map)
  Buffer<unsigned char> saved_;  // per layer: q, k, v, o in head layout
  Buffer<float> saved_lse_;      // per layer: lse [T, my heads]
  Buffer<unsigned char> scratch_, scratch2_;  // packing buffers; gradients in head layout
  PhaseTimes* timers_ = nullptr;
  HeadAttention* core_ = nullptr;
};

}  // namespace flexsp

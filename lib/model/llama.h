// The LLaMA model (SPEC §5): forward and backward of one packed micro-batch of
// variable-length sequences on a Backend.
//
// Design:
//  - The model owns no parameters: forward/backward take the flat parameter and gradient
//    buffers (backend memory, layout of params()), so the trainer, the ZeRO runtime and
//    the tests decide where weights live. Gradients *accumulate* (micro-batches).
//  - It owns a workspace sized once for `max_tokens` local tokens (activations of every
//    layer, or with activation checkpointing only every layer's input plus one layer's
//    worth, recomputed in backward). No allocation per step or per layer.
//  - Loss = sum of per-token cross-entropies (the caller divides: backward takes the loss
//    scale, 1 / global number of predictions, known before backward on every rank).
//  - Core attention (softmax(q k^T) v over whole sequences) is a pluggable AttentionOp. The
//    model computes q, k, v for its local tokens and hands them over; LocalAttention runs
//    the backend's varlen attention on this rank's sequences, and a sequence-parallel
//    implementation (Ulysses: all-to-all tokens <-> heads around the same kernel) plugs in
//    without changes here.
//  - lm_head + cross-entropy run in chunks of tokens so the logits never exceed a fixed
//    budget; when the micro-batch fits in one chunk, backward reuses forward's logits,
//    otherwise it recomputes them chunk by chunk.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"

namespace flexsp {

// A packed micro-batch, in host memory. Tokens of several sequences back to back; the
// attention layout (cu_seqlens) says where each sequence starts.
struct MicroBatch {
  int64_t tokens = 0;                   // T, local tokens
  const int32_t* ids = nullptr;         // [T] token ids (< vocab)
  const int32_t* positions = nullptr;   // [T] RoPE positions (restart at 0 per sequence)
  const int32_t* targets = nullptr;     // [T] next-token targets, -1 = no prediction
  int nseq = 0;                         // sequences, for LocalAttention
  const int32_t* cu_seqlens = nullptr;  // [nseq + 1], 0 .. T
};

// positions[t] = t - start of t's sequence.
void packed_positions(const int32_t* cu_seqlens, int nseq, int32_t* positions);
// targets[t] = ids[t + 1] inside a sequence, -1 at each sequence's last token.
void packed_next_token_targets(const int32_t* ids, const int32_t* cu_seqlens, int nseq,
                               int32_t* targets);

// The core of attention on backend memory. q [T, heads*hd] after RoPE, k and v
// [T, kv_heads*hd], out [T, heads*hd] for the model's T local tokens. The op keeps
// whatever it needs between forward and backward (e.g. log-sum-exp) per layer; forward
// may run again for a layer (activation recompute) before that layer's backward.
// dq, dk, dv are overwritten.
class AttentionOp {
 public:
  virtual ~AttentionOp() = default;
  virtual void forward(int layer, const float* q, const float* k, const float* v,
                       float* out) = 0;
  virtual void backward(int layer, const float* dout, const float* q, const float* k,
                        const float* v, const float* out, float* dq, float* dk,
                        float* dv) = 0;
};

// Attention over whole sequences held by this rank (no communication).
class LocalAttention final : public AttentionOp {
 public:
  LocalAttention(Backend& be, const ModelConfig& c, int64_t max_tokens);
  // The sequence layout of the next micro-batch (host cu_seqlens, validated).
  void set_layout(const int32_t* cu_seqlens, int nseq, int64_t tokens);
  void forward(int layer, const float* q, const float* k, const float* v, float* out) override;
  void backward(int layer, const float* dout, const float* q, const float* k, const float* v,
                const float* out, float* dq, float* dk, float* dv) override;

 private:
  Backend& be_;
  ModelConfig cfg_;
  int64_t max_tokens_ = 0, tokens_ = 0;
  int nseq_ = 0;
  Buffer<int32_t> cu_;   // [max_tokens + 1]
  Buffer<float> lse_;    // [layers][max_tokens * heads]
};

struct ForwardResult {
  double loss_sum = 0;      // sum of cross-entropies over the micro-batch's predictions
  int64_t predictions = 0;  // number of targets >= 0
};

class Llama {
 public:
  // Allocates the workspace for micro-batches of up to max_tokens local tokens.
  Llama(Backend& be, const ModelConfig& c, int64_t max_tokens);
  ~Llama();
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ParamTable& params() const { return table_; }
  int64_t max_tokens() const { return max_tokens_; }
  size_t workspace_bytes() const;

  // Forward over mb. attn = nullptr: LocalAttention over mb.cu_seqlens. logits_host, when
  // given, receives the logits [T, vocab]. Throws Error for out-of-range ids or targets.
  ForwardResult forward(const float* params, const MicroBatch& mb, AttentionOp* attn = nullptr,
                        float* logits_host = nullptr);
  // Backward of the last forward: grads += d(loss_scale * loss_sum)/d(params).
  void backward(const float* params, float* grads, double loss_scale);

 private:
  struct LayerActs;
  void layer_forward(int l, const float* params, LayerActs& a);
  void layer_backward(int l, const float* params, float* grads, LayerActs& a);
  void logits_chunk(const float* params, int64_t c0, int64_t n);
  LayerActs& acts(int l);

  Backend& be_;
  ModelConfig cfg_;
  ParamTable table_;
  int64_t max_tokens_ = 0, chunk_tokens_ = 0;
  bool checkpoint_ = false;

  // State of the last forward.
  int64_t tokens_ = 0;
  bool have_forward_ = false, logits_kept_ = false;
  AttentionOp* attn_ = nullptr;

  std::unique_ptr<LocalAttention> local_attn_;
  Buffer<float> ws_;  // all float activations, carved below
  Buffer<int32_t> ids_, pos_, targets_;
  std::vector<LayerActs> layer_acts_;  // one per layer, or one shared when checkpointing
  std::vector<float*> resid_;          // [layers + 1] residual stream at each layer input
  float *rstd_f_ = nullptr, *ln_f_ = nullptr, *logits_ = nullptr, *ce_loss_ = nullptr,
        *ce_lse_ = nullptr;
  float *d_res_ = nullptr, *d_ln_ = nullptr, *d_att_ = nullptr, *d_q_ = nullptr,
        *d_k_ = nullptr, *d_v_ = nullptr, *act_ = nullptr, *d_act_ = nullptr,
        *d_up_ = nullptr;
};

}  // namespace flexsp

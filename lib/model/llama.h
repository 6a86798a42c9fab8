// The LLaMA model (docs/model.md): forward and backward of one packed micro-batch of
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
//  - Weights are read through a ParamProvider, one *unit* at a time (the embedding, each
//    layer, the head = final norm + lm_head): the model asks for a unit's full weights
//    right before using it, for its gradient accumulator in backward, and says when it is
//    done with the unit. A flat full buffer (FlatParams, what forward(params, ...) uses)
//    answers with pointers into that buffer; ZeRO-3 gathers the unit's shards there and
//    reduce-scatters the gradient when backward is done with it. With tied embeddings
//    the head needs the embedding unit too, and the embedding's gradient is handed out
//    (and done) twice per backward: once for lm_head, once for the lookup.
//  - lm_head + cross-entropy run in chunks of tokens so the logits never exceed a fixed
//    budget; when the micro-batch fits in one chunk, backward reuses forward's logits,
//    otherwise it recomputes them chunk by chunk.
//  - Tensor parallelism (lib/model/tensor_parallel.h): with a TpGroup of tp ranks the
//    model holds its block of every weight (its ParamTable) and a micro-batch's tokens
//    are the tp group's (T, a multiple of tp); the residual stream, norms and their
//    inputs are this rank's T / tp consecutive tokens (sequence parallelism), the
//    column-parallel GEMMs read all T tokens after an all-gather, and the row-parallel
//    ones leave fp32 partial sums that a reduce-scatter adds up (fp32, whatever the
//    activation type). Attention gets q, k, v of all T tokens for this rank's heads. The
//    gathered norm outputs are not kept: backward gathers them again, so no activation is
//    replicated. With tp = 1 every exchange is skipped and the code is the single-rank one.
//  - Precision follows the backend (Backend::act_dtype): activations, and the weights the
//    ops read, are act_t; with bf16 the model casts each unit's fp32 weights into a bf16
//    copy when it asks for the unit (one cast per unit per pass: master weights stay fp32
//    wherever the provider keeps them, gradients arrive in fp32). Statistics (rstd, lse,
//    per-token losses) are fp32 either way.
//  - Token chunks (ModelConfig::token_chunk, lib/model/chunked_layer.h): a micro-batch of
//    more local tokens than the chunk runs each layer over chunks of them, so a layer's
//    temporaries are sized by the chunk and only the checkpoints, the keys and values and
//    their gradients stay whole; one that fits in a chunk runs the whole-batch code.
//  - Pipeline stages (lib/runtime/pipeline.h): a stage's model is built with its own layer
//    count and its LlamaStage role. Only the first stage embeds and only the last runs
//    the head and the loss (the others allocate no logits or loss workspace); another stage's forward reads its input rows from
//    stage_input() (filled by the caller) and leaves its output in stage_output(); its
//    backward reads the output's gradient from stage_grad() and leaves the input's there.
//    (The parameter table keeps the embedding and head units either way: unused ones get
//    no provider calls.)
//  - Activation offload (ModelConfig::offload, lib/model/offload.h): the layers' saved
//    blocks (resid[l], and without checkpointing the layer's activations) live in a ring
//    of offload_ahead + 2 slots; each goes to a host pool after its layer's forward and
//    comes back offload_ahead layers before its backward. resid[L] keeps its own slot.
//    The attention op's per-layer state (its log-sum-exp) stays on the device. With
//    offload_plain_tokens = P > 0 a micro-batch of at most P tokens may keep its blocks
//    on the device (MicroBatch::offload false): a slot per layer at P tokens, carved from
//    the same region, sized once for the larger layout (lib/model/saved_layout.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/model/model_config.h"
#include "lib/model/offload.h"
#include "lib/model/params.h"
#include "lib/model/saved_layout.h"
#include "lib/model/tensor_parallel.h"
#include "lib/util/timer.h"

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
  // With a model built with offload (ModelConfig::offload): whether this micro-batch's
  // blocks go to the host; false keeps them on the device (at most offload_plain_tokens).
  bool offload = true;
};

// positions[t] = t - start of t's sequence.
void packed_positions(const int32_t* cu_seqlens, int nseq, int32_t* positions);
// targets[t] = ids[t + 1] inside a sequence, -1 at each sequence's last token.
void packed_next_token_targets(const int32_t* ids, const int32_t* cu_seqlens, int nseq,
                               int32_t* targets);

// The core of attention on backend memory. q [T, heads*hd] after RoPE, k and v
// [T, kv_heads*hd], out [T, heads*hd] for the model's T local tokens (activations: the
// backend's act_dtype). The op keeps
// whatever it needs between forward and backward (e.g. log-sum-exp) per layer; forward
// may run again for a layer (activation recompute) before that layer's backward.
// dq, dk, dv are overwritten.
class AttentionOp {
 public:
  virtual ~AttentionOp() = default;
  virtual void forward(int layer, const act_t* q, const act_t* k, const act_t* v,
                       act_t* out) = 0;
  virtual void backward(int layer, const act_t* dout, const act_t* q, const act_t* k,
                        const act_t* v, const act_t* out, act_t* dq, act_t* dk,
                        act_t* dv) = 0;
};

// Attention over whole sequences held by this rank (no communication).
class LocalAttention final : public AttentionOp {
 public:
  LocalAttention(Backend& be, const ModelConfig& c, int64_t max_tokens);
  // The sequence layout of the next micro-batch (host cu_seqlens, validated).
  void set_layout(const int32_t* cu_seqlens, int nseq, int64_t tokens);
  void forward(int layer, const act_t* q, const act_t* k, const act_t* v, act_t* out) override;
  void backward(int layer, const act_t* dout, const act_t* q, const act_t* k, const act_t* v,
                const act_t* out, act_t* dq, act_t* dk, act_t* dv) override;
  size_t workspace_bytes() const { return cu_.bytes() + lse_.bytes(); }
  void set_timers(PhaseTimes* t) { timers_ = t; }  // the attention phase (nullptr: untimed)

 private:
  float* lse(int layer);  // the layer's log-sum-exp slot

  Backend& be_;
  ModelConfig cfg_;
  int64_t max_tokens_ = 0, tokens_ = 0;
  int nseq_ = 0;
  Buffer<int32_t> cu_;   // [max_tokens + 1]
  std::vector<int32_t> cu_host_;  // the same offsets on the host (a GPU's tile map)
  Buffer<float> lse_;    // [layers, or 1 under activation checkpointing][max_tokens * heads]
  PhaseTimes* timers_ = nullptr;
};

// Parameter units, in flat-layout order: 0 = embedding, 1 + l = layer l, layers + 1 =
// head (final norm and, when untied, lm_head). Unit u is the flat range
// [param_unit_begin(t, u), param_unit_end(t, u)), padding included; the units tile
// [0, t.total).
inline int param_units(const ParamTable& t) { return t.layers + 2; }
int64_t param_unit_begin(const ParamTable& t, int u);
int64_t param_unit_end(const ParamTable& t, int u);

// Where the model's weights and gradients live (see the design notes above). Pointers
// address element 0 of the unit's range and stay valid until unit_done(u, ...).
class ParamProvider {
 public:
  virtual ~ParamProvider() = default;
  virtual const float* unit_params(int u) = 0;
  // Unit u's weights already in the backend's act_dtype (a provider that keeps a bf16 copy
  // and gathers that: half the bytes of fp32), or nullptr: the model then casts
  // unit_params(u). Only asked for when activations are not fp32.
  virtual const act_t* unit_act_params(int /*u*/) { return nullptr; }
  // The unit's gradient accumulator (the model adds to it); backward only.
  virtual float* unit_grads(int u) = 0;
  // The model is finished with unit u for this pass (forward or backward).
  virtual void unit_done(int u, bool backward) = 0;
  // Unit u's weights will be asked for next: a provider that gathers them may start now,
  // so the gather is under way (and queued before this unit's gradient reduction) while
  // the current unit computes. The model calls it at the start of each layer's forward
  // (for the next unit) and backward (for the previous layer).
  virtual void prefetch(int /*u*/) {}
  // A micro-batch starts (every rank calls it, in plan order); `last`: the step's last,
  // after whose backward of a unit its gradient is final for the step.
  virtual void begin_micro_batch(bool /*last*/) {}
  // True when every rank must make the same calls (the provider communicates): a rank
  // with nothing to compute in a micro-batch then runs Llama::idle_pass.
  virtual bool collective() const { return false; }
};

// Full flat buffers: pointers into them, nothing to do when a unit is done.
class FlatParams final : public ParamProvider {
 public:
  explicit FlatParams(const ParamTable& t);
  void set(const float* params, float* grads) { params_ = params; grads_ = grads; }
  const float* unit_params(int u) override { return params_ + begin_[static_cast<size_t>(u)]; }
  float* unit_grads(int u) override { return grads_ + begin_[static_cast<size_t>(u)]; }
  void unit_done(int, bool) override {}

 private:
  std::vector<int64_t> begin_;
  const float* params_ = nullptr;
  float* grads_ = nullptr;
};

struct ForwardResult {
  double loss_sum = 0;      // sum of cross-entropies over the micro-batch's predictions
  int64_t predictions = 0;  // number of targets >= 0
};

// A pipeline stage's role: whether it embeds the tokens and whether it runs the head and
// the loss (both for a whole model).
struct LlamaStage {
  bool first = true, last = true;
};

class ChunkAttention;

class Llama {
 public:
  // Allocates the workspace for micro-batches of up to max_tokens tokens (those of the
  // tensor-parallel group: this rank holds max_tokens / tp of the residual stream).
  Llama(Backend& be, const ModelConfig& c, int64_t max_tokens, const TpGroup& tp = {},
        LlamaStage stage = {});
  ~Llama();
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  const ModelConfig& config() const { return cfg_; }
  // This rank's share of the shape (heads, kv heads, ffn, vocab per tp rank): what the
  // attention op works with.
  const ModelConfig& local_config() const { return lc_; }
  // Phases (optional) that receive the tensor-parallel exchanges' time (tp_comm).
  void set_timers(PhaseTimes* t) {
    timers_ = t;
    local_attn_->set_timers(t);
  }
  const ParamTable& params() const { return table_; }
  int64_t max_tokens() const { return max_tokens_; }
  size_t workspace_bytes() const;
  // The host pool of the activation offload (0: no offload), and a test's view of its copies.
  size_t offload_host_bytes() const { return offload_ ? offload_->host_bytes() : 0; }
  void set_offload_trace(OffloadTrace t);

  // Forward over mb (with tp > 1: the group's tokens, a multiple of tp, the same on every
  // rank of the group). attn = nullptr: LocalAttention over mb.cu_seqlens. logits_host,
  // when given, receives the logits [T, vocab] (tp = 1 only). loss_sum is this rank's
  // share: with tp > 1 rank 0 of the group reports the group's loss, the others 0.
  // Throws Error for out-of-range ids or targets.
  ForwardResult forward(const float* params, const MicroBatch& mb, AttentionOp* attn = nullptr,
                        float* logits_host = nullptr);
  // Backward of the last forward: grads += d(loss_scale * loss_sum)/d(params).
  void backward(const float* params, float* grads, double loss_scale);
  // The same, with the weights (and gradients) from a provider, unit by unit.
  ForwardResult forward(ParamProvider& pp, const MicroBatch& mb, AttentionOp* attn = nullptr,
                        float* logits_host = nullptr);
  void backward(ParamProvider& pp, double loss_scale);
  // The provider calls of one forward + backward without computing (zero gradients):
  // for ranks that sit out a micro-batch when the provider is collective. A pipeline
  // stage calls the halves at the schedule's forward and backward steps.
  void idle_pass(ParamProvider& pp) {
    idle_forward(pp);
    idle_backward(pp);
  }
  void idle_forward(ParamProvider& pp);
  void idle_backward(ParamProvider& pp);

  // Pipeline stages (see the design notes). Rows: this rank's rows of the residual stream
  // in the last forward (tokens / tp), each `hidden` activations wide.
  act_t* stage_input() { return resid(0); }  // the same in every layout
  const act_t* stage_output() const { return resid(cfg_.layers); }
  act_t* stage_grad() { return d_res_; }
  int64_t rows() const { return rows_; }

 private:
  // lw / lg: layer l's unit (weights in act_dtype, fp32 gradients), element 0 = its first
  // tensor.
  void layer_forward(int l, const act_t* lw, LayerActs& a);
  void layer_backward(int l, const act_t* lw, float* lg, LayerActs& a);
  // The same over token chunks (chunked_layer.cpp); the backward recomputes the layer.
  bool chunked() const { return cfg_.token_chunk > 0 && tokens_ > cfg_.token_chunk; }
  void chunked_layer_forward(int l, const act_t* lw, LayerActs& a);
  void chunked_layer_backward(int l, const act_t* lw, float* lg, LayerActs& a);
  // Pieces of a chunked layer over rows [c0, c0 + n) (chunked_layer.cpp).
  void chunk_norm_qkv(int l, const act_t* lw, LayerActs& a, int64_t c0, int64_t n, bool kv,
                      act_t* q);
  void chunk_rest_forward(int l, const act_t* lw, LayerActs& a, int64_t c0, int64_t n,
                          const act_t* att, act_t* out);
  void chunk_mlp_backward(int l, const act_t* lw, float* lg, LayerActs& a, int64_t c0,
                          int64_t n, const act_t* att, act_t* d_att);
  void chunk_qkv_backward(int l, const act_t* lw, float* lg, LayerActs& a, int64_t c0,
                          int64_t n, act_t* dq);
  void backward_head(ParamProvider& pp, double loss_scale);
  void logits_chunk(const act_t* w_head, const act_t* ln_f, int64_t c0, int64_t n);
  void loss_chunk(int64_t c0, int64_t n);
  // Tensor-parallel exchanges (each the identity, or skipped, when tp = 1):
  // x [T/tp, H] -> the [T, H] rows the column-parallel GEMMs read (x itself when tp = 1).
  const act_t* gather_rows(const act_t* x);
  // y [T/tp, H] = base + sum over ranks of in [T, k] w^T (y may be base).
  void row_parallel(const act_t* in, int64_t k, const act_t* w, const act_t* base, act_t* y);
  // dx [T/tp, H] = sum over ranks and terms of dy [T, n] w (the input gradient of
  // column-parallel GEMMs).
  struct InputGradTerm {
    const act_t* dy;
    int64_t n;
    const act_t* w;
  };
  void column_input_grad(std::initializer_list<InputGradTerm> terms, act_t* dx);
  // The reduce-scatter of part_ into this rank's rows, written (as activations) to dx.
  void scatter_partial_to(act_t* dx);
  // Layer l's saved activations and input (l = layers: the head's) in the last forward's
  // layout.
  LayerActs& acts(int l);
  act_t* resid(int l) const { return saved_->resid[static_cast<size_t>(l)]; }
  std::vector<OffloadSpan> saved_spans(int slot, int64_t T, int64_t R) const;
  // Unit u's weights for the ops: the provider's fp32 pointer, or its cast into `slot`
  // (0: layers and head, 1: the embedding) when activations are bf16.
  const act_t* unit_weights(ParamProvider& pp, int u, int slot);
  // The provider calls of unit_weights without the cast (idle_pass).
  void touch_weights(ParamProvider& pp, int u);
  // Element i of an activation buffer.
  act_t* at(act_t* p, int64_t i) const { return act_at(p, i, es_); }
  const act_t* at(const act_t* p, int64_t i) const { return act_at(p, i, es_); }

  Backend& be_;
  ModelConfig cfg_, lc_;  // the model's shape, this rank's share of it
  TpGroup tp_;
  PhaseTimes* timers_ = nullptr;
  VocabShard vocab_;      // this rank's rows of the embedding and lm_head
  ParamTable table_;
  FlatParams flat_;  // for forward(params, ...) / backward(params, grads, ...)
  int64_t max_tokens_ = 0, chunk_tokens_ = 0;
  bool first_ = true, last_ = true;  // pipeline stage role
  bool checkpoint_ = false;
  DType act_ = DType::f32;
  size_t es_ = 4;  // bytes per activation element

  // State of the last forward: T tokens of the group, this rank's T / tp (rows_).
  int64_t tokens_ = 0, rows_ = 0;
  bool have_forward_ = false, logits_kept_ = false;
  AttentionOp* attn_ = nullptr;

  std::unique_ptr<LocalAttention> local_attn_;
  // Token chunks: the local attention over query chunks, and the whole q, attention output
  // and their gradients another AttentionOp takes (allocated at its first chunked use).
  std::unique_ptr<ChunkAttention> chunk_attn_;
  Buffer<unsigned char> whole_q_, whole_att_, whole_d_att_, whole_d_q_;
  std::unique_ptr<LayerOffload> offload_;  // null: every layer keeps its own slot
  Buffer<unsigned char> ws_;  // all activations (act_dtype), carved below
  Buffer<float> stats_;       // fp32 statistics: rstd, per-token loss and lse
  Buffer<unsigned char> wcast_[2];  // bf16 copies of a unit's weights (unit_weights)
  Buffer<int32_t> ids_, pos_, targets_;
  Buffer<double> inv_freq_;  // RoPE frequencies (lib/model/rope.h), uploaded once
  // Tensor parallelism: ids and targets in this rank's vocabulary shard (-1: not here /
  // no prediction; a target elsewhere is past the shard), the gathered rows, fp32 partial
  // sums and their reduced rows, the cross-entropy statistics of a chunk and of all ranks.
  Buffer<int32_t> shard_ids_, shard_targets_;
  Buffer<unsigned char> full_;
  Buffer<float> part_, reduced_, ce_stats_, ce_all_;
  std::vector<int32_t> host_shard_;
  // The saved activations (saved_layout.h): at max tokens (with offload, the ring's), and
  // with offload and offload_plain_tokens > 0 a slot per layer at plain_tokens_; saved_:
  // the last forward's, offloading_: whether its blocks went to the host.
  SavedLayout layout_, plain_;
  SavedLayout* saved_ = &layout_;
  int64_t plain_tokens_ = 0;
  bool offloading_ = false;
  float *rstd_f_ = nullptr, *ce_loss_ = nullptr, *ce_lse_ = nullptr;
  act_t *ln_f_ = nullptr, *logits_ = nullptr;
  act_t *d_res_ = nullptr, *d_ln_ = nullptr, *d_att_ = nullptr, *d_q_ = nullptr,
        *d_k_ = nullptr, *d_v_ = nullptr, *swi_ = nullptr, *d_swi_ = nullptr,
        *d_up_ = nullptr;
};

}  // namespace flexsp

// LLaMA over a packed micro-batch (see llama.h for the design): the workspace, the
// forward pass and the tensor-parallel exchanges; the backward pass is llama_backward.cpp.
//
// Shapes (T local tokens, H hidden, Q = heads*head_dim, K = kv_heads*head_dim, F ffn);
// activations are act_t (fp32 or bf16, the backend's), rstd/lse/loss fp32:
//   resid[l]  [T,H]  input of layer l (resid[0] = embeddings, resid[L] = last output)
//   per layer: ln1 [T,H], rstd1 [T], q [T,Q] (after RoPE), k, v [T,K], att [T,Q],
//              xmid [T,H] (= resid[l] + o_proj(att)), ln2 [T,H], rstd2 [T], gate, up [T,F]
//   silu(gate)*up is not kept: it is recomputed in backward (one cheap pass) into swi_.
// Weights are HF [out, in], so y = x W^T is gemm(no-trans, trans). With tied embeddings
// lm_head reads the embedding matrix.
// Weights come unit by unit from a ParamProvider (llama.h); the pointer-based entry
// points wrap the buffers in FlatParams, so both paths run the same code.
#include "lib/model/llama.h"

#include <algorithm>
#include <cmath>

#include "lib/comm/comm.h"
#include "lib/model/chunked_layer.h"
#include "lib/model/rope.h"
#include "lib/util/error.h"

namespace flexsp {

// ---- packed inputs ---------------------------------------------------------------------------

void packed_positions(const int32_t* cu, int nseq, int32_t* positions) {
  for (int s = 0; s < nseq; ++s)
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) positions[t] = t - cu[s];
}

void packed_next_token_targets(const int32_t* ids, const int32_t* cu, int nseq,
                               int32_t* targets) {
  for (int s = 0; s < nseq; ++s)
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) targets[t] = t + 1 < cu[s + 1] ? ids[t + 1] : -1;
}

// ---- parameter units -------------------------------------------------------------------------

int64_t param_unit_begin(const ParamTable& t, int u) {
  FLEXSP_ASSERT(u >= 0 && u <= t.layers + 1);
  if (u == 0) return 0;
  if (u <= t.layers) return t.layer_begin(u - 1);
  return t.get(TensorKind::final_norm).offset;
}

int64_t param_unit_end(const ParamTable& t, int u) {
  return u == t.layers + 1 ? t.total : param_unit_begin(t, u + 1);
}

FlatParams::FlatParams(const ParamTable& t) {
  FLEXSP_ASSERT(t.get(TensorKind::embed).offset == 0);
  for (int u = 0; u < param_units(t); ++u) begin_.push_back(param_unit_begin(t, u));
}

// ---- LocalAttention ------------------------------------------------------------------------------

LocalAttention::LocalAttention(Backend& be, const ModelConfig& c, int64_t max_tokens)
    : be_(be), cfg_(c), max_tokens_(max_tokens), cu_(be, static_cast<size_t>(max_tokens) + 1),
      lse_(be, static_cast<size_t>((c.checkpoint_activations ? 1 : c.layers) *
                                   carve_size(max_tokens * c.heads))) {}

float* LocalAttention::lse(int layer) {
  // Under activation checkpointing a layer's forward runs again right before its backward.
  const size_t slot = cfg_.checkpoint_activations ? 0 : static_cast<size_t>(layer);
  return lse_.get() + slot * static_cast<size_t>(carve_size(max_tokens_ * cfg_.heads));
}

void LocalAttention::set_layout(const int32_t* cu, int nseq, int64_t tokens) {
  FLEXSP_CHECK(tokens <= max_tokens_, "micro-batch of {} tokens exceeds the {} the model was sized for",
               tokens, max_tokens_);
  FLEXSP_CHECK(nseq >= 0 && nseq <= max_tokens_ && cu != nullptr && cu[0] == 0 &&
                   cu[nseq] == tokens,
               "micro-batch: cu_seqlens must run from 0 to the token count {}", tokens);
  for (int s = 0; s < nseq; ++s)
    FLEXSP_CHECK(cu[s] <= cu[s + 1], "micro-batch: cu_seqlens decreases at sequence {}", s);
  be_.copy_from_host(cu_.get(), cu, (static_cast<size_t>(nseq) + 1) * sizeof(int32_t));
  cu_host_.assign(cu, cu + nseq + 1);
  nseq_ = nseq;
  tokens_ = tokens;
}

void LocalAttention::forward(int layer, const act_t* q, const act_t* k, const act_t* v,
                             act_t* out) {
  AttnShape s{cu_.get(), nseq_, cfg_.heads, cfg_.kv_heads, cfg_.head_dim,
              1.0 / std::sqrt(static_cast<double>(cfg_.head_dim)), cu_host_.data()};
  ScopedPhase timed(timers_, Phase::attention);
  be_.attention_forward(out, lse(layer), q, k, v, s);
}

void LocalAttention::backward(int layer, const act_t* dout, const act_t* q, const act_t* k,
                              const act_t* v, const act_t* out, act_t* dq, act_t* dk,
                              act_t* dv) {
  AttnShape s{cu_.get(), nseq_, cfg_.heads, cfg_.kv_heads, cfg_.head_dim,
              1.0 / std::sqrt(static_cast<double>(cfg_.head_dim)), cu_host_.data()};
  ScopedPhase timed(timers_, Phase::attention);
  be_.attention_backward(dq, dk, dv, dout, q, k, v, out, lse(layer), s);
}

// ---- workspace -----------------------------------------------------------------------------------

namespace {
// Logits budget per chunk (elements): 16M = 64 MB in fp32.
constexpr int64_t kLogitsBudget = int64_t{1} << 24;
}  // namespace

Llama::Llama(Backend& be, const ModelConfig& c, int64_t max_tokens, const TpGroup& tp, LlamaStage stage)
    : be_(be), cfg_(c), lc_(tp_local_config(c, tp.size)), tp_(tp),
      vocab_(tp_vocab_shard(c, tp.size, tp.rank)), table_(make_param_table(c, tp.size, tp.rank)),
      flat_(table_), max_tokens_(max_tokens), first_(stage.first), last_(stage.last),
      checkpoint_(c.checkpoint_activations), act_(be.act_dtype()), es_(be.act_size()) {
  validate_model_config(c);
  tp_check(c, tp.size);
  FLEXSP_CHECK(tp.size == 1 || tp.comm != nullptr, "model: tensor parallelism needs a communicator");
  FLEXSP_CHECK(max_tokens > 0 && max_tokens < (int64_t{1} << 31),
               "model: max tokens per micro-batch must be in 1 .. 2^31-1, got {}", max_tokens);
  chunk_check(c, tp.size);
  FLEXSP_CHECK(c.offload_plain_tokens >= 0, "model: offload_plain_tokens must be >= 0, got {}",
               c.offload_plain_tokens);
  // T: the group's tokens (what the column-parallel GEMMs and attention see); R: this
  // rank's rows of the residual stream. Widths are this rank's shares.
  // With token chunks (tp = 1: R = T) a layer's temporaries have Tc rows, its k and v T.
  const int64_t T = max_tokens, R = (max_tokens + tp.size - 1) / tp.size, H = c.hidden,
                Q = lc_.q_dim(), K = lc_.kv_dim(), F = lc_.ffn, V = lc_.vocab;
  const bool chunks = c.token_chunk > 0 && c.token_chunk < T;
  const int64_t Tc = chunks ? c.token_chunk : T;
  chunk_tokens_ = std::clamp<int64_t>(std::min(kLogitsBudget / V, c.token_chunk > 0 ? c.token_chunk : T), 1, T);
  const int64_t logits = last_ ? chunk_tokens_ * V : 0, losses = last_ ? T : 0;  // the head's
  // The saved activations (saved_layout.h): with offload the ring's layout and, for the
  // micro-batches that keep their blocks on the device, the plain one at P tokens.
  const bool offload = c.offload && LayerOffload::useful(c.layers, c.offload_ahead);
  const int ring = offload ? LayerOffload::ring_slots(c.layers, c.offload_ahead) : c.layers;
  plain_tokens_ = offload ? std::min(c.offload_plain_tokens, T) : 0;
  layout_ = saved_layout(lc_, tp.size, T, ring, nullptr, es_);
  if (plain_tokens_ > 0) plain_ = saved_layout(lc_, tp.size, plain_tokens_, c.layers, nullptr, es_);
  const int64_t region = std::max(layout_.bytes, plain_.bytes);  // a multiple of 64 elements
  const int64_t rh = carve_size(R * H), tk = carve_size(T * K), cq = carve_size(Tc * Q), cf = carve_size(Tc * F);
  const int64_t rest = rh + carve_size(logits)           // final norm, logits
                       + 2 * rh + 2 * cq + 2 * tk + 3 * cf;  // gradient scratch
  ws_ = Buffer<unsigned char>(be, static_cast<size_t>(region) + static_cast<size_t>(rest) * es_);
  stats_ = Buffer<float>(be, static_cast<size_t>(R + 2 * losses));
  layout_ = saved_layout(lc_, tp.size, T, ring, ws_.get(), es_);
  if (plain_tokens_ > 0) plain_ = saved_layout(lc_, tp.size, plain_tokens_, c.layers, ws_.get(), es_);
  saved_ = &layout_;
  act_t* p = ws_.get() + region;
  auto take = [&](int64_t n) {
    act_t* r = p;
    p = at(p, carve_size(n));
    return r;
  };
  ln_f_ = take(R * H); logits_ = take(logits);
  d_res_ = take(R * H); d_ln_ = take(R * H); d_att_ = take(Tc * Q); d_q_ = take(Tc * Q);
  d_k_ = take(T * K); d_v_ = take(T * K); swi_ = take(Tc * F); d_swi_ = take(Tc * F);
  d_up_ = take(Tc * F);
  FLEXSP_ASSERT(p == at(ws_.get() + region, rest));
  rstd_f_ = stats_.get();
  ce_loss_ = rstd_f_ + R;
  ce_lse_ = ce_loss_ + losses;
  if (act_ != DType::f32) {
    int64_t largest = 0;
    for (int u = 0; u < param_units(table_); ++u)
      largest = std::max(largest, param_unit_end(table_, u) - param_unit_begin(table_, u));
    wcast_[0] = Buffer<unsigned char>(be, static_cast<size_t>(largest) * es_);
    wcast_[1] = Buffer<unsigned char>(
        be, static_cast<size_t>(param_unit_end(table_, 0) - param_unit_begin(table_, 0)) * es_);
  }
  ids_ = Buffer<int32_t>(be, static_cast<size_t>(T));
  pos_ = Buffer<int32_t>(be, static_cast<size_t>(T));
  targets_ = Buffer<int32_t>(be, static_cast<size_t>(T));
  if (tp.size > 1) {
    shard_ids_ = Buffer<int32_t>(be, static_cast<size_t>(T));
    shard_targets_ = Buffer<int32_t>(be, static_cast<size_t>(T));
    full_ = Buffer<unsigned char>(be, static_cast<size_t>(T * H) * es_);
    part_ = Buffer<float>(be, static_cast<size_t>(T * H));
    reduced_ = Buffer<float>(be, static_cast<size_t>(R * H));
    if (last_) {
      ce_stats_ = Buffer<float>(be, static_cast<size_t>(3 * chunk_tokens_));
      ce_all_ = Buffer<float>(be, static_cast<size_t>(3 * chunk_tokens_ * tp.size));
    }
  }
  const std::vector<double> inv_freq = rope_inv_freq(c);
  inv_freq_ = Buffer<double>(be, inv_freq.size());
  be.copy_from_host(inv_freq_.get(), inv_freq.data(), inv_freq_.bytes());
  local_attn_ = std::make_unique<LocalAttention>(be, lc_, T);
  if (chunks) chunk_attn_ = std::make_unique<ChunkAttention>(be, lc_, Tc);
  if (offload) {
    size_t block = 0;
    for (const OffloadSpan& p : saved_spans(0, T, R)) block += p.bytes;
    offload_ = std::make_unique<LayerOffload>(be, c.layers, c.offload_ahead, block);
  }
}

// The pieces of ring slot s that a micro-batch of T tokens (R rows) saves for the backward.
std::vector<OffloadSpan> Llama::saved_spans(int s, int64_t T, int64_t R) const {
  const size_t rows = static_cast<size_t>(R * cfg_.hidden) * es_, f = sizeof(float) * static_cast<size_t>(R);
  auto cols = [&](int64_t n) { return static_cast<size_t>(T * n) * es_; };
  std::vector<OffloadSpan> v{{layout_.resid[static_cast<size_t>(s)], rows}};
  if (checkpoint_) return v;
  const LayerActs& a = layout_.acts[static_cast<size_t>(s)];
  const int64_t Q = lc_.q_dim(), K = lc_.kv_dim(), F = lc_.ffn;
  v.insert(v.end(), {{a.ln1, rows}, {a.q, cols(Q)}, {a.k, cols(K)}, {a.v, cols(K)}, {a.att, cols(Q)},
                     {a.xmid, rows}, {a.ln2, rows}, {a.gate, cols(F)}, {a.up, cols(F)}, {a.rstd1, f},
                     {a.rstd2, f}});
  return v;
}

void Llama::set_offload_trace(OffloadTrace t) {
  if (offload_) offload_->set_trace(std::move(t));
}

Llama::~Llama() = default;

size_t Llama::workspace_bytes() const {
  return ws_.bytes() + stats_.bytes() + wcast_[0].bytes() + wcast_[1].bytes() + 3 * ids_.bytes() +
         inv_freq_.bytes() + 2 * shard_ids_.bytes() + full_.bytes() + part_.bytes() + reduced_.bytes() +
         ce_stats_.bytes() + ce_all_.bytes() + local_attn_->workspace_bytes() +
         (chunk_attn_ ? chunk_attn_->workspace_bytes() : 0) + whole_q_.bytes() + whole_att_.bytes() +
         whole_d_att_.bytes() + whole_d_q_.bytes();
}

LayerActs& Llama::acts(int l) {
  return saved_->acts[static_cast<size_t>(l) % saved_->acts.size()];  // [1] under checkpointing
}

const act_t* Llama::unit_weights(ParamProvider& pp, int u, int slot) {
  if (act_ != DType::f32)
    if (const act_t* w = pp.unit_act_params(u)) return w;
  const float* w = pp.unit_params(u);
  if (act_ == DType::f32) return w;
  be_.cast(wcast_[slot].get(), act_, w, DType::f32,
           param_unit_end(table_, u) - param_unit_begin(table_, u));
  return wcast_[slot].get();
}

// ---- forward -------------------------------------------------------------------------------------

ForwardResult Llama::forward(const float* params, const MicroBatch& mb, AttentionOp* attn,
                             float* logits_host) {
  flat_.set(params, nullptr);
  return forward(flat_, mb, attn, logits_host);
}

ForwardResult Llama::forward(ParamProvider& pp, const MicroBatch& mb, AttentionOp* attn,
                             float* logits_host) {
  const int64_t T = mb.tokens;
  FLEXSP_CHECK(T >= 0 && T <= max_tokens_,
               "micro-batch of {} tokens exceeds the {} the model was sized for", T, max_tokens_);
  FLEXSP_CHECK(T % tp_.size == 0, "micro-batch of {} tokens is not a multiple of the {} "
               "tensor-parallel ranks", T, tp_.size);
  FLEXSP_CHECK(logits_host == nullptr || tp_.size == 1, "model: logits to the host need tp = 1");
  // With offload the micro-batch's blocks go to the host (the ring's layout) or stay on
  // the device (the plain one); without, the one layout at max tokens.
  const bool offloading = offload_ && (mb.offload || plain_tokens_ == 0);
  FLEXSP_CHECK(offloading || !offload_ || T <= plain_tokens_,
               "micro-batch of {} tokens keeps its blocks on the device, more than the model's "
               "offload_plain_tokens = {}", T, cfg_.offload_plain_tokens);
  ForwardResult r;
  for (int64_t t = 0; t < T; ++t) {
    FLEXSP_CHECK(mb.ids[t] >= 0 && mb.ids[t] < cfg_.vocab,
                 "token id {} at position {} of the micro-batch is outside the vocabulary (size {})",
                 mb.ids[t], t, cfg_.vocab);
    FLEXSP_CHECK(mb.targets[t] >= -1 && mb.targets[t] < cfg_.vocab,
                 "target {} at position {} of the micro-batch is outside the vocabulary (size {})",
                 mb.targets[t], t, cfg_.vocab);
    FLEXSP_CHECK(mb.positions[t] >= 0, "negative position at token {} of the micro-batch", t);
    r.predictions += mb.targets[t] >= 0;
  }
  if (attn == nullptr) {
    local_attn_->set_layout(mb.cu_seqlens, mb.nseq, T);
    attn = local_attn_.get();
    if (chunk_attn_) chunk_attn_->set_layout(mb.cu_seqlens, mb.nseq, T);
  }
  attn_ = attn;
  offloading_ = offloading;
  saved_ = offload_ && !offloading ? &plain_ : &layout_;
  tokens_ = T;
  rows_ = T / tp_.size;
  be_.copy_from_host(ids_.get(), mb.ids, T * sizeof(int32_t));
  be_.copy_from_host(pos_.get(), mb.positions, T * sizeof(int32_t));
  be_.copy_from_host(targets_.get(), mb.targets, T * sizeof(int32_t));
  if (tp_.size > 1) {
    // Ids and targets in this rank's vocabulary rows: -1 for ids elsewhere (zero rows)
    // and for no prediction; targets elsewhere point past the shard.
    const int64_t v0 = vocab_.begin, v1 = vocab_.begin + vocab_.valid;
    host_shard_.resize(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t)
      host_shard_[t] = mb.ids[t] >= v0 && mb.ids[t] < v1 ? mb.ids[t] - static_cast<int32_t>(v0) : -1;
    be_.copy_from_host(shard_ids_.get(), host_shard_.data(), T * sizeof(int32_t));
    for (int64_t t = 0; t < T; ++t) {
      const int32_t g = mb.targets[t];
      host_shard_[t] = g < 0 ? -1 : (g >= v0 && g < v1 ? g - static_cast<int32_t>(v0) : INT32_MAX);
    }
    be_.copy_from_host(shard_targets_.get(), host_shard_.data(), T * sizeof(int32_t));
  }

  const int64_t H = cfg_.hidden, V = lc_.vocab, R = rows_;
  const int L = cfg_.layers, head = L + 1;
  if (!first_) {
    // A later pipeline stage: resid(0) holds the previous stage's output.
  } else if (tp_.size == 1) {
    be_.embedding_forward(resid(0), unit_weights(pp, 0, 1), ids_.get(), T, H);
  } else {  // each rank's rows for the tokens in its vocabulary, summed over the group
    act_t* all = full_.get();
    be_.embedding_forward(all, unit_weights(pp, 0, 1), shard_ids_.get(), T, H);
    be_.cast(part_.get(), DType::f32, all, act_, T * H);
    scatter_partial_to(resid(0));
  }
  if (first_) pp.unit_done(0, false);
  if (offloading_) {
    std::vector<std::vector<OffloadSpan>> spans;
    for (int s = 0; s < offload_->slots(); ++s) spans.push_back(saved_spans(s, T, R));
    offload_->begin_forward(std::move(spans));
  }
  for (int l = 0; l < L; ++l) {
    const act_t* lw = unit_weights(pp, 1 + l, 0);
    if (l + 1 < L || last_) pp.prefetch(2 + l);  // the next layer, or the head (last stage)
    if (offloading_) offload_->before_forward(l);
    layer_forward(l, lw, acts(l));
    if (offloading_) offload_->after_forward(l);
    pp.unit_done(1 + l, false);
  }
  have_forward_ = true;
  if (!last_) return ForwardResult{};  // the output stays in resid(L)
  const int64_t hb = param_unit_begin(table_, head);
  const act_t* hw = unit_weights(pp, head, 0);
  const act_t* w_head =
      table_.tied ? unit_weights(pp, 0, 1) : at(hw, table_.get(TensorKind::lm_head).offset - hb);
  be_.rmsnorm_forward(ln_f_, rstd_f_, resid(L),
                      at(hw, table_.get(TensorKind::final_norm).offset - hb), R, H,
                      cfg_.norm_eps);
  const act_t* ln_f = gather_rows(ln_f_);
  std::vector<uint16_t> narrow_logits;
  for (int64_t c0 = 0; c0 < T; c0 += chunk_tokens_) {
    const int64_t n = std::min(chunk_tokens_, T - c0);
    logits_chunk(w_head, ln_f, c0, n);
    loss_chunk(c0, n);
    if (logits_host == nullptr) continue;
    const size_t count = static_cast<size_t>(n * V);
    if (act_ == DType::f32) {
      be_.copy_to_host(logits_host + c0 * V, logits_, count * sizeof(float));
    } else {
      narrow_logits.resize(count);
      be_.copy_to_host(narrow_logits.data(), logits_, count * sizeof(uint16_t));
      for (size_t i = 0; i < count; ++i)
        logits_host[c0 * V + static_cast<int64_t>(i)] = bf16_to_float(narrow_logits[i]);
    }
  }
  pp.unit_done(head, false);
  if (table_.tied) pp.unit_done(0, false);
  logits_kept_ = T <= chunk_tokens_;
  r.loss_sum = be_.sum(ce_loss_, T);
  if (tp_.rank != 0) r = ForwardResult{};  // the group's loss, counted once
  return r;
}

void Llama::logits_chunk(const act_t* w_head, const act_t* ln_f, int64_t c0, int64_t n) {
  be_.gemm_act(false, true, n, lc_.vocab, cfg_.hidden, 1.0f, at(ln_f, c0 * cfg_.hidden),
               cfg_.hidden, w_head, cfg_.hidden, 0.0f, logits_, act_, lc_.vocab);
}

void Llama::loss_chunk(int64_t c0, int64_t n) {
  if (tp_.size == 1) {
    be_.cross_entropy_forward(ce_loss_ + c0, ce_lse_ + c0, logits_, targets_.get() + c0, n,
                              lc_.vocab);
    return;
  }
  // Each rank's statistics of its vocabulary columns, exchanged, combined on every rank.
  be_.cross_entropy_shard_stats(ce_stats_.get(), logits_, shard_targets_.get() + c0, n,
                                lc_.vocab, vocab_.valid);
  {
    ScopedPhase timed(timers_, Phase::tp_comm);
    tp_.comm->all_gather(ce_stats_.get(), ce_all_.get(), static_cast<size_t>(3 * n), DType::f32);
  }
  be_.cross_entropy_shard_loss(ce_loss_ + c0, ce_lse_ + c0, ce_all_.get(), tp_.size,
                               targets_.get() + c0, n);
}

// ---- tensor-parallel exchanges --------------------------------------------------------------

const act_t* Llama::gather_rows(const act_t* x) {
  if (tp_.size == 1) return x;
  ScopedPhase timed(timers_, Phase::tp_comm);
  tp_.comm->all_gather(x, full_.get(), static_cast<size_t>(rows_ * cfg_.hidden), act_);
  return full_.get();
}

void Llama::scatter_partial_to(act_t* dx) {
  const int64_t n = rows_ * cfg_.hidden;
  {
    ScopedPhase timed(timers_, Phase::tp_comm);
    tp_.comm->reduce_scatter(part_.get(), reduced_.get(), static_cast<size_t>(n), DType::f32,
                             ReduceOp::sum);
  }
  be_.cast(dx, act_, reduced_.get(), DType::f32, n);
}

void Llama::row_parallel(const act_t* in, int64_t k, const act_t* w, const act_t* base,
                         act_t* y) {
  const int64_t T = tokens_, H = cfg_.hidden;
  if (base != y) be_.copy(y, base, static_cast<size_t>(rows_ * H) * es_);
  if (tp_.size == 1) {
    be_.gemm_act(false, true, T, H, k, 1.0f, in, k, w, k, 1.0f, y, act_, H);
    return;
  }
  be_.gemm_act(false, true, T, H, k, 1.0f, in, k, w, k, 0.0f, part_.get(), DType::f32, H);
  {
    ScopedPhase timed(timers_, Phase::tp_comm);
    tp_.comm->reduce_scatter(part_.get(), reduced_.get(), static_cast<size_t>(rows_ * H),
                             DType::f32, ReduceOp::sum);
  }
  be_.add_f32(y, reduced_.get(), rows_ * H);
}

void Llama::layer_forward(int l, const act_t* lw, LayerActs& a) {
  if (chunked()) return chunked_layer_forward(l, lw, a);
  const int64_t T = tokens_, R = rows_, H = cfg_.hidden, Q = lc_.q_dim(), K = lc_.kv_dim(),
                F = lc_.ffn;
  const int64_t lb = table_.layer_begin(l);
  auto w = [&](TensorKind k) { return at(lw, table_.get(k, l).offset - lb); };
  // y[T, n] = x[T, k] W^T, in act_dtype.
  auto linear = [&](const act_t* x, int64_t k, TensorKind wk, int64_t n, act_t* y) {
    be_.gemm_act(false, true, T, n, k, 1.0f, x, k, w(wk), k, 0.0f, y, act_, n);
  };
  const act_t* x = resid(l);
  be_.rmsnorm_forward(a.ln1, a.rstd1, x, w(TensorKind::attn_norm), R, H, cfg_.norm_eps);
  const act_t* ln1 = gather_rows(a.ln1);
  linear(ln1, H, TensorKind::q_proj, Q, a.q);
  linear(ln1, H, TensorKind::k_proj, K, a.k);
  linear(ln1, H, TensorKind::v_proj, K, a.v);
  be_.rope_forward(a.q, pos_.get(), T, lc_.heads, cfg_.head_dim, inv_freq_.get());
  be_.rope_forward(a.k, pos_.get(), T, lc_.kv_heads, cfg_.head_dim, inv_freq_.get());
  attn_->forward(l, a.q, a.k, a.v, a.att);
  row_parallel(a.att, Q, w(TensorKind::o_proj), x, a.xmid);
  be_.rmsnorm_forward(a.ln2, a.rstd2, a.xmid, w(TensorKind::mlp_norm), R, H, cfg_.norm_eps);
  const act_t* ln2 = gather_rows(a.ln2);
  linear(ln2, H, TensorKind::gate_proj, F, a.gate);
  linear(ln2, H, TensorKind::up_proj, F, a.up);
  be_.swiglu_forward(swi_, a.gate, a.up, T * F);
  row_parallel(swi_, F, w(TensorKind::down_proj), a.xmid, resid(l + 1));
}

// ---- idle pass ------------------------------------------------------------------------------------

void Llama::touch_weights(ParamProvider& pp, int u) {
  if (act_ != DType::f32 && pp.unit_act_params(u) != nullptr) return;
  pp.unit_params(u);
}

// Mirror the provider calls of forward and backward (this stage's part), in the same order.
void Llama::idle_forward(ParamProvider& pp) {
  const int L = cfg_.layers, head = L + 1;
  if (first_) {
    touch_weights(pp, 0);
    pp.unit_done(0, false);
  }
  for (int u = 1; u <= L; ++u) {
    touch_weights(pp, u);
    if (u < L || last_) pp.prefetch(u + 1);
    pp.unit_done(u, false);
  }
  if (!last_) return;
  touch_weights(pp, head);
  if (table_.tied) touch_weights(pp, 0);
  pp.unit_done(head, false);
  if (table_.tied) pp.unit_done(0, false);
}

void Llama::idle_backward(ParamProvider& pp) {
  const int L = cfg_.layers, head = L + 1;
  if (last_) {
    touch_weights(pp, head);
    pp.unit_grads(head);
    if (table_.tied) {
      touch_weights(pp, 0);
      pp.unit_grads(0);
    }
    pp.unit_done(head, true);
    if (table_.tied) pp.unit_done(0, true);
  }
  for (int l = L - 1; l >= 0; --l) {
    touch_weights(pp, 1 + l);
    if (l > 0) pp.prefetch(l);
    pp.unit_grads(1 + l);
    pp.unit_done(1 + l, true);
  }
  if (!first_) return;
  pp.unit_grads(0);
  pp.unit_done(0, true);
}

}  // namespace flexsp

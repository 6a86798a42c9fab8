// LLaMA forward/backward over a packed micro-batch (see llama.h for the design).
//
// Shapes (T local tokens, H hidden, Q = heads*head_dim, K = kv_heads*head_dim, F ffn):
//   resid[l]  [T,H]  input of layer l (resid[0] = embeddings, resid[L] = last output)
//   per layer: ln1 [T,H], rstd1 [T], q [T,Q] (after RoPE), k, v [T,K], att [T,Q],
//              xmid [T,H] (= resid[l] + o_proj(att)), ln2 [T,H], rstd2 [T], gate, up [T,F]
//   silu(gate)*up is not kept: it is recomputed in backward (one cheap pass) into act_.
// Weights are HF [out, in], so y = x W^T is gemm(no-trans, trans), dx = dy W is
// gemm(no-trans, no-trans) and dW += dy^T x is gemm(trans, no-trans, beta = 1).
// With tied embeddings lm_head reads the embedding matrix and its gradient goes to the
// embedding's gradient, which thus receives both contributions.
// Weights come unit by unit from a ParamProvider (llama.h); the pointer-based entry
// points wrap the buffers in FlatParams, so both paths run the same code.
#include "lib/model/llama.h"

#include <algorithm>
#include <cmath>

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
      lse_(be, static_cast<size_t>(c.layers) * max_tokens * c.heads) {}

void LocalAttention::set_layout(const int32_t* cu, int nseq, int64_t tokens) {
  FLEXSP_CHECK(tokens <= max_tokens_, "micro-batch of {} tokens exceeds the {} the model was sized for",
               tokens, max_tokens_);
  FLEXSP_CHECK(nseq >= 0 && nseq <= max_tokens_ && cu != nullptr && cu[0] == 0 &&
                   cu[nseq] == tokens,
               "micro-batch: cu_seqlens must run from 0 to the token count {}", tokens);
  for (int s = 0; s < nseq; ++s)
    FLEXSP_CHECK(cu[s] <= cu[s + 1], "micro-batch: cu_seqlens decreases at sequence {}", s);
  be_.copy_from_host(cu_.get(), cu, (static_cast<size_t>(nseq) + 1) * sizeof(int32_t));
  nseq_ = nseq;
  tokens_ = tokens;
}

void LocalAttention::forward(int layer, const float* q, const float* k, const float* v,
                             float* out) {
  AttnShape s{cu_.get(), nseq_, cfg_.heads, cfg_.kv_heads, cfg_.head_dim,
              1.0 / std::sqrt(static_cast<double>(cfg_.head_dim))};
  be_.attention_forward(out, lse_.get() + static_cast<size_t>(layer) * max_tokens_ * cfg_.heads,
                        q, k, v, s);
}

void LocalAttention::backward(int layer, const float* dout, const float* q, const float* k,
                              const float* v, const float* out, float* dq, float* dk,
                              float* dv) {
  AttnShape s{cu_.get(), nseq_, cfg_.heads, cfg_.kv_heads, cfg_.head_dim,
              1.0 / std::sqrt(static_cast<double>(cfg_.head_dim))};
  be_.attention_backward(dq, dk, dv, dout, q, k, v, out,
                         lse_.get() + static_cast<size_t>(layer) * max_tokens_ * cfg_.heads, s);
}

// ---- workspace -----------------------------------------------------------------------------------

struct Llama::LayerActs {
  float *ln1, *rstd1, *q, *k, *v, *att, *xmid, *ln2, *rstd2, *gate, *up;
};

namespace {
// Logits budget per chunk (floats): 16M = 64 MB.
constexpr int64_t kLogitsBudget = int64_t{1} << 24;
}  // namespace

Llama::Llama(Backend& be, const ModelConfig& c, int64_t max_tokens)
    : be_(be), cfg_(c), table_(make_param_table(c)), flat_(table_), max_tokens_(max_tokens),
      checkpoint_(c.checkpoint_activations) {
  validate_model_config(c);
  FLEXSP_CHECK(max_tokens > 0 && max_tokens < (int64_t{1} << 31),
               "model: max tokens per micro-batch must be in 1 .. 2^31-1, got {}", max_tokens);
  const int64_t T = max_tokens, H = c.hidden, Q = c.q_dim(), K = c.kv_dim(), F = c.ffn,
                V = c.vocab;
  chunk_tokens_ = std::clamp<int64_t>(kLogitsBudget / V, 1, T);
  const int n_slots = checkpoint_ ? 1 : c.layers;
  const int64_t per_layer = T * (3 * H + 2 * Q + 2 * K + 2 * F + 2);
  const int64_t total = (c.layers + 1) * T * H + n_slots * per_layer  // saved activations
                        + T * (H + 3) + chunk_tokens_ * V             // final norm, loss
                        + T * (2 * H + 2 * Q + 2 * K + 3 * F);        // gradient scratch
  ws_ = Buffer<float>(be, static_cast<size_t>(total));
  float* p = ws_.get();
  auto take = [&p](int64_t n) {
    float* r = p;
    p += n;
    return r;
  };
  for (int l = 0; l <= c.layers; ++l) resid_.push_back(take(T * H));
  for (int i = 0; i < n_slots; ++i) {
    LayerActs a;
    a.ln1 = take(T * H); a.rstd1 = take(T); a.q = take(T * Q); a.k = take(T * K);
    a.v = take(T * K); a.att = take(T * Q); a.xmid = take(T * H); a.ln2 = take(T * H);
    a.rstd2 = take(T); a.gate = take(T * F); a.up = take(T * F);
    layer_acts_.push_back(a);
  }
  rstd_f_ = take(T); ln_f_ = take(T * H); ce_loss_ = take(T); ce_lse_ = take(T);
  logits_ = take(chunk_tokens_ * V);
  d_res_ = take(T * H); d_ln_ = take(T * H); d_att_ = take(T * Q); d_q_ = take(T * Q);
  d_k_ = take(T * K); d_v_ = take(T * K); act_ = take(T * F); d_act_ = take(T * F);
  d_up_ = take(T * F);
  FLEXSP_ASSERT(p == ws_.get() + total);
  ids_ = Buffer<int32_t>(be, static_cast<size_t>(T));
  pos_ = Buffer<int32_t>(be, static_cast<size_t>(T));
  targets_ = Buffer<int32_t>(be, static_cast<size_t>(T));
  local_attn_ = std::make_unique<LocalAttention>(be, c, T);
}

Llama::~Llama() = default;

size_t Llama::workspace_bytes() const {
  return ws_.bytes() + 3 * ids_.bytes() +
         static_cast<size_t>(cfg_.layers) * max_tokens_ * cfg_.heads * sizeof(float);
}

Llama::LayerActs& Llama::acts(int l) { return layer_acts_[checkpoint_ ? 0 : l]; }

// ---- forward -------------------------------------------------------------------------------------

ForwardResult Llama::forward(const float* params, const MicroBatch& mb, AttentionOp* attn,
                             float* logits_host) {
  flat_.set(params, nullptr);
  return forward(flat_, mb, attn, logits_host);
}

void Llama::backward(const float* params, float* grads, double loss_scale) {
  flat_.set(params, grads);
  backward(flat_, loss_scale);
}

ForwardResult Llama::forward(ParamProvider& pp, const MicroBatch& mb, AttentionOp* attn,
                             float* logits_host) {
  const int64_t T = mb.tokens;
  FLEXSP_CHECK(T >= 0 && T <= max_tokens_,
               "micro-batch of {} tokens exceeds the {} the model was sized for", T, max_tokens_);
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
  }
  attn_ = attn;
  tokens_ = T;
  be_.copy_from_host(ids_.get(), mb.ids, T * sizeof(int32_t));
  be_.copy_from_host(pos_.get(), mb.positions, T * sizeof(int32_t));
  be_.copy_from_host(targets_.get(), mb.targets, T * sizeof(int32_t));

  const int64_t H = cfg_.hidden, V = cfg_.vocab;
  const int L = cfg_.layers, head = L + 1;
  be_.embedding_forward(resid_[0], pp.unit_params(0), ids_.get(), T, H);
  pp.unit_done(0, false);
  for (int l = 0; l < L; ++l) {
    layer_forward(l, pp.unit_params(1 + l), acts(l));
    pp.unit_done(1 + l, false);
  }
  const int64_t hb = param_unit_begin(table_, head);
  const float* hw = pp.unit_params(head);
  const float* w_head = table_.tied ? pp.unit_params(0) : hw + (table_.get(TensorKind::lm_head).offset - hb);
  be_.rmsnorm_forward(ln_f_, rstd_f_, resid_[L], hw + (table_.get(TensorKind::final_norm).offset - hb),
                      T, H, cfg_.norm_eps);
  for (int64_t c0 = 0; c0 < T; c0 += chunk_tokens_) {
    const int64_t n = std::min(chunk_tokens_, T - c0);
    logits_chunk(w_head, c0, n);
    be_.cross_entropy_forward(ce_loss_ + c0, ce_lse_ + c0, logits_, targets_.get() + c0, n, V);
    if (logits_host != nullptr)
      be_.copy_to_host(logits_host + c0 * V, logits_, static_cast<size_t>(n * V) * sizeof(float));
  }
  pp.unit_done(head, false);
  if (table_.tied) pp.unit_done(0, false);
  logits_kept_ = T <= chunk_tokens_;
  r.loss_sum = be_.sum(ce_loss_, T);
  have_forward_ = true;
  return r;
}

void Llama::logits_chunk(const float* w_head, int64_t c0, int64_t n) {
  be_.gemm(false, true, n, cfg_.vocab, cfg_.hidden, 1.0f, ln_f_ + c0 * cfg_.hidden, cfg_.hidden,
           w_head, cfg_.hidden, 0.0f, logits_, cfg_.vocab);
}

void Llama::layer_forward(int l, const float* lw, LayerActs& a) {
  const int64_t T = tokens_, H = cfg_.hidden, Q = cfg_.q_dim(), K = cfg_.kv_dim(), F = cfg_.ffn;
  const int64_t lb = table_.layer_begin(l);
  auto w = [&](TensorKind k) { return lw + (table_.get(k, l).offset - lb); };
  const float* x = resid_[l];
  be_.rmsnorm_forward(a.ln1, a.rstd1, x, w(TensorKind::attn_norm), T, H, cfg_.norm_eps);
  be_.gemm(false, true, T, Q, H, 1.0f, a.ln1, H, w(TensorKind::q_proj), H, 0.0f, a.q, Q);
  be_.gemm(false, true, T, K, H, 1.0f, a.ln1, H, w(TensorKind::k_proj), H, 0.0f, a.k, K);
  be_.gemm(false, true, T, K, H, 1.0f, a.ln1, H, w(TensorKind::v_proj), H, 0.0f, a.v, K);
  be_.rope_forward(a.q, pos_.get(), T, cfg_.heads, cfg_.head_dim, cfg_.rope_theta);
  be_.rope_forward(a.k, pos_.get(), T, cfg_.kv_heads, cfg_.head_dim, cfg_.rope_theta);
  attn_->forward(l, a.q, a.k, a.v, a.att);
  be_.copy(a.xmid, x, static_cast<size_t>(T * H) * sizeof(float));
  be_.gemm(false, true, T, H, Q, 1.0f, a.att, Q, w(TensorKind::o_proj), Q, 1.0f, a.xmid, H);
  be_.rmsnorm_forward(a.ln2, a.rstd2, a.xmid, w(TensorKind::mlp_norm), T, H, cfg_.norm_eps);
  be_.gemm(false, true, T, F, H, 1.0f, a.ln2, H, w(TensorKind::gate_proj), H, 0.0f, a.gate, F);
  be_.gemm(false, true, T, F, H, 1.0f, a.ln2, H, w(TensorKind::up_proj), H, 0.0f, a.up, F);
  be_.swiglu_forward(act_, a.gate, a.up, T * F);
  float* out = resid_[l + 1];
  be_.copy(out, a.xmid, static_cast<size_t>(T * H) * sizeof(float));
  be_.gemm(false, true, T, H, F, 1.0f, act_, F, w(TensorKind::down_proj), F, 1.0f, out, H);
}

// ---- backward ------------------------------------------------------------------------------------

void Llama::backward(ParamProvider& pp, double loss_scale) {
  FLEXSP_ASSERT(have_forward_);
  const int64_t T = tokens_, H = cfg_.hidden, V = cfg_.vocab;
  const int L = cfg_.layers, head = L + 1;
  const int64_t hb = param_unit_begin(table_, head);
  const float* hw = pp.unit_params(head);
  float* hg = pp.unit_grads(head);
  const int64_t lm = table_.tied ? 0 : table_.get(TensorKind::lm_head).offset - hb;
  const float* w_head = table_.tied ? pp.unit_params(0) : hw + lm;
  float* g_head = table_.tied ? pp.unit_grads(0) : hg + lm;
  for (int64_t c0 = 0; c0 < T; c0 += chunk_tokens_) {
    const int64_t n = std::min(chunk_tokens_, T - c0);
    if (!logits_kept_) logits_chunk(w_head, c0, n);
    be_.cross_entropy_backward(logits_, logits_, ce_lse_ + c0, targets_.get() + c0, n, V,
                               loss_scale);
    be_.gemm(false, false, n, H, V, 1.0f, logits_, V, w_head, H, 0.0f, d_ln_ + c0 * H, H);
    be_.gemm(true, false, V, H, n, 1.0f, logits_, V, ln_f_ + c0 * H, H, 1.0f, g_head, H);
  }
  logits_kept_ = false;  // overwritten by their gradient
  be_.zero(d_res_, static_cast<size_t>(T * H) * sizeof(float));
  const int64_t fn = table_.get(TensorKind::final_norm).offset - hb;
  be_.rmsnorm_backward(d_res_, hg + fn, d_ln_, resid_[L], hw + fn, rstd_f_, T, H);
  pp.unit_done(head, true);
  if (table_.tied) pp.unit_done(0, true);  // lm_head's part of the embedding gradient
  for (int l = L - 1; l >= 0; --l) {
    const float* lw = pp.unit_params(1 + l);
    if (checkpoint_) layer_forward(l, lw, acts(l));
    layer_backward(l, lw, pp.unit_grads(1 + l), acts(l));
    pp.unit_done(1 + l, true);
  }
  be_.embedding_backward(pp.unit_grads(0), d_res_, ids_.get(), T, H);
  pp.unit_done(0, true);
  have_forward_ = false;
}

// Mirrors the provider calls of forward and backward, in the same order.
void Llama::idle_pass(ParamProvider& pp) {
  const int L = cfg_.layers, head = L + 1;
  for (int u = 0; u <= L; ++u) {
    pp.unit_params(u);
    pp.unit_done(u, false);
  }
  pp.unit_params(head);
  if (table_.tied) pp.unit_params(0);
  pp.unit_done(head, false);
  if (table_.tied) pp.unit_done(0, false);
  pp.unit_params(head);
  pp.unit_grads(head);
  if (table_.tied) {
    pp.unit_params(0);
    pp.unit_grads(0);
  }
  pp.unit_done(head, true);
  if (table_.tied) pp.unit_done(0, true);
  for (int l = L - 1; l >= 0; --l) {
    pp.unit_params(1 + l);
    pp.unit_grads(1 + l);
    pp.unit_done(1 + l, true);
  }
  pp.unit_grads(0);
  pp.unit_done(0, true);
}

// On entry d_res_ = dLoss/d resid[l+1]; on exit dLoss/d resid[l].
void Llama::layer_backward(int l, const float* lw, float* lg, LayerActs& a) {
  const int64_t T = tokens_, H = cfg_.hidden, Q = cfg_.q_dim(), K = cfg_.kv_dim(), F = cfg_.ffn;
  const int64_t lb = table_.layer_begin(l);
  auto w = [&](TensorKind k) { return lw + (table_.get(k, l).offset - lb); };
  auto g = [&](TensorKind k) { return lg + (table_.get(k, l).offset - lb); };
  // MLP: out = xmid + down(silu(gate) * up), gate/up = W ln2, ln2 = norm(xmid).
  be_.swiglu_forward(act_, a.gate, a.up, T * F);
  be_.gemm(false, false, T, F, H, 1.0f, d_res_, H, w(TensorKind::down_proj), F, 0.0f, d_act_, F);
  be_.gemm(true, false, H, F, T, 1.0f, d_res_, H, act_, F, 1.0f, g(TensorKind::down_proj), F);
  be_.swiglu_backward(d_act_, d_up_, d_act_, a.gate, a.up, T * F);  // d_act_ becomes d_gate
  be_.gemm(false, false, T, H, F, 1.0f, d_act_, F, w(TensorKind::gate_proj), H, 0.0f, d_ln_, H);
  be_.gemm(false, false, T, H, F, 1.0f, d_up_, F, w(TensorKind::up_proj), H, 1.0f, d_ln_, H);
  be_.gemm(true, false, F, H, T, 1.0f, d_act_, F, a.ln2, H, 1.0f, g(TensorKind::gate_proj), H);
  be_.gemm(true, false, F, H, T, 1.0f, d_up_, F, a.ln2, H, 1.0f, g(TensorKind::up_proj), H);
  be_.rmsnorm_backward(d_res_, g(TensorKind::mlp_norm), d_ln_, a.xmid, w(TensorKind::mlp_norm),
                       a.rstd2, T, H);
  // Attention: xmid = x + o_proj(att), att = attn(rope(q), rope(k), v), q/k/v = W ln1.
  be_.gemm(false, false, T, Q, H, 1.0f, d_res_, H, w(TensorKind::o_proj), Q, 0.0f, d_att_, Q);
  be_.gemm(true, false, H, Q, T, 1.0f, d_res_, H, a.att, Q, 1.0f, g(TensorKind::o_proj), Q);
  attn_->backward(l, d_att_, a.q, a.k, a.v, a.att, d_q_, d_k_, d_v_);
  be_.rope_backward(d_q_, pos_.get(), T, cfg_.heads, cfg_.head_dim, cfg_.rope_theta);
  be_.rope_backward(d_k_, pos_.get(), T, cfg_.kv_heads, cfg_.head_dim, cfg_.rope_theta);
  be_.gemm(false, false, T, H, Q, 1.0f, d_q_, Q, w(TensorKind::q_proj), H, 0.0f, d_ln_, H);
  be_.gemm(false, false, T, H, K, 1.0f, d_k_, K, w(TensorKind::k_proj), H, 1.0f, d_ln_, H);
  be_.gemm(false, false, T, H, K, 1.0f, d_v_, K, w(TensorKind::v_proj), H, 1.0f, d_ln_, H);
  be_.gemm(true, false, Q, H, T, 1.0f, d_q_, Q, a.ln1, H, 1.0f, g(TensorKind::q_proj), H);
  be_.gemm(true, false, K, H, T, 1.0f, d_k_, K, a.ln1, H, 1.0f, g(TensorKind::k_proj), H);
  be_.gemm(true, false, K, H, T, 1.0f, d_v_, K, a.ln1, H, 1.0f, g(TensorKind::v_proj), H);
  be_.rmsnorm_backward(d_res_, g(TensorKind::attn_norm), d_ln_, resid_[l],
                       w(TensorKind::attn_norm), a.rstd1, T, H);
}

}  // namespace flexsp

// LLaMA backward over the last forward's micro-batch (llama.h for the design, llama.cpp
// for the shapes and the forward that fills the saved activations this pass reads).
//
// The pass runs unit by unit in reverse flat order (this stage's head, layers L-1 .. 0,
// embedding), asking the ParamProvider for each unit's weights and gradient accumulator
// right before use and saying when it is done: a provider that shards (ZeRO-3) then
// reduces a unit's gradient as soon as the unit is finished, and a prefetch of the layer
// below lets it gather those weights meanwhile. Weights are HF [out, in]: for y = x W^T,
// dx = dy W is gemm(no-trans, no-trans) and dW += dy^T x is gemm(trans, no-trans,
// beta = 1), always into fp32 accumulators whatever the activation type. With tied
// embeddings lm_head's gradient goes to the embedding's, which thus receives both
// contributions. The head recomputes its logits chunk by chunk unless forward kept the
// only chunk, and overwrites them with their gradient. With tensor parallelism the input
// gradients of column-parallel GEMMs are fp32 partial sums that one reduce-scatter adds
// up into this rank's rows.
#include "lib/model/llama.h"

#include <algorithm>

#include "lib/util/error.h"

namespace flexsp {

void Llama::backward(const float* params, float* grads, double loss_scale) {
  flat_.set(params, grads);
  backward(flat_, loss_scale);
}

void Llama::backward(ParamProvider& pp, double loss_scale) {
  FLEXSP_ASSERT(have_forward_);
  const int64_t T = tokens_, H = cfg_.hidden;
  const int L = cfg_.layers;
  const bool tp = tp_.size > 1;
  if (last_) backward_head(pp, loss_scale);  // else d_res_ holds the next stage's gradient
  if (offloading_) offload_->begin_backward();
  for (int l = L - 1; l >= 0; --l) {
    const act_t* lw = unit_weights(pp, 1 + l, 0);
    if (l > 0) pp.prefetch(l);  // layer l - 1 (the embedding's backward needs no weights)
    if (offloading_) offload_->before_backward(l);
    if (chunked()) {
      chunked_layer_backward(l, lw, pp.unit_grads(1 + l), acts(l));
    } else {
      if (checkpoint_) layer_forward(l, lw, acts(l));
      layer_backward(l, lw, pp.unit_grads(1 + l), acts(l));
    }
    pp.unit_done(1 + l, true);
  }
  if (first_) {
    be_.embedding_backward(pp.unit_grads(0), gather_rows(d_res_),
                           tp ? shard_ids_.get() : ids_.get(), T, H);
    pp.unit_done(0, true);
  }
  have_forward_ = false;
}

// The head and the loss: leaves dLoss/d resid[L] in d_res_.
void Llama::backward_head(ParamProvider& pp, double loss_scale) {
  const int64_t T = tokens_, R = rows_, H = cfg_.hidden, V = lc_.vocab;
  const int L = cfg_.layers, head = L + 1;
  const bool tp = tp_.size > 1;
  const int64_t hb = param_unit_begin(table_, head);
  const act_t* hw = unit_weights(pp, head, 0);
  float* hg = pp.unit_grads(head);
  const int64_t lm = table_.tied ? 0 : table_.get(TensorKind::lm_head).offset - hb;
  const act_t* w_head = table_.tied ? unit_weights(pp, 0, 1) : at(hw, lm);
  float* g_head = table_.tied ? pp.unit_grads(0) : hg + lm;
  const act_t* ln_f = gather_rows(ln_f_);
  for (int64_t c0 = 0; c0 < T; c0 += chunk_tokens_) {
    const int64_t n = std::min(chunk_tokens_, T - c0);
    if (!logits_kept_) logits_chunk(w_head, ln_f, c0, n);
    if (tp)
      be_.cross_entropy_shard_backward(logits_, logits_, ce_lse_ + c0, shard_targets_.get() + c0,
                                       n, V, vocab_.valid, loss_scale);
    else
      be_.cross_entropy_backward(logits_, logits_, ce_lse_ + c0, targets_.get() + c0, n, V,
                                 loss_scale);
    // d ln_f (this rank's vocabulary's part, summed over the group below).
    if (tp)
      be_.gemm_act(false, false, n, H, V, 1.0f, logits_, V, w_head, H, 0.0f,
                   part_.get() + c0 * H, DType::f32, H);
    else
      be_.gemm_act(false, false, n, H, V, 1.0f, logits_, V, w_head, H, 0.0f, at(d_ln_, c0 * H),
                   act_, H);
    be_.gemm_act(true, false, V, H, n, 1.0f, logits_, V, at(ln_f, c0 * H), H, 1.0f, g_head,
                 DType::f32, H);
  }
  if (tp) scatter_partial_to(d_ln_);
  logits_kept_ = false;  // overwritten by their gradient
  be_.zero(d_res_, static_cast<size_t>(R * H) * es_);
  const int64_t fn = table_.get(TensorKind::final_norm).offset - hb;
  be_.rmsnorm_backward(d_res_, hg + fn, d_ln_, resid(L), at(hw, fn), rstd_f_, R, H);
  pp.unit_done(head, true);
  if (table_.tied) pp.unit_done(0, true);  // lm_head's part of the embedding gradient
}

// ---- tensor-parallel input gradients --------------------------------------------------------

void Llama::column_input_grad(std::initializer_list<InputGradTerm> terms, act_t* dx) {
  const int64_t T = tokens_, H = cfg_.hidden;
  const bool tp = tp_.size > 1;
  bool first = true;
  for (const InputGradTerm& t : terms) {
    be_.gemm_act(false, false, T, H, t.n, 1.0f, t.dy, t.n, t.w, H, first ? 0.0f : 1.0f,
                 tp ? static_cast<void*>(part_.get()) : dx, tp ? DType::f32 : act_, H);
    first = false;
  }
  if (tp) scatter_partial_to(dx);
}

// ---- layer backward ------------------------------------------------------------------------

// On entry d_res_ = dLoss/d resid[l+1]; on exit dLoss/d resid[l] (this rank's rows).
void Llama::layer_backward(int l, const act_t* lw, float* lg, LayerActs& a) {
  const int64_t T = tokens_, R = rows_, H = cfg_.hidden, Q = lc_.q_dim(), K = lc_.kv_dim(),
                F = lc_.ffn;
  const int64_t lb = table_.layer_begin(l);
  auto w = [&](TensorKind k) { return at(lw, table_.get(k, l).offset - lb); };
  auto g = [&](TensorKind k) { return lg + (table_.get(k, l).offset - lb); };
  // For y = x W^T (x [T, k], y [T, n]): dx = dy W, and dW += dy^T x in fp32.
  auto input_grad = [&](const act_t* dy, int64_t n, TensorKind wk, int64_t k, act_t* dx) {
    be_.gemm_act(false, false, T, k, n, 1.0f, dy, n, w(wk), k, 0.0f, dx, act_, k);
  };
  auto weight_grad = [&](const act_t* dy, int64_t n, const act_t* x, int64_t k, TensorKind wk) {
    be_.gemm_act(true, false, n, k, T, 1.0f, dy, n, x, k, 1.0f, g(wk), DType::f32, k);
  };
  // MLP: out = xmid + down(silu(gate) * up), gate/up = W ln2, ln2 = norm(xmid).
  be_.swiglu_forward(swi_, a.gate, a.up, T * F);
  const act_t* d_out = gather_rows(d_res_);
  input_grad(d_out, H, TensorKind::down_proj, F, d_swi_);
  weight_grad(d_out, H, swi_, F, TensorKind::down_proj);
  be_.swiglu_backward(d_swi_, d_up_, d_swi_, a.gate, a.up, T * F);  // d_swi_ becomes d_gate
  column_input_grad({{d_swi_, F, w(TensorKind::gate_proj)}, {d_up_, F, w(TensorKind::up_proj)}},
                    d_ln_);
  const act_t* ln2 = gather_rows(a.ln2);  // again: forward did not keep it
  weight_grad(d_swi_, F, ln2, H, TensorKind::gate_proj);
  weight_grad(d_up_, F, ln2, H, TensorKind::up_proj);
  be_.rmsnorm_backward(d_res_, g(TensorKind::mlp_norm), d_ln_, a.xmid, w(TensorKind::mlp_norm),
                       a.rstd2, R, H);
  // Attention: xmid = x + o_proj(att), att = attn(rope(q), rope(k), v), q/k/v = W ln1.
  const act_t* d_mid = gather_rows(d_res_);
  input_grad(d_mid, H, TensorKind::o_proj, Q, d_att_);
  weight_grad(d_mid, H, a.att, Q, TensorKind::o_proj);
  attn_->backward(l, d_att_, a.q, a.k, a.v, a.att, d_q_, d_k_, d_v_);
  be_.rope_backward(d_q_, pos_.get(), T, lc_.heads, cfg_.head_dim, inv_freq_.get());
  be_.rope_backward(d_k_, pos_.get(), T, lc_.kv_heads, cfg_.head_dim, inv_freq_.get());
  column_input_grad({{d_q_, Q, w(TensorKind::q_proj)},
                     {d_k_, K, w(TensorKind::k_proj)},
                     {d_v_, K, w(TensorKind::v_proj)}},
                    d_ln_);
  const act_t* ln1 = gather_rows(a.ln1);
  weight_grad(d_q_, Q, ln1, H, TensorKind::q_proj);
  weight_grad(d_k_, K, ln1, H, TensorKind::k_proj);
  weight_grad(d_v_, K, ln1, H, TensorKind::v_proj);
  be_.rmsnorm_backward(d_res_, g(TensorKind::attn_norm), d_ln_, resid(l),
                       w(TensorKind::attn_norm), a.rstd1, R, H);
}

}  // namespace flexsp

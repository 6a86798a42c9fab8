// Token-chunked layers (chunked_layer.h): the chunk attention, and the Llama members that
// run a layer over chunks. Shapes as llama.cpp's (H hidden, Q = heads*head_dim, K =
// kv_heads*head_dim, F ffn); tp = 1, so a chunk's rows are its tokens.
#include "lib/model/chunked_layer.h"

#include <algorithm>
#include <cmath>

#include "lib/model/llama.h"
#include "lib/util/error.h"

namespace flexsp {

void chunk_check(const ModelConfig& c, int tp) {
  FLEXSP_CHECK(c.token_chunk >= 0, "train.token_chunk: must be >= 0 (0: off), got {}", c.token_chunk);
  if (c.token_chunk == 0) return;
  FLEXSP_CHECK(c.checkpoint_activations,
               "train.token_chunk: {} needs model.checkpoint_activations = true (a chunked layer keeps "
               "only its input and recomputes the rest chunk by chunk)",
               c.token_chunk);
  FLEXSP_CHECK(tp == 1,
               "train.token_chunk: {} is not supported with tensor parallelism (parallel.tp_size = {}): "
               "its exchanges run over whole micro-batches",
               c.token_chunk, tp);
}

// ---- ChunkAttention ------------------------------------------------------------------------------

ChunkAttention::ChunkAttention(Backend& be, const ModelConfig& c, int64_t chunk)
    : be_(be), cfg_(c), chunk_(chunk), es_(be.act_size()) {
  FLEXSP_ASSERT(chunk > 0);
  const size_t C = static_cast<size_t>(chunk), q = C * c.q_dim(), kv = C * c.kv_dim();
  lse_ = Buffer<float>(be, C * c.heads);
  lse_part_ = Buffer<float>(be, C * c.heads);
  o_part_ = Buffer<unsigned char>(be, q * es_);
  dq_part_ = Buffer<unsigned char>(be, q * es_);
  dkv_part_ = Buffer<unsigned char>(be, 2 * kv * es_);
}

size_t ChunkAttention::workspace_bytes() const {
  return lse_.bytes() + lse_part_.bytes() + o_part_.bytes() + dq_part_.bytes() + dkv_part_.bytes() +
         spans_.bytes();
}

void ChunkAttention::set_layout(const int32_t* cu, int nseq, int64_t tokens) {
  cu_.assign(cu, cu + nseq + 1);
  tokens_ = tokens;
}

// The diagonal call (every sequence of the chunk against its own rows of the chunk,
// causal), then the earlier key blocks of the one sequence that began before the chunk,
// nearest first: C rows at a time, every key visible.
void ChunkAttention::plan_calls(int64_t c0, int64_t n) {
  FLEXSP_ASSERT(n > 0 && n <= chunk_ && c0 + n <= tokens_);
  const int64_t c1 = c0 + n;
  calls_.clear();
  spans_host_.clear();
  const int s0 = static_cast<int>(std::upper_bound(cu_.begin(), cu_.end(), c0) - cu_.begin()) - 1;
  Call d;
  d.qrows = d.krows = n;
  d.k0 = c0;
  d.diagonal = true;
  spans_host_.push_back(0);
  for (int s = s0;; ++s) {
    const int64_t end = std::min<int64_t>(cu_[s + 1], c1);
    spans_host_.push_back(static_cast<int32_t>(end - c0));
    ++d.nseq;
    if (end >= c1) break;
  }
  calls_.push_back(d);
  const int64_t start = cu_[s0];
  const int32_t qrows = static_cast<int32_t>(std::min<int64_t>(cu_[s0 + 1], c1) - c0);
  for (int64_t k1 = c0; k1 > start; k1 -= chunk_) {
    Call e;
    e.k0 = std::max(start, k1 - chunk_);
    e.qrows = qrows;
    e.krows = k1 - e.k0;
    e.nseq = 1;
    e.at = spans_host_.size();
    const int32_t kr = static_cast<int32_t>(e.krows);
    spans_host_.insert(spans_host_.end(), {0, qrows, 0, kr, static_cast<int32_t>(c0 - e.k0)});
    calls_.push_back(e);
  }
  spans_.ensure(be_, spans_host_.size());
  be_.copy_from_host(spans_.get(), spans_host_.data(), spans_host_.size() * sizeof(int32_t));
}

AttnShape ChunkAttention::shape(const Call& c) const {
  const int32_t* h = spans_host_.data() + c.at;
  const int32_t* d = spans_.get() + c.at;
  AttnShape s{d, c.nseq, cfg_.heads, cfg_.kv_heads, cfg_.head_dim,
              1.0 / std::sqrt(static_cast<double>(cfg_.head_dim)), h};
  if (!c.diagonal) {  // one sequence: cu_q [2], cu_k [2], its offset
    s.cu_seqlens_k = d + 2;
    s.cu_seqlens_k_host = h + 2;
    s.causal_offset = d + 4;
    s.causal_offset_host = h + 4;
  }
  return s;
}

void ChunkAttention::forward(int64_t c0, int64_t n, const act_t* q, const act_t* k,
                             const act_t* v, act_t* out) {
  plan_calls(c0, n);
  const int64_t kw = cfg_.kv_dim();
  for (const Call& c : calls_) {
    const AttnShape s = shape(c);
    const act_t* kb = act_at(k, c.k0 * kw, es_);
    const act_t* vb = act_at(v, c.k0 * kw, es_);
    if (c.diagonal) {  // every row sees itself: the running out and lse start here
      be_.attention_forward(out, lse_.get(), q, kb, vb, s);
      continue;
    }
    be_.attention_forward(o_part_.get(), lse_part_.get(), q, kb, vb, s);
    be_.attention_merge(out, lse_.get(), o_part_.get(), lse_part_.get(), c.qrows, cfg_.heads,
                        cfg_.head_dim);
  }
}

void ChunkAttention::backward(int64_t c0, int64_t n, const act_t* dout, const act_t* q,
                              const act_t* k, const act_t* v, const act_t* out, act_t* dq,
                              act_t* dk, act_t* dv) {
  FLEXSP_ASSERT(!calls_.empty() && calls_[0].k0 == c0 && calls_[0].qrows == n);
  const int64_t kw = cfg_.kv_dim(), qw = cfg_.q_dim();
  act_t* dkp = dkv_part_.get();
  act_t* dvp = act_at(dkp, chunk_ * kw, es_);
  for (const Call& c : calls_) {
    const AttnShape s = shape(c);
    const int64_t o = c.k0 * kw;
    act_t* dqc = c.diagonal ? dq : dq_part_.get();  // the diagonal covers every row
    be_.attention_backward(dqc, dkp, dvp, dout, q, act_at(k, o, es_), act_at(v, o, es_), out,
                           lse_.get(), s);
    if (!c.diagonal) be_.axpy_act(dq, dqc, c.qrows * qw, 1.0f);
    be_.axpy_act(act_at(dk, o, es_), dkp, c.krows * kw, 1.0f);
    be_.axpy_act(act_at(dv, o, es_), dvp, c.krows * kw, 1.0f);
  }
}

// ---- the chunked layer ---------------------------------------------------------------------------

namespace {

// y [n, out] = x [n, in] W^T (W [out, in]), in the activation type.
void rows_linear(Backend& be, const act_t* x, int64_t n, int64_t in, const act_t* w, int64_t out,
                 act_t* y, float beta = 0.0f) {
  be.gemm_act(false, true, n, out, in, 1.0f, x, in, w, in, beta, y, be.act_dtype(), out);
}

// dx [n, in] (= or +=) dy [n, out] W.
void rows_input_grad(Backend& be, const act_t* dy, int64_t n, int64_t out, const act_t* w,
                     int64_t in, act_t* dx, float beta = 0.0f) {
  be.gemm_act(false, false, n, in, out, 1.0f, dy, out, w, in, beta, dx, be.act_dtype(), in);
}

// dW [out, in] += dy^T x, fp32.
void rows_weight_grad(Backend& be, const act_t* dy, int64_t n, int64_t out, const act_t* x,
                      int64_t in, float* dw) {
  be.gemm_act(true, false, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw, DType::f32, in);
}

}  // namespace

// ln1 of rows [c0, c0 + n) into a.ln1; with kv their k (after RoPE) and v into a.k, a.v at
// row c0; with q their q (after RoPE) into q.
void Llama::chunk_norm_qkv(int l, const act_t* lw, LayerActs& a, int64_t c0, int64_t n, bool kv,
                           act_t* q) {
  const int64_t H = cfg_.hidden, Q = lc_.q_dim(), K = lc_.kv_dim(), lb = table_.layer_begin(l);
  auto w = [&](TensorKind k) { return at(lw, table_.get(k, l).offset - lb); };
  const int32_t* pos = pos_.get() + c0;
  be_.rmsnorm_forward(a.ln1, a.rstd1, at(resid(l), c0 * H), w(TensorKind::attn_norm), n, H,
                      cfg_.norm_eps);
  if (kv) {
    act_t* k = at(a.k, c0 * K);
    rows_linear(be_, a.ln1, n, H, w(TensorKind::k_proj), K, k);
    rows_linear(be_, a.ln1, n, H, w(TensorKind::v_proj), K, at(a.v, c0 * K));
    be_.rope_forward(k, pos, n, lc_.kv_heads, cfg_.head_dim, inv_freq_.get());
  }
  if (q == nullptr) return;
  rows_linear(be_, a.ln1, n, H, w(TensorKind::q_proj), Q, q);
  be_.rope_forward(q, pos, n, lc_.heads, cfg_.head_dim, inv_freq_.get());
}

// From the chunk's attention output: xmid, ln2, gate, up and their SwiGLU (swi_), and, when
// out is given, the layer's output rows.
void Llama::chunk_rest_forward(int l, const act_t* lw, LayerActs& a, int64_t c0, int64_t n,
                               const act_t* att, act_t* out) {
  const int64_t H = cfg_.hidden, Q = lc_.q_dim(), F = lc_.ffn, lb = table_.layer_begin(l);
  auto w = [&](TensorKind k) { return at(lw, table_.get(k, l).offset - lb); };
  const size_t row_bytes = static_cast<size_t>(n * H) * es_;
  be_.copy(a.xmid, at(resid(l), c0 * H), row_bytes);
  rows_linear(be_, att, n, Q, w(TensorKind::o_proj), H, a.xmid, 1.0f);
  be_.rmsnorm_forward(a.ln2, a.rstd2, a.xmid, w(TensorKind::mlp_norm), n, H, cfg_.norm_eps);
  rows_linear(be_, a.ln2, n, H, w(TensorKind::gate_proj), F, a.gate);
  rows_linear(be_, a.ln2, n, H, w(TensorKind::up_proj), F, a.up);
  be_.swiglu_forward(swi_, a.gate, a.up, n * F);
  if (out == nullptr) return;
  be_.copy(out, a.xmid, row_bytes);
  rows_linear(be_, swi_, n, F, w(TensorKind::down_proj), H, out, 1.0f);
}

// The MLP's and o_proj's backward of the chunk (after chunk_rest_forward): d_res_ rows
// become d xmid, d_att [n, Q] the attention output's gradient.
void Llama::chunk_mlp_backward(int l, const act_t* lw, float* lg, LayerActs& a, int64_t c0,
                               int64_t n, const act_t* att, act_t* d_att) {
  const int64_t H = cfg_.hidden, Q = lc_.q_dim(), F = lc_.ffn, lb = table_.layer_begin(l);
  auto w = [&](TensorKind k) { return at(lw, table_.get(k, l).offset - lb); };
  auto g = [&](TensorKind k) { return lg + (table_.get(k, l).offset - lb); };
  act_t* d = at(d_res_, c0 * H);
  rows_input_grad(be_, d, n, H, w(TensorKind::down_proj), F, d_swi_);
  rows_weight_grad(be_, d, n, H, swi_, F, g(TensorKind::down_proj));
  be_.swiglu_backward(d_swi_, d_up_, d_swi_, a.gate, a.up, n * F);  // d_swi_ becomes d_gate
  rows_input_grad(be_, d_swi_, n, F, w(TensorKind::gate_proj), H, d_ln_);
  rows_input_grad(be_, d_up_, n, F, w(TensorKind::up_proj), H, d_ln_, 1.0f);
  rows_weight_grad(be_, d_swi_, n, F, a.ln2, H, g(TensorKind::gate_proj));
  rows_weight_grad(be_, d_up_, n, F, a.ln2, H, g(TensorKind::up_proj));
  be_.rmsnorm_backward(d, g(TensorKind::mlp_norm), d_ln_, a.xmid, w(TensorKind::mlp_norm), a.rstd2,
                       n, H);
  rows_input_grad(be_, d, n, H, w(TensorKind::o_proj), Q, d_att);
  rows_weight_grad(be_, d, n, H, att, Q, g(TensorKind::o_proj));
}

// The chunk's q, k, v backward (a.ln1 and a.rstd1 its rows'; dq [n, Q] and its rows of d_k_,
// d_v_ final, before RoPE's backward): adds the first norm's input gradient to d_res_.
void Llama::chunk_qkv_backward(int l, const act_t* lw, float* lg, LayerActs& a, int64_t c0,
                               int64_t n, act_t* dq) {
  const int64_t H = cfg_.hidden, Q = lc_.q_dim(), K = lc_.kv_dim(), lb = table_.layer_begin(l);
  auto w = [&](TensorKind k) { return at(lw, table_.get(k, l).offset - lb); };
  auto g = [&](TensorKind k) { return lg + (table_.get(k, l).offset - lb); };
  act_t* dk = at(d_k_, c0 * K);
  act_t* dv = at(d_v_, c0 * K);
  be_.rope_backward(dq, pos_.get() + c0, n, lc_.heads, cfg_.head_dim, inv_freq_.get());
  be_.rope_backward(dk, pos_.get() + c0, n, lc_.kv_heads, cfg_.head_dim, inv_freq_.get());
  rows_input_grad(be_, dq, n, Q, w(TensorKind::q_proj), H, d_ln_);
  rows_input_grad(be_, dk, n, K, w(TensorKind::k_proj), H, d_ln_, 1.0f);
  rows_input_grad(be_, dv, n, K, w(TensorKind::v_proj), H, d_ln_, 1.0f);
  rows_weight_grad(be_, dq, n, Q, a.ln1, H, g(TensorKind::q_proj));
  rows_weight_grad(be_, dk, n, K, a.ln1, H, g(TensorKind::k_proj));
  rows_weight_grad(be_, dv, n, K, a.ln1, H, g(TensorKind::v_proj));
  be_.rmsnorm_backward(at(d_res_, c0 * H), g(TensorKind::attn_norm), d_ln_, at(resid(l), c0 * H),
                       w(TensorKind::attn_norm), a.rstd1, n, H);
}

namespace {
// The whole-batch buffer of an AttentionOp's q-wide operand (allocated once, at full size).
act_t* whole(Buffer<unsigned char>& b, Backend& be, int64_t rows, int64_t width) {
  b.ensure(be, static_cast<size_t>(rows * width) * be.act_size());
  return b.get();
}
}  // namespace

void Llama::chunked_layer_forward(int l, const act_t* lw, LayerActs& a) {
  const int64_t T = tokens_, C = cfg_.token_chunk, H = cfg_.hidden, Q = lc_.q_dim();
  act_t* out = resid(l + 1);
  if (attn_ == local_attn_.get()) {  // chunk c's queries see keys of chunks <= c only
    for (int64_t c0 = 0; c0 < T; c0 += C) {
      const int64_t n = std::min(C, T - c0);
      chunk_norm_qkv(l, lw, a, c0, n, true, a.q);
      {
        ScopedPhase timed(timers_, Phase::attention);
        chunk_attn_->forward(c0, n, a.q, a.k, a.v, a.att);
      }
      chunk_rest_forward(l, lw, a, c0, n, a.att, at(out, c0 * H));
    }
    return;
  }
  act_t* q = whole(whole_q_, be_, max_tokens_, Q);
  act_t* att = whole(whole_att_, be_, max_tokens_, Q);
  for (int64_t c0 = 0; c0 < T; c0 += C)
    chunk_norm_qkv(l, lw, a, c0, std::min(C, T - c0), true, at(q, c0 * Q));
  attn_->forward(l, q, a.k, a.v, att);
  for (int64_t c0 = 0; c0 < T; c0 += C)
    chunk_rest_forward(l, lw, a, c0, std::min(C, T - c0), at(att, c0 * Q), at(out, c0 * H));
}

// On entry d_res_ = dLoss/d resid[l+1]; on exit dLoss/d resid[l].
void Llama::chunked_layer_backward(int l, const act_t* lw, float* lg, LayerActs& a) {
  const int64_t T = tokens_, C = cfg_.token_chunk, Q = lc_.q_dim(), K = lc_.kv_dim();
  for (int64_t c0 = 0; c0 < T; c0 += C)  // k and v of every row (q too for another op)
    chunk_norm_qkv(l, lw, a, c0, std::min(C, T - c0), true,
                   attn_ == local_attn_.get() ? nullptr : at(whole(whole_q_, be_, max_tokens_, Q), c0 * Q));
  if (attn_ == local_attn_.get()) {
    be_.zero(d_k_, static_cast<size_t>(T * K) * es_);
    be_.zero(d_v_, static_cast<size_t>(T * K) * es_);
    for (int64_t c0 = (T - 1) / C * C; c0 >= 0; c0 -= C) {  // later chunks' dk, dv shares first
      const int64_t n = std::min(C, T - c0);
      chunk_norm_qkv(l, lw, a, c0, n, false, a.q);
      {
        ScopedPhase timed(timers_, Phase::attention);
        chunk_attn_->forward(c0, n, a.q, a.k, a.v, a.att);
      }
      chunk_rest_forward(l, lw, a, c0, n, a.att, nullptr);
      chunk_mlp_backward(l, lw, lg, a, c0, n, a.att, d_att_);
      {
        ScopedPhase timed(timers_, Phase::attention);
        chunk_attn_->backward(c0, n, d_att_, a.q, a.k, a.v, a.att, d_q_, d_k_, d_v_);
      }
      chunk_qkv_backward(l, lw, lg, a, c0, n, d_q_);
    }
    return;
  }
  act_t* q = whole_q_.get();
  act_t* att = whole(whole_att_, be_, max_tokens_, Q);
  act_t* d_att = whole(whole_d_att_, be_, max_tokens_, Q);
  act_t* dq = whole(whole_d_q_, be_, max_tokens_, Q);
  attn_->forward(l, q, a.k, a.v, att);
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0);
    chunk_rest_forward(l, lw, a, c0, n, at(att, c0 * Q), nullptr);
    chunk_mlp_backward(l, lw, lg, a, c0, n, at(att, c0 * Q), at(d_att, c0 * Q));
  }
  attn_->backward(l, d_att, q, a.k, a.v, att, dq, d_k_, d_v_);
  for (int64_t c0 = 0; c0 < T; c0 += C) {
    const int64_t n = std::min(C, T - c0);
    chunk_norm_qkv(l, lw, a, c0, n, false, nullptr);
    chunk_qkv_backward(l, lw, lg, a, c0, n, at(dq, c0 * Q));
  }
}

}  // namespace flexsp

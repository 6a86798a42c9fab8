#include "lib/runtime/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "lib/util/error.h"

namespace flexsp {

std::vector<int64_t> cp_padded_tokens(const ZigzagLayout& z, int multiple) {
  FLEXSP_ASSERT(multiple >= 1);
  std::vector<int64_t> padded(z.tokens.size());
  for (size_t p = 0; p < padded.size(); ++p)
    padded[p] = (z.tokens[p] + multiple - 1) / multiple * multiple;
  return padded;
}

void cp_local_tokens(const int32_t* ids, const int32_t* positions, const int32_t* targets,
                     const ZigzagLayout& z, const std::vector<int64_t>& padded, int u,
                     int member, std::vector<int32_t>& ids_out,
                     std::vector<int32_t>& positions_out, std::vector<int32_t>& targets_out) {
  const int p = member / u, j = member % u;
  const std::vector<int64_t> idx = zigzag_indices(z, p);
  const std::vector<int64_t> off = shard_offsets(padded[p], u);
  ids_out.clear();
  positions_out.clear();
  targets_out.clear();
  for (int64_t i = off[j]; i < off[j + 1]; ++i) {
    const bool real = i < static_cast<int64_t>(idx.size());
    ids_out.push_back(real ? ids[idx[i]] : 0);
    positions_out.push_back(real ? positions[idx[i]] : 0);
    targets_out.push_back(real ? targets[idx[i]] : -1);
  }
}

RingAttention::RingAttention(Backend& be, const ModelConfig& c, int64_t max_group_tokens,
                             int64_t reserve_tokens_per_rank)
    : be_(be), cfg_(c), es_(be.act_size()), max_tokens_(max_group_tokens),
      reserve_per_rank_(reserve_tokens_per_rank),
      ulysses_(be, c, max_group_tokens, reserve_tokens_per_rank) {
  ulysses_.set_core(this);
}

void RingAttention::set_timers(PhaseTimes* t) {
  timers_ = t;
  ulysses_.set_timers(t);
}

size_t RingAttention::block_elems(int src) const {
  return 2 * static_cast<size_t>(block_rows(src)) * hkv_ * cfg_.head_dim;
}

void RingAttention::add_call(int src, Half qh, Half kh, bool diagonal, bool prefix) {
  Call c;
  c.q0 = qh == Half::early ? 0 : z_.early_tokens(p_);
  c.k0 = prefix ? z_.tokens[src] : kh == Half::early ? 0 : z_.early_tokens(src);
  const int n = z_.ndoc;
  c.at = spans_host_.size();
  spans_host_.resize(c.at + 3 * static_cast<size_t>(n) + 2);
  int32_t* cq = &spans_host_[c.at];
  int32_t* ck = cq + n + 1;
  int32_t* off = ck + n + 1;
  cq[0] = ck[0] = 0;
  for (int s = 0; s < n; ++s) {
    const int32_t ql = qh == Half::early ? z_.early_len(s, p_) : z_.late_len(s, p_);
    const int32_t kl = prefix ? prefix_[static_cast<size_t>(src) * n + s]
                       : kh == Half::early ? z_.early_len(s, src) : z_.late_len(s, src);
    cq[s + 1] = cq[s] + ql;
    ck[s + 1] = ck[s] + kl;
    off[s] = diagonal ? 0 : kl;  // the diagonal chunk is causal, an earlier one all seen
  }
  c.qrows = cq[n];
  c.krows = ck[n];
  if (c.qrows == 0 || c.krows == 0) {  // nothing to see: the merge would change nothing
    spans_host_.resize(c.at);
    return;
  }
  calls_.push_back(c);
}

AttnShape RingAttention::shape(const Call& c) const {
  const int n = z_.ndoc;
  const int32_t* h = spans_host_.data() + c.at;
  const int32_t* d = spans_.get() + c.at;
  AttnShape s{d, n, hq_, hkv_, cfg_.head_dim,
              1.0 / std::sqrt(static_cast<double>(cfg_.head_dim)), h};
  s.cu_seqlens_k = d + n + 1;
  s.cu_seqlens_k_host = h + n + 1;
  s.causal_offset = d + 2 * n + 2;
  s.causal_offset_host = h + 2 * n + 2;
  return s;
}

void RingAttention::set_layout(Comm& group, Comm& ulysses, const ZigzagLayout& z,
                               const std::vector<int64_t>& padded,
                               const std::vector<int32_t>& prefix) {
  u_ = ulysses.size();
  FLEXSP_ASSERT(group.size() % u_ == 0 && group.rank() % u_ == ulysses.rank());
  r_ = group.size() / u_;
  FLEXSP_ASSERT(z.r == r_ && static_cast<int>(padded.size()) == r_);
  group_ = &group;
  z_ = z;
  padded_ = padded;
  FLEXSP_ASSERT(prefix.empty() || prefix.size() == static_cast<size_t>(r_) * z.ndoc);
  prefix_ = prefix;
  prefix_rows_.assign(static_cast<size_t>(r_), 0);
  for (size_t i = 0; i < prefix_.size(); ++i) prefix_rows_[i / std::max(1, z.ndoc)] += prefix_[i];
  pk_ = pv_ = nullptr;
  pdk_ = pdv_ = nullptr;
  p_ = group.rank() / u_;
  const int ui = group.rank() % u_;
  next_ = ((p_ + 1) % r_) * u_ + ui;
  prev_ = ((p_ + r_ - 1) % r_) * u_ + ui;
  const int64_t P = padded_[p_];
  const std::vector<int32_t> cu{0, static_cast<int32_t>(P)};
  ulysses_.set_layout(ulysses, cu.data(), 1, shard_offsets(P, u_));
  hq_ = ulysses_.heads_per_rank();
  hkv_ = ulysses_.kv_heads_per_rank();

  // The calls of every step (see the header: which chunk pairs see each other).
  calls_.clear();
  spans_host_.clear();
  step_calls_.assign(1, 0);
  for (int k = 0; k < r_; ++k) {
    const int src = (p_ + r_ - k) % r_;
    if (src == p_) {
      add_call(src, Half::early, Half::early, true);
      add_call(src, Half::late, Half::early, false);
      add_call(src, Half::late, Half::late, true);
    } else if (src < p_) {  // its early chunk precedes both of mine, its late one follows
      add_call(src, Half::early, Half::early, false);
      add_call(src, Half::late, Half::early, false);
    } else {  // both of its chunks lie between my early and my late chunk
      add_call(src, Half::late, Half::early, false);
      add_call(src, Half::late, Half::late, false);
    }
    if (prefix_rows_[src] > 0) {  // earlier chunks: every key seen
      add_call(src, Half::early, Half::early, false, true);
      add_call(src, Half::late, Half::early, false, true);
    }
    step_calls_.push_back(calls_.size());
  }
  spans_.ensure(be_, spans_host_.size() + 1);
  be_.copy_from_host(spans_.get(), spans_host_.data(), spans_host_.size() * sizeof(int32_t));

  // A position's rows: at least the reserve's (u members' tokens), so that a longer
  // stream does not allocate afresh (on a CPU every page of a new block faults on first
  // touch; UlyssesAttention's reserve).
  int64_t most = std::min(max_tokens_, reserve_per_rank_ * u_);
  for (int q = 0; q < r_; ++q) most = std::max(most, std::max(padded_[q], block_rows(q)));
  const size_t M = static_cast<size_t>(most) + 1, hd = static_cast<size_t>(cfg_.head_dim);
  const size_t qw = hq_ * hd, kw = hkv_ * hd;
  if (neg_inf_.size() < M * hq_) {
    neg_inf_ = Buffer<float>(be_, M * hq_);
    const std::vector<float> h(M * hq_, -std::numeric_limits<float>::infinity());
    be_.copy_from_host(neg_inf_.get(), h.data(), h.size() * sizeof(float));
  }
  lse_part_.ensure(be_, M * hq_);
  for (auto& b : kv_) b.ensure(be_, 2 * M * kw * es_);
  o_part_.ensure(be_, M * qw * es_);
  dq_part_.ensure(be_, M * qw * es_);
  dkv_part_.ensure(be_, 2 * M * kw * es_);
  for (auto& b : dkv_acc_) b.ensure(be_, 2 * M * kw * es_);
  dkv_in_.ensure(be_, 2 * M * kw * es_);
}

void RingAttention::bind_prefix(const act_t* k, const act_t* v, act_t* dk, act_t* dv) {
  pk_ = k;
  pv_ = v;
  pdk_ = dk;
  pdv_ = dv;
}

void RingAttention::forward(int layer, const act_t* q, const act_t* k, const act_t* v,
                            act_t* out) {
  ulysses_.forward(layer, q, k, v, out);
}

void RingAttention::backward(int layer, const act_t* dout, const act_t* q, const act_t* k,
                             const act_t* v, const act_t* out, act_t* dq, act_t* dk,
                             act_t* dv) {
  ulysses_.backward(layer, dout, q, k, v, out, dq, dk, dv);
}

std::unique_ptr<CommRequest> RingAttention::pass_on(int src, const act_t* send, act_t* recv) {
  const int from = (src + r_ - 1) % r_;  // the block the previous member holds
  return group_->start_send_recv(send, block_elems(src), next_, recv, block_elems(from), prev_,
                                 be_.act_dtype());
}

void RingAttention::pack_block(act_t* blk, const act_t* k, const act_t* v) {
  const int64_t kw = static_cast<int64_t>(hkv_) * cfg_.head_dim;
  const int64_t n = z_.tokens[p_] * kw, m = prefix_rows_[p_] * kw, half = n + m;
  be_.copy(blk, k, static_cast<size_t>(n) * es_);
  be_.copy(at(blk, half), v, static_cast<size_t>(n) * es_);
  if (m == 0) return;
  FLEXSP_ASSERT(pk_ && pv_);
  be_.copy(at(blk, n), pk_, static_cast<size_t>(m) * es_);
  be_.copy(at(blk, half + n), pv_, static_cast<size_t>(m) * es_);
}

void RingAttention::forward(act_t* o, float* lse, const act_t* q, const act_t* k,
                            const act_t* v) {
  const int64_t hd = cfg_.head_dim, qw = hq_ * hd, kw = hkv_ * hd;
  const int64_t P = padded_[p_];
  // Rows no key reaches (padding) keep out 0, lse -inf.
  be_.zero(o, static_cast<size_t>(P * qw) * es_);
  be_.copy(lse, neg_inf_.get(), static_cast<size_t>(P * hq_) * sizeof(float));
  act_t* cur = kv_[0].get();
  act_t* nxt = kv_[1].get();
  pack_block(cur, k, v);
  act_t* op = o_part_.get();
  float* lp = lse_part_.get();
  for (int step = 0; step < r_; ++step) {
    const int src = (p_ + r_ - step) % r_;
    std::unique_ptr<CommRequest> shift = step + 1 < r_ ? pass_on(src, cur, nxt) : nullptr;
    {
      ScopedPhase timed(timers_, Phase::attention);
      const int64_t vrow = block_rows(src);
      for (size_t i = step_calls_[step]; i < step_calls_[step + 1]; ++i) {
        const Call& c = calls_[i];
        const AttnShape s = shape(c);
        be_.attention_forward(at(op, c.q0 * qw), lp + c.q0 * hq_, at(q, c.q0 * qw),
                              at(cur, c.k0 * kw), at(cur, (vrow + c.k0) * kw), s);
        be_.attention_merge(at(o, c.q0 * qw), lse + c.q0 * hq_, at(op, c.q0 * qw),
                            lp + c.q0 * hq_, c.qrows, hq_, static_cast<int>(hd));
      }
    }
    if (shift) {
      ScopedPhase timed(timers_, Phase::all_to_all);
      shift->wait();
    }
    std::swap(cur, nxt);
  }
}

void RingAttention::backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dout,
                             const act_t* q, const act_t* k, const act_t* v, const act_t* o,
                             const float* lse) {
  const int64_t hd = cfg_.head_dim, qw = hq_ * hd, kw = hkv_ * hd;
  const int64_t P = padded_[p_];
  be_.zero(dq, static_cast<size_t>(P * qw) * es_);
  act_t* cur = kv_[0].get();
  act_t* nxt = kv_[1].get();
  pack_block(cur, k, v);
  act_t* dqp = dq_part_.get();
  act_t* dkp = dkv_part_.get();
  act_t* din = dkv_in_.get();
  std::unique_ptr<CommRequest> grads;  // the dk/dv shift started by the previous step
  for (int step = 0; step < r_; ++step) {
    const int src = (p_ + r_ - step) % r_;
    std::unique_ptr<CommRequest> shift = step + 1 < r_ ? pass_on(src, cur, nxt) : nullptr;
    // This step's share of the block's dk/dv; the buffer sent two steps ago is free again.
    act_t* acc = dkv_acc_[step % 2].get();
    const int64_t vrow = block_rows(src);
    be_.zero(acc, block_elems(src) * es_);
    {
      ScopedPhase timed(timers_, Phase::attention);
      for (size_t i = step_calls_[step]; i < step_calls_[step + 1]; ++i) {
        const Call& c = calls_[i];
        const AttnShape s = shape(c);
        act_t* dvp = at(dkp, c.krows * kw);
        be_.attention_backward(at(dqp, c.q0 * qw), dkp, dvp, at(dout, c.q0 * qw),
                               at(q, c.q0 * qw), at(cur, c.k0 * kw),
                               at(cur, (vrow + c.k0) * kw), at(o, c.q0 * qw),
                               lse + c.q0 * hq_, s);
        be_.axpy_act(at(dq, c.q0 * qw), at(dqp, c.q0 * qw), c.qrows * qw, 1.0f);
        be_.axpy_act(at(acc, c.k0 * kw), dkp, c.krows * kw, 1.0f);
        be_.axpy_act(at(acc, (vrow + c.k0) * kw), dvp, c.krows * kw, 1.0f);
      }
    }
    if (grads) {  // what the members before me added to this block
      {
        ScopedPhase timed(timers_, Phase::all_to_all);
        grads->wait();
      }
      be_.axpy_act(acc, din, static_cast<int64_t>(block_elems(src)), 1.0f);
    }
    // On to the next member; after the last step the block reaches its owner, and I
    // receive my own block's total.
    grads = pass_on(src, acc, din);
    if (shift) {
      ScopedPhase timed(timers_, Phase::all_to_all);
      shift->wait();
    }
    std::swap(cur, nxt);
  }
  {
    ScopedPhase timed(timers_, Phase::all_to_all);
    grads->wait();
  }
  const size_t n = static_cast<size_t>(z_.tokens[p_] * kw);
  const size_t m = static_cast<size_t>(prefix_rows_[p_] * kw);
  const size_t pad = static_cast<size_t>((P - z_.tokens[p_]) * kw);
  be_.copy(dk, din, n * es_);
  be_.copy(dv, at(din, static_cast<int64_t>(n + m)), n * es_);
  if (m > 0) {
    FLEXSP_ASSERT(pdk_ && pdv_);
    be_.copy(pdk_, at(din, static_cast<int64_t>(n)), m * es_);
    be_.copy(pdv_, at(din, static_cast<int64_t>(2 * n + m)), m * es_);
  }
  be_.zero(at(dk, static_cast<int64_t>(n)), pad * es_);
  be_.zero(at(dv, static_cast<int64_t>(n)), pad * es_);
}

}  // namespace flexsp

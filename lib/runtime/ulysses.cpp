#include "lib/runtime/ulysses.h"

#include <algorithm>
#include <cmath>

#include "lib/plan/plan.h"
#include "lib/util/error.h"

namespace flexsp {

void ulysses_check(const ModelConfig& c, int d) {
  if (sp_group_runnable(c.heads, c.kv_heads, d)) return;
  FLEXSP_CHECK(d >= 1 && c.heads % d == 0,
               "an SP group of {} ranks cannot split the model's {} attention heads "
               "(the group size must divide model.heads)", d, c.heads);
  FLEXSP_CHECK(c.kv_heads % d == 0 || d % c.kv_heads == 0,
               "an SP group of {} ranks cannot share the model's {} kv heads (the group size "
               "must divide model.kv_heads or be a multiple of it)", d, c.kv_heads);
}

std::vector<int64_t> shard_offsets(int64_t tokens, int d) {
  std::vector<int64_t> o(static_cast<size_t>(d) + 1);
  for (int j = 0; j <= d; ++j) o[j] = tokens * j / d;
  return o;
}

namespace {

// The two sides of the all-to-alls, per peer p, in elements of blk per token: mine = my
// token shard of p's head block (blocks of my Tj tokens, packed by peer), full = p's token
// shard of my heads (at its offset in the group's stream). to_heads sends mine and
// receives full; to_tokens the reverse.
struct Exchange {
  std::vector<size_t> mine_c, mine_o, full_c, full_o;
};
Exchange exchange(const std::vector<int64_t>& offsets, int d, int me, size_t blk) {
  const size_t Tj = static_cast<size_t>(offsets[me + 1] - offsets[me]);
  Exchange x{std::vector<size_t>(d), std::vector<size_t>(d), std::vector<size_t>(d),
             std::vector<size_t>(d)};
  for (int p = 0; p < d; ++p) {
    x.mine_c[p] = Tj * blk;
    x.mine_o[p] = p * Tj * blk;
    x.full_c[p] = static_cast<size_t>(offsets[p + 1] - offsets[p]) * blk;
    x.full_o[p] = static_cast<size_t>(offsets[p]) * blk;
  }
  return x;
}

}  // namespace

UlyssesAttention::UlyssesAttention(Backend& be, const ModelConfig& c, int64_t max_group_tokens,
                                   int64_t reserve_tokens_per_rank)
    : be_(be), cfg_(c), es_(be.act_size()), max_tokens_(max_group_tokens),
      reserve_per_rank_(reserve_tokens_per_rank),
      cu_(be, static_cast<size_t>(max_group_tokens) + 1) {}

int UlyssesAttention::kv_head0(int p) const {
  return d_ <= cfg_.kv_heads ? p * (cfg_.kv_heads / d_) : p / (d_ / cfg_.kv_heads);
}

void UlyssesAttention::set_layout(Comm& group, const int32_t* cu, int nseq,
                                  const std::vector<int64_t>& offsets) {
  d_ = group.size();
  me_ = group.rank();
  ulysses_check(cfg_, d_);
  FLEXSP_ASSERT(static_cast<int>(offsets.size()) == d_ + 1 && offsets[0] == 0);
  tokens_ = offsets[d_];
  FLEXSP_CHECK(tokens_ <= max_tokens_, "SP group stream of {} tokens exceeds the {} planned for",
               tokens_, max_tokens_);
  FLEXSP_ASSERT(nseq >= 0 && cu[0] == 0 && cu[nseq] == tokens_);
  group_ = &group;
  offsets_ = offsets;
  hq_ = cfg_.heads / d_;
  hkv_ = d_ <= cfg_.kv_heads ? cfg_.kv_heads / d_ : 1;
  be_.copy_from_host(cu_.get(), cu, (static_cast<size_t>(nseq) + 1) * sizeof(int32_t));
  cu_host_.assign(cu, cu + nseq + 1);
  shape_ = AttnShape{cu_.get(), nseq, hq_, hkv_, cfg_.head_dim,
                     1.0 / std::sqrt(static_cast<double>(cfg_.head_dim)), cu_host_.data()};

  // Sized for the reserve when it is larger: a buffer that grows is allocated afresh
  // (Buffer::ensure frees, then allocates), and on a CPU every page of the new block
  // faults on first touch, in every step whose stream was the longest so far (what that
  // costs: bench/results/2026-11-25-prediction-accuracy.md).
  const int64_t reserved = std::min(max_tokens_, reserve_per_rank_ * d_);
  const size_t T = static_cast<size_t>(std::max(tokens_, reserved)),
               hd = static_cast<size_t>(cfg_.head_dim);
  const size_t Tj = std::max(static_cast<size_t>(offsets_[me_ + 1] - offsets_[me_]),
                             (T + static_cast<size_t>(d_) - 1) / static_cast<size_t>(d_));
  const size_t per_layer = T * hd * (2 * hq_ + 2 * hkv_);
  saved_.ensure(be_, per_layer * slots() * es_);
  saved_lse_.ensure(be_, T * hq_ * slots());
  // Packing: one side of an all-to-all (local rows x all heads, or all rows x my heads).
  scratch_.ensure(be_,
                  (std::max(Tj * hd * (cfg_.heads + 2 * cfg_.kv_heads * d_), T * hd * hq_) + 1) * es_);
  // Backward in head layout: dout, dq, dk, dv.
  scratch2_.ensure(be_, (T * hd * (2 * hq_ + 2 * hkv_) + 1) * es_);
}

size_t UlyssesAttention::slots() const {
  return cfg_.checkpoint_activations ? 1 : static_cast<size_t>(cfg_.layers);
}

UlyssesAttention::Slot UlyssesAttention::slot(int layer) {
  const size_t T = static_cast<size_t>(tokens_), hd = static_cast<size_t>(cfg_.head_dim);
  const size_t per_layer = T * hd * (2 * hq_ + 2 * hkv_);
  // Under activation checkpointing the model runs a layer's forward again right before
  // its backward, so one slot serves every layer.
  const size_t i = cfg_.checkpoint_activations ? 0 : static_cast<size_t>(layer);
  Slot s;
  s.q = at(saved_.get(), per_layer * i);
  s.k = at(s.q, T * hd * hq_);
  s.v = at(s.k, T * hd * hkv_);
  s.o = at(s.v, T * hd * hkv_);
  s.lse = saved_lse_.get() + T * hq_ * i;
  return s;
}

void UlyssesAttention::to_heads(const act_t* local, int width_heads, int hpr, bool kv,
                                act_t* full) {
  const size_t hd = static_cast<size_t>(cfg_.head_dim), row = width_heads * hd,
               blk = hpr * hd;
  const size_t Tj = static_cast<size_t>(offsets_[me_ + 1] - offsets_[me_]);
  const Exchange x = exchange(offsets_, d_, me_, blk);
  act_t* send = scratch_.get();
  for (int p = 0; p < d_; ++p) {
    const size_t col = static_cast<size_t>(kv ? kv_head0(p) : p * hq_) * hd;
    be_.copy_2d(at(send, x.mine_o[p]), blk * es_, at(local, col),
                row * es_, blk * es_, Tj);
  }
  ScopedPhase timed(timers_, Phase::all_to_all);
  group_->all_to_all_v(send, x.mine_c.data(), x.mine_o.data(), full, x.full_c.data(),
                       x.full_o.data(), be_.act_dtype());
}

void UlyssesAttention::to_tokens(const act_t* full, int width_heads, int hpr, bool kv,
                                 act_t* local, bool accumulate) {
  const size_t hd = static_cast<size_t>(cfg_.head_dim), row = width_heads * hd,
               blk = hpr * hd;
  const size_t Tj = static_cast<size_t>(offsets_[me_ + 1] - offsets_[me_]);
  const Exchange x = exchange(offsets_, d_, me_, blk);
  act_t* recv = scratch_.get();
  {
    ScopedPhase timed(timers_, Phase::all_to_all);
    group_->all_to_all_v(full, x.full_c.data(), x.full_o.data(), recv, x.mine_c.data(),
                         x.mine_o.data(), be_.act_dtype());
  }
  // With accumulate, the ranks sharing a kv head are consecutive (kv_head0): their blocks
  // are summed into the first one in order, which then covers that head's columns.
  for (int p = 0; p < d_; ++p) {
    const int head = kv ? kv_head0(p) : p * hq_;
    act_t* src = at(recv, p * Tj * blk);
    if (accumulate && p > 0 && kv_head0(p - 1) == head) continue;
    int last = p;
    while (accumulate && last + 1 < d_ && kv_head0(last + 1) == head) ++last;
    for (int q = p + 1; q <= last; ++q)
      be_.axpy_act(src, at(recv, q * Tj * blk), static_cast<int64_t>(Tj * blk), 1.0f);
    be_.copy_2d(at(local, static_cast<size_t>(head) * hd), row * es_, src, blk * es_,
                blk * es_, Tj);
  }
}

void UlyssesAttention::forward(int layer, const act_t* q, const act_t* k, const act_t* v,
                               act_t* out) {
  Slot s = slot(layer);
  to_heads(q, cfg_.heads, hq_, false, s.q);
  to_heads(k, cfg_.kv_heads, hkv_, true, s.k);
  to_heads(v, cfg_.kv_heads, hkv_, true, s.v);
  if (core_ != nullptr) {
    core_->forward(s.o, s.lse, s.q, s.k, s.v);
  } else {
    ScopedPhase timed(timers_, Phase::attention);
    be_.attention_forward(s.o, s.lse, s.q, s.k, s.v, shape_);
  }
  to_tokens(s.o, cfg_.heads, hq_, false, out, false);
}

void UlyssesAttention::backward(int layer, const act_t* dout, const act_t*, const act_t*,
                                const act_t*, const act_t*, act_t* dq, act_t* dk, act_t* dv) {
  Slot s = slot(layer);
  const size_t T = static_cast<size_t>(tokens_), hd = static_cast<size_t>(cfg_.head_dim);
  act_t* d_o = scratch2_.get();
  act_t* d_q = at(d_o, T * hd * hq_);
  act_t* d_k = at(d_q, T * hd * hq_);
  act_t* d_v = at(d_k, T * hd * hkv_);
  to_heads(dout, cfg_.heads, hq_, false, d_o);
  if (core_ != nullptr) {
    core_->backward(d_q, d_k, d_v, d_o, s.q, s.k, s.v, s.o, s.lse);
  } else {
    ScopedPhase timed(timers_, Phase::attention);
    be_.attention_backward(d_q, d_k, d_v, d_o, s.q, s.k, s.v, s.o, s.lse, shape_);
  }
  to_tokens(d_q, cfg_.heads, hq_, false, dq, false);
  // kv heads shared by several ranks (d > kv_heads) get the sum of their copies' gradients.
  const bool replicated = d_ > cfg_.kv_heads;
  to_tokens(d_k, cfg_.kv_heads, hkv_, true, dk, replicated);
  to_tokens(d_v, cfg_.kv_heads, hkv_, true, dv, replicated);
}

}  // namespace flexsp

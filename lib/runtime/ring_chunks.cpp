#include "lib/runtime/ring_chunks.h"

#include "lib/util/error.h"

namespace flexsp {

RingChunkAttention::RingChunkAttention(Backend& be, const ModelConfig& c, SeqChunkScratch& scratch)
    : be_(be), cfg_(c), sc_(scratch), es_(be.act_size()) {}

void RingChunkAttention::set_layout(RingAttention& ring, Comm& group, Comm& ulysses,
                                    const ZigzagLayout& z, const std::vector<int64_t>& padded,
                                    const std::vector<RingChunkAttention*>& before) {
  const int r = z.r, n = z.ndoc;
  std::vector<int32_t> prefix(static_cast<size_t>(r) * n, 0);
  for (const RingChunkAttention* c : before) {
    FLEXSP_ASSERT(c->z_.r == r && c->z_.ndoc == n);
    for (int q = 0; q < r; ++q)
      for (int s = 0; s < n; ++s)
        prefix[static_cast<size_t>(q) * n + s] += c->z_.early_len(s, q) + c->z_.late_len(s, q);
  }
  ring.set_layout(group, ulysses, z, padded, prefix);
  ring.ulysses().set_core(this);
  ring_ = &ring;
  z_ = z;
  before_ = before;
  p_ = group.rank() / ulysses.size();
  kv_ = static_cast<int64_t>(ring.ulysses().kv_heads_per_rank()) * cfg_.head_dim;
  for (const RingChunkAttention* c : before) FLEXSP_ASSERT(c->kv_ == kv_ && c->p_ == p_);
  early_at_.assign(static_cast<size_t>(n), 0);
  late_at_.assign(static_cast<size_t>(n), 0);
  int64_t e = 0, l = z.early_tokens(p_);
  for (int s = 0; s < n; ++s) {
    early_at_[s] = e;
    late_at_[s] = l;
    e += z.early_len(s, p_);
    l += z.late_len(s, p_);
  }
  prefix_ = 0;
  for (int s = 0; s < n; ++s) prefix_ += prefix[static_cast<size_t>(p_) * n + s];
  kept_.reset(be_, cfg_.layers, z.tokens[p_], kv_);
  const size_t pre = static_cast<size_t>(prefix_ * kv_) * es_ + 1;
  for (Buffer<unsigned char>* x : {&sc_.kall, &sc_.vall, &sc_.dkall, &sc_.dvall})
    x->ensure(be_, pre);
}

template <class F>
void RingChunkAttention::for_prefix(F f) {
  int64_t at = 0;
  for (int s = 0; s < z_.ndoc; ++s)
    for (RingChunkAttention* c : before_) {
      const int64_t e = c->z_.early_len(s, p_), l = c->z_.late_len(s, p_);
      if (e > 0) f(*c, c->early_at_[s], e, at);
      at += e;
      if (l > 0) f(*c, c->late_at_[s], l, at);
      at += l;
    }
  FLEXSP_ASSERT(at == prefix_);
}

void RingChunkAttention::gather(int layer) {
  for_prefix([&](RingChunkAttention& c, int64_t r0, int64_t n, int64_t at) {
    const size_t bytes = static_cast<size_t>(n * kv_) * es_;
    be_.copy(act_at(sc_.kall.get(), at * kv_, es_), c.kept_.at(c.kept_.k, layer, r0), bytes);
    be_.copy(act_at(sc_.vall.get(), at * kv_, es_), c.kept_.at(c.kept_.v, layer, r0), bytes);
  });
  ring_->bind_prefix(sc_.kall.get(), sc_.vall.get(), sc_.dkall.get(), sc_.dvall.get());
}

void RingChunkAttention::scatter(int layer) {
  for_prefix([&](RingChunkAttention& c, int64_t r0, int64_t n, int64_t at) {
    be_.axpy_act(c.kept_.at(c.kept_.dk_acc, layer, r0), act_at(sc_.dkall.get(), at * kv_, es_), n * kv_, 1.0f);
    be_.axpy_act(c.kept_.at(c.kept_.dv_acc, layer, r0), act_at(sc_.dvall.get(), at * kv_, es_), n * kv_, 1.0f);
  });
}

void RingChunkAttention::forward(int layer, const act_t* q, const act_t* k, const act_t* v,
                                 act_t* out) {
  layer_ = layer;
  ring_->forward(layer, q, k, v, out);  // Ulysses, then this op's core below
}

void RingChunkAttention::backward(int layer, const act_t* dout, const act_t* q, const act_t* k,
                                  const act_t* v, const act_t* out, act_t* dq, act_t* dk,
                                  act_t* dv) {
  layer_ = layer;
  ring_->backward(layer, dout, q, k, v, out, dq, dk, dv);
}

void RingChunkAttention::forward(act_t* o, float* lse, const act_t* q, const act_t* k,
                                 const act_t* v) {
  kept_.keep(be_, layer_, k, v);
  gather(layer_);
  ring_->forward(o, lse, q, k, v);
}

void RingChunkAttention::backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dout,
                                  const act_t* q, const act_t* k, const act_t* v,
                                  const act_t* o, const float* lse) {
  gather(layer_);
  ring_->backward(dq, dk, dv, dout, q, k, v, o, lse);
  scatter(layer_);
  kept_.add_back(be_, layer_, dk, dv);
}

}  // namespace flexsp

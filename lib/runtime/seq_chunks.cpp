#include "lib/runtime/seq_chunks.h"

#include <algorithm>

#include "lib/util/error.h"

namespace flexsp {

void seq_chunks_cut(const HostMicroBatch& mb, int chunks, double lin, double att,
                    std::vector<HostMicroBatch>& out) {
  out.assign(static_cast<size_t>(chunks), HostMicroBatch{});
  for (HostMicroBatch& c : out) c.cu_seqlens.assign(1, 0);
  const int nseq = static_cast<int>(mb.cu_seqlens.size()) - 1;
  for (int s = 0; s < nseq; ++s) {
    const int64_t first = mb.cu_seqlens[s], n = mb.cu_seqlens[s + 1] - first;
    const std::vector<int64_t> b = seq_chunk_bounds(n, chunks, lin, att);
    for (int j = 0; j < chunks; ++j) {
      HostMicroBatch& c = out[static_cast<size_t>(j)];
      const int64_t lo = first + b[static_cast<size_t>(j)], hi = first + b[static_cast<size_t>(j) + 1];
      c.ids.insert(c.ids.end(), mb.ids.begin() + lo, mb.ids.begin() + hi);
      c.positions.insert(c.positions.end(), mb.positions.begin() + lo, mb.positions.begin() + hi);
      c.targets.insert(c.targets.end(), mb.targets.begin() + lo, mb.targets.begin() + hi);
      c.cu_seqlens.push_back(static_cast<int32_t>(c.ids.size()));
    }
  }
}

// ---- SeqChunkAttention ---------------------------------------------------------------------

SeqChunkAttention::SeqChunkAttention(Backend& be, const ModelConfig& c, SeqChunkScratch& scratch)
    : be_(be), cfg_(c), sc_(scratch), es_(be.act_size()) {}

void ChunkKv::reset(Backend& be, int layers, int64_t r, int64_t width) {
  rows = r;
  kv = width;
  es = be.act_size();
  seen.assign(static_cast<size_t>(layers), false);
  const size_t per = static_cast<size_t>(layers) * static_cast<size_t>(rows * kv) * es + 1;
  for (Buffer<unsigned char>* x : {&k, &v, &dk_acc, &dv_acc}) x->ensure(be, per);
}

void ChunkKv::keep(Backend& be, int layer, const act_t* kin, const act_t* vin) {
  const size_t bytes = static_cast<size_t>(rows * kv) * es;
  be.copy(at(k, layer, 0), kin, bytes);
  be.copy(at(v, layer, 0), vin, bytes);
  if (seen[static_cast<size_t>(layer)]) return;  // a recompute
  seen[static_cast<size_t>(layer)] = true;
  be.zero(at(dk_acc, layer, 0), bytes);
  be.zero(at(dv_acc, layer, 0), bytes);
}

void ChunkKv::add_back(Backend& be, int layer, act_t* dk, act_t* dv) {
  be.axpy_act(dk, at(dk_acc, layer, 0), rows * kv, 1.0f);
  be.axpy_act(dv, at(dv_acc, layer, 0), rows * kv, 1.0f);
}

void SeqChunkAttention::set_layout(const int32_t* cu, int nseq, int real,
                                   const std::vector<SeqChunkAttention*>& before, int heads,
                                   int kv_heads) {
  FLEXSP_ASSERT(nseq >= 0 && cu[0] == 0 && real <= nseq && heads % kv_heads == 0);
  cfg_.heads = heads;
  cfg_.kv_heads = kv_heads;
  kv_ = static_cast<int64_t>(kv_heads) * cfg_.head_dim;
  nseq_ = nseq;
  real_ = real;
  before_ = before;
  cu_host_.assign(cu, cu + nseq + 1);
  cuk_host_.assign(1, 0);
  for (int s = 0; s < nseq; ++s) {
    int64_t n = cu[s + 1] - cu[s];
    if (s < real)
      for (const SeqChunkAttention* c : before) {
        FLEXSP_ASSERT(c->kv_ == kv_ && static_cast<int>(c->cu_host_.size()) > s + 1);
        n += c->cu_host_[s + 1] - c->cu_host_[s];
      }
    cuk_host_.push_back(static_cast<int32_t>(cuk_host_.back() + n));
  }
  kept_.reset(be_, cfg_.layers, cu[nseq], kv_);
  lse_.ensure(be_, static_cast<size_t>(cfg_.layers) * static_cast<size_t>(cu[nseq] * heads) + 1);
  cu_.ensure(be_, static_cast<size_t>(nseq) + 2);
  sc_.cuk.ensure(be_, static_cast<size_t>(nseq) + 2);
  for (Buffer<unsigned char>* x : {&sc_.kall, &sc_.vall, &sc_.dkall, &sc_.dvall})
    x->ensure(be_, static_cast<size_t>(cuk_host_.back() * kv_) * es_ + 1);
  be_.copy_from_host(cu_.get(), cu_host_.data(), cu_host_.size() * sizeof(int32_t));
}

AttnShape SeqChunkAttention::shape() {
  AttnShape s{cu_.get(), nseq_, cfg_.heads, cfg_.kv_heads, cfg_.head_dim,
              1.0 / std::sqrt(static_cast<double>(cfg_.head_dim)), cu_host_.data()};
  be_.copy_from_host(sc_.cuk.get(), cuk_host_.data(), cuk_host_.size() * sizeof(int32_t));
  s.cu_seqlens_k = sc_.cuk.get();
  s.cu_seqlens_k_host = cuk_host_.data();
  return s;  // causal offset: klen - qlen, the queries are the prefix's last rows
}

void SeqChunkAttention::gather(int layer) {
  for (int s = 0; s < nseq_; ++s) {
    int64_t at = cuk_host_[s];
    auto put = [&](SeqChunkAttention& c) {
      const int64_t r0 = c.cu_host_[s], n = c.cu_host_[s + 1] - r0;
      if (n == 0) return;
      const size_t bytes = static_cast<size_t>(n * kv_) * es_;
      be_.copy(act_at(sc_.kall.get(), at * kv_, es_), c.kept_.at(c.kept_.k, layer, r0), bytes);
      be_.copy(act_at(sc_.vall.get(), at * kv_, es_), c.kept_.at(c.kept_.v, layer, r0), bytes);
      at += n;
    };
    if (s < real_)
      for (SeqChunkAttention* c : before_) put(*c);
    put(*this);
  }
}

void SeqChunkAttention::forward(int layer, const act_t* q, const act_t* k, const act_t* v,
                                act_t* out) {
  kept_.keep(be_, layer, k, v);
  gather(layer);
  ScopedPhase timed(timers_, Phase::attention);
  be_.attention_forward(out, lse_.get() + static_cast<int64_t>(layer) * kept_.rows * cfg_.heads, q,
                        sc_.kall.get(), sc_.vall.get(), shape());
}

void SeqChunkAttention::backward(int layer, const act_t* dout, const act_t* q, const act_t*,
                                 const act_t*, const act_t* out, act_t* dq, act_t* dk, act_t* dv) {
  gather(layer);
  {
    ScopedPhase timed(timers_, Phase::attention);
    be_.attention_backward(dq, sc_.dkall.get(), sc_.dvall.get(), dout, q, sc_.kall.get(),
                           sc_.vall.get(), out,
                           lse_.get() + static_cast<int64_t>(layer) * kept_.rows * cfg_.heads,
                           shape());
  }
  // Scatter the prefix gradients: earlier chunks' rows into their accumulators, this
  // chunk's rows (plus what later chunks left here) into dk, dv.
  for (int s = 0; s < nseq_; ++s) {
    int64_t at = cuk_host_[s];
    auto take = [&](SeqChunkAttention& c, act_t* dkd, act_t* dvd, bool add) {
      const int64_t r0 = c.cu_host_[s], n = c.cu_host_[s + 1] - r0;
      if (n == 0) return;
      const act_t* gk = act_at(sc_.dkall.get(), at * kv_, es_);
      const act_t* gv = act_at(sc_.dvall.get(), at * kv_, es_);
      if (add) {
        be_.axpy_act(dkd, gk, n * kv_, 1.0f);
        be_.axpy_act(dvd, gv, n * kv_, 1.0f);
      } else {
        be_.copy(dkd, gk, static_cast<size_t>(n * kv_) * es_);
        be_.copy(dvd, gv, static_cast<size_t>(n * kv_) * es_);
      }
      at += n;
    };
    if (s < real_)
      for (SeqChunkAttention* c : before_) {
        const int64_t r0 = c->cu_host_[s];
        take(*c, c->kept_.at(c->kept_.dk_acc, layer, r0), c->kept_.at(c->kept_.dv_acc, layer, r0), true);
      }
    const int64_t r0 = cu_host_[s];
    take(*this, act_at(dk, r0 * kv_, es_), act_at(dv, r0 * kv_, es_), false);
  }
  kept_.add_back(be_, layer, dk, dv);
}

}  // namespace flexsp

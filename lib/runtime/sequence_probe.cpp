#include "lib/runtime/sequence_probe.h"

#include <algorithm>

#include "lib/model/params.h"
#include "lib/plan/plan.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace flexsp {

ProbeWeights::ProbeWeights(Backend& be, const ModelConfig& c) {
  const ParamTable table = make_param_table(c);
  std::vector<float> host(static_cast<size_t>(table.total));
  init_params(c, table, 1, host.data(), 0, table.total);
  params_ = Buffer<float>(be, host.size());
  grads_ = Buffer<float>(be, host.size());
  be.copy_from_host(params_.get(), host.data(), host.size() * sizeof(float));
}

SequenceProbe::SequenceProbe(Backend& be, const ModelConfig& c, const std::vector<int64_t>& lens,
                             Comm* group)
    : be_(be), s_(0), cu_{0} {
  FLEXSP_CHECK(!lens.empty(), "sequence probe: no sequences");
  for (int64_t l : lens) {
    FLEXSP_CHECK(l >= 1, "sequence probe: a sequence of {} tokens", l);
    s_ += l;
    cu_.push_back(static_cast<int32_t>(s_));
  }
  const int d = group == nullptr ? 1 : group->size();
  const int nseq = static_cast<int>(lens.size());
  ids_.resize(static_cast<size_t>(s_));
  pos_.resize(static_cast<size_t>(s_));
  tgt_.resize(static_cast<size_t>(s_));
  for (int64_t i = 0; i < s_; ++i) ids_[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % c.vocab);
  packed_positions(cu_.data(), nseq, pos_.data());
  packed_next_token_targets(ids_.data(), cu_.data(), nseq, tgt_.data());
  const std::vector<int64_t> off = shard_offsets(s_, d);
  const int j = group == nullptr ? 0 : group->rank();
  const int64_t lo = off[static_cast<size_t>(j)], n = off[static_cast<size_t>(j) + 1] - lo;
  local_ = MicroBatch{n, ids_.data() + lo, pos_.data() + lo, tgt_.data() + lo, nseq, cu_.data()};
  model_ = std::make_unique<Llama>(be, c, std::max<int64_t>(n, 1));
  if (d > 1) {
    ulysses_ = std::make_unique<UlyssesAttention>(be, c, s_);
    ulysses_->set_layout(*group, cu_.data(), nseq, off);
  }
}

SequenceProbe::~SequenceProbe() = default;

void SequenceProbe::run(ProbeWeights& w) {
  model_->forward(w.params(), local_, ulysses_.get());
  model_->backward(w.params(), w.grads(), 1.0 / static_cast<double>(s_));
}

double measure_activation_bytes_per_token(Backend& be, const ModelConfig& c, Comm* group,
                                          int64_t s1, int64_t s2) {
  FLEXSP_CHECK(s1 < s2, "activation memory: needs two lengths, got {} and {}", s1, s2);
  ProbeWeights w(be, c);
  be.synchronize();
  auto held = [&](int64_t s, int64_t* local) {
    const size_t before = be.allocated_bytes();
    be.reset_peak_allocated_bytes();
    {
      SequenceProbe p(be, c, s, group);
      p.run(w);
      be.synchronize();
      *local = p.local_tokens();
    }
    return static_cast<double>(be.peak_allocated_bytes() - before);
  };
  int64_t n1 = 0, n2 = 0;
  const double b1 = held(s1, &n1), b2 = held(s2, &n2);
  FLEXSP_CHECK(n2 > n1, "activation memory: lengths {} and {} give the same local tokens", s1, s2);
  return (b2 - b1) / static_cast<double>(n2 - n1);
}

ActivationProfile profile_activation_memory(const Grid& grid, const Groups& groups, Backend& be,
                                            const ModelConfig& c, int64_t s1, int64_t s2) {
  ActivationProfile r;
  for (int d = 2; d <= grid.size && grid.size % d == 0; d *= 2)
    if (sp_group_runnable(c.heads, c.kv_heads, d) && s1 >= d) r.widest = d;
  for (const bool ckpt : {false, true}) {
    ModelConfig m = c;
    m.checkpoint_activations = ckpt;
    double most = 0;
    for (const int d : {1, r.widest}) {
      agree(grid.comm, [&] {
        if (grid.rank >= d) return;
        Comm* dev = d == 1 ? nullptr : &groups.for_backend().block(d);
        most = std::max(most, measure_activation_bytes_per_token(be, m, dev, s1, s2));
      });
      if (d == r.widest) break;
    }
    groups.world->all_reduce(&most, &most, 1, DType::f64, ReduceOp::max);
    (ckpt ? r.bytes_per_token_ckpt : r.bytes_per_token) = most;
  }
  return r;
}

}  // namespace flexsp

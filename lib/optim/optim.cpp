// AdamW, clipping and the LR schedule (see optim.h).
#include "lib/optim/optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "lib/util/error.h"

namespace flexsp {

double lr_at(const OptimSection& o, int64_t step, int64_t total_steps) {
  FLEXSP_ASSERT(step >= 1);
  if (o.warmup_steps > 0 && step <= o.warmup_steps)
    return o.lr * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  const int64_t decay_steps = total_steps - o.warmup_steps;
  if (decay_steps <= 0 || step >= total_steps) return decay_steps <= 0 ? o.lr : o.min_lr;
  const double progress =
      static_cast<double>(step - o.warmup_steps) / static_cast<double>(decay_steps);
  return o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

double grad_sum_squares(Backend& be, const float* grads, int64_t n) {
  return be.sum_squares(grads, n);
}

double clip_scale(double global_sum_squares, double max_norm) {
  if (!std::isfinite(global_sum_squares)) return std::nan("");
  if (max_norm <= 0) return 1.0;
  const double norm = std::sqrt(global_sum_squares);
  return std::min(1.0, max_norm / (norm + 1e-6));
}

std::vector<DecaySegment> decay_segments(const ParamTable& t, int64_t begin, int64_t end) {
  FLEXSP_ASSERT(0 <= begin && begin <= end && end <= t.total);
  std::vector<DecaySegment> segs;
  auto add = [&segs](int64_t b, int64_t e, bool decay) {
    if (b >= e) return;
    if (!segs.empty() && segs.back().decay == decay && segs.back().end == b)
      segs.back().end = e;
    else
      segs.push_back({b, e, decay});
  };
  // Each tensor owns [offset, next tensor's offset): its elements plus trailing padding.
  for (size_t i = 0; i < t.views.size(); ++i) {
    const int64_t lo = t.views[i].offset;
    const int64_t hi = i + 1 < t.views.size() ? t.views[i + 1].offset : t.total;
    add(std::max(lo, begin), std::min(hi, end), !t.views[i].is_1d);
  }
  return segs;
}

AdamW::AdamW(Backend& be, const ParamTable& t, int64_t begin, int64_t end)
    : be_(be), begin_(begin), end_(end), segments_(decay_segments(t, begin, end)),
      m_(be, static_cast<size_t>(end - begin)), v_(be, static_cast<size_t>(end - begin)) {}

void AdamW::step(float* params, const float* grads, const OptimSection& o, double lr,
                 double grad_scale) {
  FLEXSP_CHECK(std::isfinite(grad_scale) && std::isfinite(lr),
               "optimizer: non-finite gradient scale or learning rate; step skipped");
  ++steps_;
  AdamWArgs a;
  a.lr = static_cast<float>(lr);
  a.beta1 = static_cast<float>(o.beta1);
  a.beta2 = static_cast<float>(o.beta2);
  a.eps = static_cast<float>(o.eps);
  a.step = steps_;
  a.grad_scale = static_cast<float>(grad_scale);
  std::vector<AdamWRange> ranges;
  ranges.reserve(segments_.size());
  for (const DecaySegment& s : segments_)
    ranges.push_back({s.begin - begin_, s.end - begin_,
                      s.decay ? static_cast<float>(o.weight_decay) : 0.0f});
  be_.adamw_update_ranges(params, grads, m_.get(), v_.get(), ranges.data(),
                          static_cast<int>(ranges.size()), a);
}

}  // namespace flexsp

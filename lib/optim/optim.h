// Optimizer: AdamW over flat buffers, global gradient-norm clipping, LR schedule.
//
// The optimizer works on a contiguous range [begin, end) of the flat parameter layout
// (lib/model/params.h): everything on one rank, or one rank's ZeRO shard. Weight decay
// is decided per tensor (matrices decay; 1-D tensors -- the norms -- do not); the range is
// cut into segments of equal decay once, at construction. Gradient clipping is folded into
// the update as a gradient scale, so a step is one pass over the buffers.
//
// Clipping across ranks: each rank computes the sum of squares of its gradient range
// (grad_sum_squares), the caller all-reduces the sums, and clip_scale turns the global
// sum into the factor passed to AdamW::step.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/config/config.h"
#include "lib/model/params.h"

namespace flexsp {

// Learning rate for step `step` (1-based: the first update is step 1) of `total_steps`:
// linear warm-up lr * step / warmup_steps for step <= warmup_steps, then cosine decay
// from lr to min_lr, reaching min_lr at step == total_steps (and staying there after).
double lr_at(const OptimSection& o, int64_t step, int64_t total_steps);

// Sum of squares of n gradient elements in backend memory (this rank's part).
double grad_sum_squares(Backend& be, const float* grads, int64_t n);
// Factor that brings the global gradient norm sqrt(global_sum_squares) down to max_norm,
// as torch.nn.utils.clip_grad_norm_: min(1, max_norm / (norm + 1e-6)); 1 when
// max_norm <= 0. Returns NaN when the sum is not finite (the caller must skip the step).
double clip_scale(double global_sum_squares, double max_norm);

struct DecaySegment {
  int64_t begin = 0, end = 0;  // flat element range
  bool decay = false;
};
// [begin, end) cut into maximal segments of equal decay; padding between tensors joins
// its neighbours (its values and gradients are 0, so decay does not matter there).
std::vector<DecaySegment> decay_segments(const ParamTable& t, int64_t begin, int64_t end);

class AdamW {
 public:
  // States (exp_avg, exp_avg_sq; zero) for flat elements [begin, end) of t's layout.
  AdamW(Backend& be, const ParamTable& t, int64_t begin, int64_t end);
  AdamW(Backend& be, const ParamTable& t) : AdamW(be, t, 0, t.total) {}

  // One update of params[0 .. end-begin) (pointing at flat element `begin`) with
  // grads * grad_scale; increments steps(). Hyper-parameters from o (lr given separately,
  // from the schedule).
  void step(float* params, const float* grads, const OptimSection& o, double lr,
            double grad_scale = 1.0);

  int64_t steps() const { return steps_; }
  void set_steps(int64_t s) { steps_ = s; }  // resume
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  float* exp_avg() { return m_.get(); }
  float* exp_avg_sq() { return v_.get(); }

 private:
  Backend& be_;
  int64_t begin_ = 0, end_ = 0, steps_ = 0;
  std::vector<DecaySegment> segments_;
  Buffer<float> m_, v_;
};

}  // namespace flexsp

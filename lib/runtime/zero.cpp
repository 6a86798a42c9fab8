#include "lib/runtime/zero.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "lib/util/error.h"

namespace flexsp {

void zero_check(const ParallelSection& p) {
  FLEXSP_CHECK(p.zero <= 2,
               "parallel.zero: stage 3 (sharded parameters) is not available in this build yet; "
               "use 0, 1 or 2");
  FLEXSP_CHECK(p.zero < 2 || p.zero_grad_group == p.zero_optim_group,
               "parallel.zero_grad_group: with ZeRO stage 2 gradients are sharded like the "
               "optimizer states, so it must equal parallel.zero_optim_group ('{}')",
               p.zero_optim_group);
}

ZeroOptimizer::ZeroOptimizer(Backend& be, const ParamTable& table, const ParallelSection& p,
                             Groups& groups)
    : be_(be), table_(table), stage_(p.zero), groups_(groups) {
  zero_check(p);
  shard_comm_ = p.zero_optim_group == "node" ? groups.node.get() : groups.world.get();
  const int64_t shards = stage_ == 0 ? 1 : shard_comm_->size();
  padded_ = (table.total + shards - 1) / shards * shards;
  block_ = padded_ / shards;
  const int me = stage_ == 0 ? 0 : shard_comm_->rank();
  begin_ = std::min<int64_t>(me * block_, table.total);
  end_ = std::min<int64_t>(begin_ + block_, table.total);
  params_ = Buffer<float>(be, static_cast<size_t>(padded_));
  grads_ = Buffer<float>(be, static_cast<size_t>(padded_));
  scratch_ = Buffer<float>(be, static_cast<size_t>(block_));
  adamw_ = std::make_unique<AdamW>(be, table, begin_, end_);
}

void ZeroOptimizer::zero_grads() { be_.zero(grads_.get(), grads_.bytes()); }

double ZeroOptimizer::step(const OptimSection& o, double lr, PhaseTimes* timers) {
  Comm& world = *groups_.world;
  float* g = grads_.get();
  const size_t B = static_cast<size_t>(block_);
  float* shard_g = g + begin_;
  double sumsq = 0;
  std::optional<ScopedPhase> timed(std::in_place, timers, Phase::grad_reduce);
  if (stage_ <= 1) {
    world.all_reduce(g, g, static_cast<size_t>(padded_), DType::f32, ReduceOp::sum);
    sumsq = be_.sum_squares(g, table_.total);
  } else {
    // Reduce-scatter into this rank's block (in place: the block's own slot of g).
    Comm& sc = *shard_comm_;
    const size_t my = static_cast<size_t>(sc.rank()) * B;
    sc.reduce_scatter(g, scratch_.get(), B, DType::f32, ReduceOp::sum);
    be_.copy(g + my, scratch_.get(), B * sizeof(float));
    if (&sc != &world) groups_.cross_node->all_reduce(g + my, g + my, B, DType::f32, ReduceOp::sum);
    sumsq = be_.sum_squares(shard_g, end_ - begin_);
    sc.all_reduce(&sumsq, &sumsq, 1, DType::f64, ReduceOp::sum);
  }
  timed.emplace(timers, Phase::optimizer);
  const double scale = clip_scale(sumsq, o.grad_clip);
  const double norm = std::sqrt(sumsq);
  if (!std::isfinite(scale)) return std::isfinite(norm) ? std::nan("") : norm;
  adamw_->step(params_.get() + begin_, shard_g, o, lr, scale);
  if (stage_ >= 1) {
    // Every rank contributes its updated block; padding blocks are zeros.
    Comm& sc = *shard_comm_;
    be_.copy(scratch_.get(), params_.get() + static_cast<size_t>(sc.rank()) * B, B * sizeof(float));
    sc.all_gather(scratch_.get(), params_.get(), B, DType::f32);
  }
  return norm;
}

}  // namespace flexsp

// ZeRO's shared parts (zero_parts.h) and the choice of implementation by stage.
#include "lib/runtime/zero.h"

#include <cmath>

#include "lib/runtime/zero_parts.h"
#include "lib/util/error.h"

namespace flexsp {

void zero_check(const ParallelSection& p) {
  FLEXSP_CHECK(p.zero >= 0 && p.zero <= 3, "parallel.zero: must be 0..3, got {}", p.zero);
  FLEXSP_CHECK(p.zero != 2 || p.zero_grad_group == p.zero_optim_group,
               "parallel.zero_grad_group: with ZeRO stage 2 gradients are sharded like the "
               "optimizer states, so it must equal parallel.zero_optim_group ('{}')",
               enum_name(p.zero_optim_group));
  if (p.zero != 3) return;
  FLEXSP_CHECK(p.zero_param_group == ZeroGroup::node || p.zero_grad_group == ZeroGroup::world,
               "parallel.zero_grad_group: with ZeRO stage 3 and parameters sharded over the "
               "world, gradients must be sharded over 'world' too (got '{}')",
               enum_name(p.zero_grad_group));
  FLEXSP_CHECK(p.zero_grad_group == ZeroGroup::node || p.zero_optim_group == ZeroGroup::world,
               "parallel.zero_optim_group: with ZeRO stage 3 and gradients sharded over the "
               "world, optimizer states must be sharded over 'world' too (got '{}'); "
               "supported (param, grad, optim) groups: (world, world, world), "
               "(node, world, world), (node, node, world), (node, node, node)",
               enum_name(p.zero_optim_group));
}

std::unique_ptr<ZeroOptimizer> make_zero_optimizer(Backend& be, const ParamTable& table,
                                                   const ParallelSection& p,
                                                   const ZeroPeers& peers) {
  zero_check(p);
  if (p.zero == 3) return make_zero_sharded(be, table, p, peers);
  return make_zero_replicated(be, table, p, peers);
}

ZeroBase::ZeroBase(Backend& be, const ParamTable& table, const ParallelSection& p,
                   const ZeroPeers& peers)
    : be_(be), table_(table), stage_(p.zero), groups_(*peers.dp), peers_(peers) {
  FLEXSP_ASSERT(peers_.tp == 1 || peers_.tp_blocks != nullptr);
  if (peers_.tp > 1) replicated_ = tp_replicated_ranges(table);
}

double ZeroBase::tp_reduce(float* g, int64_t first, int64_t last, PhaseTimes* timers) {
  double excluded = 0;
  if (replicated_.empty()) return excluded;
  ScopedPhase timed(timers, Phase::tp_comm);
  for (const TpReplicated& r : replicated_) {
    const int64_t lo = std::max(r.begin, first), hi = std::min(r.end, last);
    if (lo >= hi) continue;
    float* x = g + (lo - first);
    peers_.tp_blocks->for_backend(CommPurpose::grad_reduce)
        .block(r.replicas)
        .all_reduce(x, x, static_cast<size_t>(hi - lo), DType::f32, ReduceOp::sum);
    if (r.replica != 0) excluded += be_.sum_squares(x, hi - lo);
  }
  return excluded;
}

void ZeroBase::sum_over_tp_and_stages(double* sumsq) {
  if (peers_.tp > 1) peers_.tp_blocks->block(peers_.tp).all_reduce(sumsq, sumsq, 1, DType::f64, ReduceOp::sum);
  if (peers_.stages) peers_.stages->all_reduce(sumsq, sumsq, 1, DType::f64, ReduceOp::sum);
}

bool ZeroBase::clip(double sumsq, const OptimSection& o, double* scale, double* norm) {
  *scale = clip_scale(sumsq, o.grad_clip);
  *norm = std::sqrt(sumsq);
  if (std::isfinite(*scale)) return true;
  if (std::isfinite(*norm)) *norm = std::nan("");
  return false;
}

}  // namespace flexsp

// What both ZeRO implementations (zero.h) share: the layout they serve, the peers they
// reduce with, and what tensor and pipeline parallelism add to a step's reduction -- the
// sum over the copies of tp-replicated tensors, and the gradient norm's square summed over
// the tp group and the pipeline stages. Internal to lib/runtime/zero*.cpp.
#pragma once

#include <memory>
#include <vector>

#include "lib/model/tensor_parallel.h"
#include "lib/optim/optim.h"
#include "lib/runtime/zero.h"

namespace flexsp {

class ZeroBase : public ZeroOptimizer {
 public:
  int stage() const override { return stage_; }

 protected:
  ZeroBase(Backend& be, const ParamTable& table, const ParallelSection& p, const ZeroPeers& peers);

  // Sums the copies of tp-replicated tensors in g (flat [first, last) of the layout, at g)
  // over their tp ranks; returns the sum of squares of the parts this rank does not count
  // in the norm (copies other than 0).
  double tp_reduce(float* g, int64_t first, int64_t last, PhaseTimes* timers);
  // A norm's square, summed over the tp group, then over the pipeline stages (host).
  void sum_over_tp_and_stages(double* sumsq);
  // The clip scale of a gradient norm's square sumsq (o.grad_clip), in *scale, and the
  // norm. False when the norm is not finite: the step must change nothing and return
  // *norm, which is then NaN or inf.
  static bool clip(double sumsq, const OptimSection& o, double* scale, double* norm);

  Backend& be_;
  const ParamTable& table_;
  int stage_ = 0;
  Groups& groups_;  // the data-parallel peers
  ZeroPeers peers_;
  std::vector<TpReplicated> replicated_;  // tp > 1: the flat ranges held by several tp ranks
};

std::unique_ptr<ZeroOptimizer> make_zero_replicated(Backend& be, const ParamTable& table,
                                                    const ParallelSection& p,
                                                    const ZeroPeers& peers);
std::unique_ptr<ZeroOptimizer> make_zero_sharded(Backend& be, const ParamTable& table,
                                                 const ParallelSection& p, const ZeroPeers& peers);

}  // namespace flexsp

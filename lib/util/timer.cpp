#include "lib/util/timer.h"

#include "lib/comm/comm.h"

namespace flexsp {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::data: return "data";
    case Phase::plan_wait: return "plan_wait";
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::attention: return "attention";
    case Phase::all_to_all: return "all_to_all";
    case Phase::grad_reduce: return "grad_reduce";
    case Phase::optimizer: return "optimizer";
    case Phase::checkpoint: return "checkpoint";
    case Phase::count: break;
  }
  return "?";
}

PhaseStats phase_stats(const PhaseTimes& mine, Comm& comm) {
  PhaseStats s;
  comm.all_reduce(mine.ms.data(), s.min.ms.data(), kPhases, DType::f64, ReduceOp::min);
  comm.all_reduce(mine.ms.data(), s.max.ms.data(), kPhases, DType::f64, ReduceOp::max);
  comm.all_reduce(mine.ms.data(), s.mean.ms.data(), kPhases, DType::f64, ReduceOp::sum);
  for (double& v : s.mean.ms) v /= comm.size();
  return s;
}

}  // namespace flexsp

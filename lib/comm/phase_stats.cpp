#include "lib/comm/phase_stats.h"

namespace flexsp {

PhaseStats phase_stats(const PhaseTimes& mine, Comm& comm) {
  PhaseStats s;
  comm.all_reduce(mine.ms.data(), s.min.ms.data(), kPhases, DType::f64, ReduceOp::min);
  comm.all_reduce(mine.ms.data(), s.max.ms.data(), kPhases, DType::f64, ReduceOp::max);
  comm.all_reduce(mine.ms.data(), s.mean.ms.data(), kPhases, DType::f64, ReduceOp::sum);
  for (double& v : s.mean.ms) v /= comm.size();
  return s;
}

}  // namespace flexsp

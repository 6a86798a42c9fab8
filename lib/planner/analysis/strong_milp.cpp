// StrongMilp's solve (strong_milp.h): the collected columns and rows loaded into OsiClp,
// solved by CbcMain1 with CBC's log off, and the run read back in ms.
#include "lib/planner/analysis/strong_milp.h"

#include <coin/CbcModel.hpp>
#include <coin/CbcSolver.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/CoinPackedVector.hpp>
#include <coin/OsiClpSolverInterface.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

namespace flexsp {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

StrongMilpResult StrongMilp::solve(double limit_ms, std::vector<double>* xs) const {
  const int ncols = static_cast<int>(lo_.size());
  CoinPackedMatrix m(false, 0, 0);
  m.setDimensions(0, ncols);
  for (const Terms& terms : rows_) {
    CoinPackedVector r;
    for (const auto& [j, a] : terms) r.insert(j, a);
    m.appendRow(r);
  }
  OsiClpSolverInterface solver;
  solver.loadProblem(m, lo_.data(), hi_.data(), obj_.data(), rlo_.data(), rhi_.data());
  for (int i = 0; i < ncols; ++i)
    if (int_[i]) solver.setInteger(i);
  solver.messageHandler()->setLogLevel(0);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  CbcMain0(model);
  model.setLogLevel(0);
  const std::string sec = fmt::format("{}", std::max(limit_ms, 1.0) / 1000.0);
  // -trust -1 (CBC's trustPseudoCosts): with the default, CBC 2.10 can segfault in
  // CbcNode::chooseDynamicBranch (a long-tail case at --strong-bound-long-fraction 0.1);
  // the bounds it proves are the same either way.
  const char* argv[] = {"flexsp", "-log", "0", "-slog", "0", "-timeMode", "elapsed", "-sec", sec.c_str(),
                        "-threads", "0", "-preprocess", "off", "-randomCbcSeed", "1", "-randomSeed", "1",
                        "-trust", "-1", "-solve", "-quit"};
  const auto t0 = std::chrono::steady_clock::now();
  CbcMain1(static_cast<int>(sizeof argv / sizeof argv[0]), argv, model);
  StrongMilpResult r;
  r.solve_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const bool has = model.bestSolution() != nullptr && model.getMinimizationObjValue() < 1e50;
  r.incumbent_ms = has ? 1000.0 * model.getMinimizationObjValue() : kInf;
  if (has && xs) xs->assign(model.bestSolution(), model.bestSolution() + ncols);
  if (model.isProvenInfeasible()) {
    r.status = "infeasible", r.bound_ms = kInf;
  } else if (model.isProvenOptimal()) {
    r.status = "optimal";
    r.bound_ms = 1000.0 * std::min(model.getBestPossibleObjValue(), model.getMinimizationObjValue());
  } else {
    r.status = model.isNodeLimitReached() ? "node_limit" : model.isSecondsLimitReached() ? "time_limit" : "failed";
    r.bound_ms = 1000.0 * model.getBestPossibleObjValue();
    if (!std::isfinite(r.bound_ms) || r.bound_ms < -1e40) r.bound_ms = 0;  // no bound: the caller's floor holds
  }
  return r;
}

}  // namespace flexsp

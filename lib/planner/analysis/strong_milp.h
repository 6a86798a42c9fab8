// The solver behind one run of the strong lower bound (strong_bound.h): a MILP collected
// column by column and row by row, then handed to CBC in one piece.
//
// The answer a bound needs is CBC's best possible objective, not its incumbent: a run the
// time limit stops still proves that bound. CBC runs as mb_milp's does (preprocessing off,
// one thread, fixed seeds), so a run is repeatable; the columns and rows go to CBC in the
// order they were added, which CBC's search path depends on. The CBC headers stay in
// strong_milp.cpp: the formulation sees only indices and coefficients.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace flexsp {

struct StrongMilpResult {
  std::string status;       // optimal | time_limit | node_limit | infeasible | failed
  double bound_ms = 0;      // CBC's best bound x 1000 (inf: infeasible; 0: CBC proved none)
  double incumbent_ms = 0;  // its best solution x 1000 (inf: none)
  double solve_ms = 0;      // elapsed
};

class StrongMilp {
 public:
  using Terms = std::vector<std::pair<int, double>>;  // (column, coefficient)

  // A column in [lo, hi] with objective coefficient obj (minimised); its index.
  int col(double lo, double hi, bool integer, double obj = 0) {
    lo_.push_back(lo), hi_.push_back(hi), int_.push_back(integer), obj_.push_back(obj);
    return static_cast<int>(lo_.size()) - 1;
  }
  // lo <= sum of terms <= hi; zero coefficients are dropped.
  void row(const Terms& v, double lo, double hi) {
    Terms r;
    for (const auto& [j, a] : v)
      if (a != 0) r.push_back({j, a});
    rows_.push_back(std::move(r)), rlo_.push_back(lo), rhi_.push_back(hi);
  }
  // Solves within limit_ms of elapsed time (objective in s, the result in ms); xs, when
  // given and there is a solution, receives its column values.
  StrongMilpResult solve(double limit_ms, std::vector<double>* xs = nullptr) const;

 private:
  std::vector<double> lo_, hi_, obj_;
  std::vector<char> int_;
  std::vector<Terms> rows_;
  std::vector<double> rlo_, rhi_;
};

}  // namespace flexsp

// The memory-aware lower bounds (lower_bound.h); the memory-blind one the planner reports
// per step is cost/plan_costs.cpp's.
#include "lib/planner/analysis/lower_bound.h"

#include <algorithm>
#include <functional>
#include <limits>

namespace flexsp {



MemoryBound plan_memory_lower_bound(const PlanCosts& c, const std::vector<int64_t>& lengths) {
  std::vector<int64_t> len = lengths;
  std::sort(len.begin(), len.end(), std::greater<>());
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t E = c.tokens_per_rank, W = c.world;
  int64_t tokens = 0;
  for (int64_t l : len) tokens += l;
  MemoryBound b;
  b.micro_batches = static_cast<int>(std::max<int64_t>(1, (tokens + W * E - 1) / (W * E)));
  // M(L) and tmin(L) at each distinct length L (N(L) = sequences at least that long).
  std::vector<std::pair<int64_t, double>> steps;  // (M(L), tmin(L)), L descending
  for (size_t i = 0; i < len.size(); ++i) {
    if (i + 1 < len.size() && len[i + 1] == len[i]) continue;
    const int64_t L = len[i], N = static_cast<int64_t>(i) + 1;
    int64_t best_k = 0, best_d = 1;  // r(L) = best_k / best_d
    double tmin = inf;
    for (int d : c.sizes) {
      const int64_t k = d * E / L;
      if (k == 0 || !c.holds(L, d)) continue;
      tmin = std::min(tmin, c.seq_ms(L, d));
      if (k * best_d > best_k * d) best_k = k, best_d = d;
    }
    if (best_k == 0) continue;  // infeasible: plan_step reports it
    const int64_t m = (N * best_d + W * best_k - 1) / (W * best_k);
    steps.emplace_back(m, tmin);
    b.micro_batches = static_cast<int>(std::max<int64_t>(b.micro_batches, m));
  }
  // g(k) = max tmin(L) over L with M(L) >= k, for k = 1 .. M*.
  for (int k = 1; k <= b.micro_batches; ++k) {
    double g = 0;
    for (const auto& [m, t] : steps)
      if (m >= k) g = std::max(g, t);
    b.staircase_ms += g;
  }
  // The memory-blind bound counts micro-batches by tokens (m_tokens); its makespan part
  // holds for any plan, which pays M* fixed costs.
  const int m_tokens = static_cast<int>(std::max<int64_t>(1, (tokens + W * E - 1) / (W * E)));
  b.work_ms = plan_sum_lower_bound_ms(c, lengths) - m_tokens * c.fixed_ms;
  // With a pipeline: plan_lower_bound_ms's rule.
  b.ms = c.step_lower_ms(b.micro_batches * c.fixed_ms + std::max(b.staircase_ms, b.work_ms));
  return b;
}

double plan_micro_batch_lower_bound_ms(const PlanCosts& c, const std::vector<int64_t>& len) {
  if (len.empty()) return 0;
  const double inf = std::numeric_limits<double>::infinity();
  // Devices the sequences that cannot share a group need within makespan C (inf: one
  // does not fit within C at all).
  auto devices = [&](double C) {
    double need = 0;
    for (int64_t l : len) {
      int dmin = 0;
      double tmin = inf;
      for (int d : c.sizes)
        if (c.holds(l, d) && c.seq_ms(l, d) <= C) {
          if (dmin == 0) dmin = d;
          tmin = std::min(tmin, c.seq_ms(l, d));
        }
      if (dmin == 0) return inf;
      if (tmin > 0.5 * C) need += dmin;
    }
    return need;
  };
  double longest = 0;
  for (int64_t l : len) {
    double t = inf;
    for (int d : c.sizes)
      if (c.holds(l, d)) t = std::min(t, c.seq_ms(l, d));
    longest = std::max(longest, t);
  }
  // devices(C) does not grow with C (more sizes fit, fewer sequences take over C/2), and
  // is 0 from twice the longest sequence's least time on: bisect.
  double lo = longest, hi = 2 * longest + 1e-9;
  if (devices(lo) > c.world)
    for (int it = 0; it < 60 && hi - lo > 1e-9 * hi; ++it) {
      const double mid = 0.5 * (lo + hi);
      (devices(mid) <= c.world ? hi : lo) = mid;
    }
  else
    hi = lo;
  return std::max(hi, plan_sum_lower_bound_ms(c, len) - c.fixed_ms);
}

}  // namespace flexsp

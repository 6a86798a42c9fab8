// The lower-bound tests' checks: the best plan of a tiny batch on 4 devices, by brute force
// over every split into micro-batches and every group layout and assignment of each; a
// bound between the memory-aware bound and the best plan, on tiny batches and on the
// planner's plans of long pieces and long tails at 64 GPUs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <utility>
#include <random>
#include <vector>

#include "lib/planner/analysis/lower_bound.h"
#include "lib/planner/planner.h"
#include "lib/planner/analysis/strong_bound.h"
#include "support/planner_context.h"

namespace flexsp::testing {

// 4 devices in one node (sizes 1, 2, 4), E = 1000 tokens, fixed 100 ms: tiny batches
// whose sequences need groups of 1, 2 or 4 devices.
inline PlanCosts tiny_costs() {
  PlannerContext ctx = planner_context_7b_64();
  ctx.world = 4, ctx.ranks_per_node = 4, ctx.zero = {3, 4, 4, 4};
  PlanCosts c = plan_costs(ctx);
  c.tokens_per_rank = 1000;
  c.fixed_ms = 100;
  return c;
}

// The least makespan of one micro-batch holding the sequences of `mask`: every layout of
// aligned groups on 4 devices, every assignment of the sequences to its groups.
inline double brute_micro_batch(const PlanCosts& c, const std::vector<int64_t>& len, unsigned mask) {
  const std::vector<std::vector<int>> layouts{{4}, {2, 2}, {2, 1, 1}, {1, 1, 1, 1}};
  std::vector<int> seqs;
  for (size_t i = 0; i < len.size(); ++i)
    if (mask >> i & 1) seqs.push_back(static_cast<int>(i));
  double best = std::numeric_limits<double>::infinity();
  for (const auto& g : layouts) {
    int combos = 1;
    for (size_t i = 0; i < seqs.size(); ++i) combos *= static_cast<int>(g.size());
    for (int a = 0; a < combos; ++a) {
      std::vector<double> t(g.size(), 0);
      std::vector<int64_t> tok(g.size(), 0);
      bool ok = true;
      for (int i = 0, r = a; i < static_cast<int>(seqs.size()) && ok; ++i, r /= static_cast<int>(g.size())) {
        const int k = r % static_cast<int>(g.size());
        const int64_t l = len[seqs[i]];
        ok = c.holds(l, g[k]);
        tok[k] += l, t[k] += c.seq_ms(l, g[k]);
        ok = ok && tok[k] <= c.tokens_per_rank * g[k];
      }
      if (ok) best = std::min(best, *std::max_element(t.begin(), t.end()));
    }
  }
  return best;
}

// The best plan's sum of micro-batch times: a DP over subsets (each micro-batch a subset).
inline double brute_best_plan(const PlanCosts& c, const std::vector<int64_t>& len) {
  const unsigned full = (1u << len.size()) - 1;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> mb(full + 1, inf), best(full + 1, inf);
  for (unsigned s = 1; s <= full; ++s) mb[s] = c.fixed_ms + brute_micro_batch(c, len, s);
  best[0] = 0;
  for (unsigned s = 1; s <= full; ++s) {
    const unsigned low = s & (~s + 1);
    for (unsigned sub = s; sub; sub = (sub - 1) & s)
      if (sub & low) best[s] = std::min(best[s], mb[sub] + best[s ^ sub]);
  }
  return best[full];
}

// The lower-bound tests' tiny batches: 5-7 sequences, 2-4 of them longer than one device
// holds (E = 1000), drawn from g.
inline std::vector<int64_t> tiny_batch(std::mt19937_64& g, int rep) {
  std::uniform_int_distribution<int64_t> short_len(50, 900), long_len(1001, 4000);
  std::vector<int64_t> len;
  const int n = 5 + rep % 3;
  for (int i = 0; i < n; ++i) len.push_back(i < 2 + rep % 3 ? long_len(g) : short_len(g));
  return len;
}

// A plan's sum of micro-batch times: one sequence per micro-batch on its smallest group.
inline double one_per_micro_batch_ms(const PlanCosts& c, const std::vector<int64_t>& len) {
  double t = 0;
  for (int64_t l : len) t += c.fixed_ms + c.seq_ms(l, c.min_size(l));
  return t;
}

// A lower bound of a batch lies between the memory-aware bound and the best plan.
inline void expect_valid_bound(double bound_ms, const PlanCosts& c, const std::vector<int64_t>& len, double best_ms,
                               int rep) {
  EXPECT_LE(bound_ms, best_ms * (1 + 1e-9)) << rep;
  EXPECT_GE(bound_ms, plan_memory_lower_bound(c, len).ms * (1 - 1e-9)) << rep;
}

// The lower-bound tests' 12 tiny batches (seed 3) and, with no fixed cost, 3 more: each
// bound(len, upper, best, rep) -- upper: one_per_micro_batch_ms, best: brute_best_plan --
// lies between the memory-aware bound and the best plan. Returns, of the 12, how many lie
// above the memory-aware bound by more than 1%, and the best plan's largest gap over them.
inline std::pair<int, double> check_tiny_batches(
    PlanCosts c, const std::function<double(const PlanCosts&, const std::vector<int64_t>&, double, double, int)>& bound) {
  std::mt19937_64 g(3);
  int above = 0;
  double worst_gap = 0;
  for (int rep = 0; rep < 12; ++rep) {
    const std::vector<int64_t> len = tiny_batch(g, rep);
    const double best = brute_best_plan(c, len);
    const double ms = bound(c, len, one_per_micro_batch_ms(c, len), best, rep);
    expect_valid_bound(ms, c, len, best, rep);
    above += ms > plan_memory_lower_bound(c, len).ms * 1.01;
    worst_gap = std::max(worst_gap, best / ms - 1);
  }
  c.fixed_ms = 0;  // no cost per micro-batch: any number of them
  for (int rep = 0; rep < 3; ++rep) {
    const std::vector<int64_t> len{3000, 1800 + 100 * rep, 700, 400, 90};
    const double best = brute_best_plan(c, len);
    expect_valid_bound(bound(c, len, one_per_micro_batch_ms(c, len), best, rep), c, len, best, rep);
  }
  return {above, worst_gap};
}

// 64 pieces of 196608 tokens at E = 17114 (the MemoryLowerBound case), where the
// memory-aware bound equals the plan, so bound(c, len, upper) must too; then two lognormal
// long tails of 256 sequences, where it lies between the memory-aware bound and the
// planner's plan (upper: that plan's sum). Returns on how many of the two it is above the
// memory-aware bound by more than 0.5%.
inline int check_long_pieces_and_tails(
    const std::function<double(const PlanCosts&, const std::vector<int64_t>&, double)>& bound) {
  PlannerContext ctx = planner_context_7b_64();
  ctx.use_milp = false;
  const PlanCosts c = plan_costs(ctx);
  const std::vector<int64_t> longs(64, 196608);
  PlanStats st;
  const Plan p = plan_step(ctx, longs, &st);
  EXPECT_NEAR(bound(c, longs, plan_sum_ms(c, p, longs)), st.predicted_ms, 1e-6 * st.predicted_ms);
  std::mt19937_64 g(11);
  std::lognormal_distribution<double> d(8, 1.6);
  int above = 0;
  for (int step = 0; step < 2; ++step) {
    std::vector<int64_t> len(256);
    for (int64_t& x : len) x = std::clamp<int64_t>(static_cast<int64_t>(d(g)), 2, 196609);
    PlanStats s;
    const Plan q = plan_step(ctx, len, &s);
    const double ms = bound(c, len, plan_sum_ms(c, q, len));
    const double mem = plan_memory_lower_bound(c, len).ms;
    EXPECT_LE(ms, s.predicted_ms * (1 + 1e-9)) << step;
    EXPECT_GE(ms, mem * (1 - 1e-9)) << step;
    above += ms > mem * 1.005;
    std::printf("step %d: plan %.0f ms, bound %.0f, memory-aware %.0f\n", step, s.predicted_ms, ms, mem);
  }
  return above;
}

}  // namespace flexsp::testing

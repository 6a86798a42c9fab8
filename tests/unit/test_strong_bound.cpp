// The strong lower bound (lib/planner/strong_bound.h): never above the best plan (found
// by brute force over every split and every group layout of tiny batches on 4 devices),
// never below the memory-aware bound, exact where that one is (64 pieces of 192K), and
// above it where the groups' memory couples the long pieces' micro-batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <random>

#include "lib/planner/lower_bound.h"
#include "lib/planner/mb_solver.h"
#include "lib/planner/planner.h"
#include "lib/planner/strong_bound.h"
#include "lib/util/error.h"
#include "support/planner_context.h"

namespace flexsp {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// 4 devices in one node (sizes 1, 2, 4), E = 1000 tokens, fixed 100 ms: tiny batches
// whose sequences need groups of 1, 2 or 4 devices.
PlanCosts tiny_costs() {
  PlannerContext ctx = testing::planner_context_7b_64();
  ctx.world = 4, ctx.ranks_per_node = 4, ctx.zero = {3, 4, 4, 4};
  PlanCosts c = plan_costs(ctx);
  c.tokens_per_rank = 1000;
  c.fixed_ms = 100;
  return c;
}

// The least makespan of one micro-batch holding the sequences of `mask`: every layout of
// aligned groups on 4 devices, every assignment of the sequences to its groups.
double brute_micro_batch(const PlanCosts& c, const std::vector<int64_t>& len, unsigned mask) {
  const std::vector<std::vector<int>> layouts{{4}, {2, 2}, {2, 1, 1}, {1, 1, 1, 1}};
  std::vector<int> seqs;
  for (size_t i = 0; i < len.size(); ++i)
    if (mask >> i & 1) seqs.push_back(static_cast<int>(i));
  double best = kInf;
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
double brute_best_plan(const PlanCosts& c, const std::vector<int64_t>& len) {
  const unsigned full = (1u << len.size()) - 1;
  std::vector<double> mb(full + 1, kInf), best(full + 1, kInf);
  for (unsigned s = 1; s <= full; ++s) mb[s] = c.fixed_ms + brute_micro_batch(c, len, s);
  best[0] = 0;
  for (unsigned s = 1; s <= full; ++s) {
    const unsigned low = s & (~s + 1);
    for (unsigned sub = s; sub; sub = (sub - 1) & s)
      if (sub & low) best[s] = std::min(best[s], mb[sub] + best[s ^ sub]);
  }
  return best[full];
}

TEST(StrongLowerBound, NeverAboveTheBestPlanOfTinyBatches) {
  PlanCosts c = tiny_costs();
  ASSERT_EQ(c.sizes, (std::vector<int>{1, 2, 4}));
  std::mt19937_64 g(3);
  std::uniform_int_distribution<int64_t> short_len(50, 900), long_len(1001, 4000);
  int above = 0;
  double worst_gap = 0;  // best plan / strong bound - 1, largest
  for (int rep = 0; rep < 12; ++rep) {
    std::vector<int64_t> len;
    const int n = 5 + rep % 3;
    for (int i = 0; i < n; ++i) len.push_back(i < 2 + rep % 3 ? long_len(g) : short_len(g));
    const double best = brute_best_plan(c, len);
    double upper = 0;  // one sequence per micro-batch on its smallest group: a plan
    for (int64_t l : len) upper += c.fixed_ms + c.seq_ms(l, c.min_size(l));
    StrongBoundOptions o;
    o.time_limit_ms = 5000;
    const StrongBound sb = plan_strong_lower_bound(c, len, upper, o);
    const MemoryBound mb = plan_memory_lower_bound(c, len);
    EXPECT_LE(sb.ms, best * (1 + 1e-9)) << rep;
    EXPECT_GE(sb.ms, mb.ms * (1 - 1e-9)) << rep;
    EXPECT_TRUE(sb.proven) << rep;
    if (sb.ms > mb.ms * 1.01) ++above;
    worst_gap = std::max(worst_gap, best / sb.ms - 1);
  }
  std::printf("strong bound above the memory-aware one by > 1%% in %d of 12; best plan at most %.1f%% above it\n",
              above, 100 * worst_gap);
  c.fixed_ms = 0;  // no cost per micro-batch: any number of them (the pool's count is capped by the sequences)
  for (int rep = 0; rep < 3; ++rep) {
    const std::vector<int64_t> len{3000, 1800 + 100 * rep, 700, 400, 90};
    double upper = 0;
    for (int64_t l : len) upper += c.seq_ms(l, c.min_size(l));
    const StrongBound sb = plan_strong_lower_bound(c, len, upper);
    EXPECT_LE(sb.ms, brute_best_plan(c, len) * (1 + 1e-9)) << rep;
    EXPECT_GE(sb.ms, plan_memory_lower_bound(c, len).ms * (1 - 1e-9)) << rep;
  }
  EXPECT_GE(above, 1);  // the coupling of groups and memory binds on some of them
}

// 64 pieces of 196608 tokens at E = 17114 (the MemoryLowerBound case): the memory-aware
// bound equals the plan, so the strong bound must too; never above the planner's plans of
// long-tailed batches.
TEST(StrongLowerBound, ExactOnLongPiecesAndValidOnLongTails) {
  PlannerContext ctx = testing::planner_context_7b_64();
  ctx.use_milp = false;
  const PlanCosts c = plan_costs(ctx);
  StrongBoundOptions o;
  o.time_limit_ms = 4000;
  const std::vector<int64_t> longs(64, 196608);
  PlanStats st;
  const Plan p = plan_step(ctx, longs, &st);
  const StrongBound sb = plan_strong_lower_bound(c, longs, plan_sum_ms(c, p, longs), o);
  EXPECT_NEAR(sb.ms, st.predicted_ms, 1e-6 * st.predicted_ms);
  std::mt19937_64 g(11);
  std::lognormal_distribution<double> d(8, 1.6);
  for (int step = 0; step < 2; ++step) {
    std::vector<int64_t> len(256);
    for (int64_t& x : len) x = std::clamp<int64_t>(static_cast<int64_t>(d(g)), 2, 196609);
    PlanStats s;
    const Plan q = plan_step(ctx, len, &s);
    const StrongBound b = plan_strong_lower_bound(c, len, plan_sum_ms(c, q, len), o);
    EXPECT_LE(b.ms, s.predicted_ms * (1 + 1e-9)) << step;
    EXPECT_GE(b.ms, plan_memory_lower_bound(c, len).ms * (1 - 1e-9)) << step;
  }
}

TEST(StrongLowerBound, RejectsANonPositiveUpperBound) {
  const PlanCosts c = tiny_costs();
  EXPECT_THROW(plan_strong_lower_bound(c, {500, 1500}, 0), Error);
}

}  // namespace
}  // namespace flexsp

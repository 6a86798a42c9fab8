// The strong lower bound (lib/planner/strong_bound.h): never above the best plan (found
// by brute force over every split and every group layout of tiny batches on 4 devices),
// never below the memory-aware bound, exact where that one is (64 pieces of 192K), and
// above it where the groups' memory couples the long pieces' micro-batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "lib/planner/lower_bound.h"
#include "lib/planner/mb_solver.h"
#include "lib/planner/planner.h"
#include "lib/planner/strong_bound.h"
#include "lib/util/error.h"
#include "support/brute_plan.h"
#include "support/planner_context.h"

namespace flexsp {
namespace {

using testing::check_tiny_batches;
using testing::tiny_costs;

TEST(StrongLowerBound, NeverAboveTheBestPlanOfTinyBatches) {
  ASSERT_EQ(tiny_costs().sizes, (std::vector<int>{1, 2, 4}));
  const auto [above, worst_gap] = check_tiny_batches(
      tiny_costs(), [](const PlanCosts& c, const std::vector<int64_t>& len, double upper, double, int rep) {
        StrongBoundOptions o;
        o.time_limit_ms = 5000;
        const StrongBound sb = plan_strong_lower_bound(c, len, upper, o);
        if (c.fixed_ms > 0) EXPECT_TRUE(sb.proven) << rep;
        return sb.ms;
      });
  std::printf("strong bound above the memory-aware one by > 1%% in %d of 12; best plan at most %.1f%% above it\n",
              above, 100 * worst_gap);
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

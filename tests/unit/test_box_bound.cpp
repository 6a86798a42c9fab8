// The box lower bound (lib/planner/box_bound.h): never above the best plan (found by brute
// force over every split and every group layout of tiny batches on 4 devices), never below
// the memory-aware bound, exact where that one is (64 pieces of 192K), at or under the
// planner's plans of long-tailed batches and above the memory-aware bound on some, and
// valid when the time limit stops it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "lib/planner/box_bound.h"
#include "lib/planner/lower_bound.h"
#include "lib/planner/planner.h"
#include "lib/planner/strong_bound.h"
#include "lib/util/error.h"
#include "support/brute_plan.h"
#include "support/planner_context.h"

namespace flexsp {
namespace {

using testing::check_tiny_batches;
using testing::tiny_costs;

TEST(BoxLowerBound, NeverAboveTheBestPlanOfTinyBatches) {
  int closed = 0;
  const auto [above, worst_gap] = check_tiny_batches(
      tiny_costs(), [&](const PlanCosts& c, const std::vector<int64_t>& len, double upper, double best, int rep) {
        BoxBoundOptions o;
        o.time_limit_ms = 200;
        // Given the best plan itself, a closed search proves it optimal.
        const BoxBound at_best = plan_box_lower_bound(c, len, best, o);
        EXPECT_LE(at_best.ms, best * (1 + 1e-9)) << rep;
        if (at_best.closed) EXPECT_NEAR(at_best.ms, best, 1e-6 * best) << rep;
        closed += at_best.closed;
        return plan_box_lower_bound(c, len, upper, o).ms;
      });
  std::printf("box bound above the memory-aware one by > 1%% in %d of 12 (%d closed at the best plan); best plan "
              "at most %.1f%% above it\n",
              above, closed, 100 * worst_gap);
  EXPECT_GE(above, 1);
}

// 64 pieces of 196608 tokens at E = 17114: the memory-aware bound equals the plan, so the
// box bound must too. Lognormal long tails at 64 GPUs: at or under the planner's plans, at
// or over the memory-aware bound, over it on some step.
TEST(BoxLowerBound, ExactOnLongPiecesAndValidOnLongTails) {
  PlannerContext ctx = testing::planner_context_7b_64();
  ctx.use_milp = false;
  const PlanCosts c = plan_costs(ctx);
  BoxBoundOptions o;
  o.time_limit_ms = 2000;
  const std::vector<int64_t> longs(64, 196608);
  PlanStats st;
  const Plan p = plan_step(ctx, longs, &st);
  EXPECT_NEAR(plan_box_lower_bound(c, longs, plan_sum_ms(c, p, longs), o).ms, st.predicted_ms, 1e-6 * st.predicted_ms);
  std::mt19937_64 g(11);
  std::lognormal_distribution<double> d(8, 1.6);
  int above = 0;
  for (int step = 0; step < 2; ++step) {
    std::vector<int64_t> len(256);
    for (int64_t& x : len) x = std::clamp<int64_t>(static_cast<int64_t>(d(g)), 2, 196609);
    PlanStats s;
    const Plan q = plan_step(ctx, len, &s);
    const BoxBound b = plan_box_lower_bound(c, len, plan_sum_ms(c, q, len), o);
    const double mem = plan_memory_lower_bound(c, len).ms;
    EXPECT_LE(b.ms, s.predicted_ms * (1 + 1e-9)) << step;
    EXPECT_GE(b.ms, mem * (1 - 1e-9)) << step;
    above += b.ms > mem * 1.005;
    std::printf("step %d: plan %.0f ms, box bound %.0f (%d boxes), memory-aware %.0f\n", step, s.predicted_ms, b.ms,
                b.boxes, mem);
  }
  EXPECT_GE(above, 1);
}

TEST(BoxLowerBound, RejectsANonPositiveUpperBound) {
  const PlanCosts c = tiny_costs();
  EXPECT_THROW(plan_box_lower_bound(c, {500, 1500}, 0), Error);
}

}  // namespace
}  // namespace flexsp

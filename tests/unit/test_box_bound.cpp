// The box lower bound (lib/planner/analysis/box_bound.h): never above the best plan (found by brute
// force over every split and every group layout of tiny batches on 4 devices), never below
// the memory-aware bound, exact where that one is (64 pieces of 192K), at or under the
// planner's plans of long-tailed batches and above the memory-aware bound on some, and
// valid when the time limit stops it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "lib/planner/analysis/box_bound.h"
#include "lib/planner/analysis/lower_bound.h"
#include "lib/planner/planner.h"
#include "lib/planner/analysis/strong_bound.h"
#include "lib/util/error.h"
#include "support/lower_bound_checks.h"
#include "support/planner_context.h"

namespace flexsp {
namespace {

using testing::check_long_pieces_and_tails;
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
        if (at_best.closed) {
          EXPECT_NEAR(at_best.ms, best, 1e-6 * best) << rep;
        }
        closed += at_best.closed;
        return plan_box_lower_bound(c, len, upper, o).ms;
      });
  std::printf("box bound above the memory-aware one by > 1%% in %d of 12 (%d closed at the best plan); best plan "
              "at most %.1f%% above it\n",
              above, closed, 100 * worst_gap);
  EXPECT_GE(above, 1);
}

// Exact where the memory-aware bound is (64 pieces of 192K); between it and the planner's
// plans of lognormal long tails at 64 GPUs, and above it on some.
TEST(BoxLowerBound, ExactOnLongPiecesAndValidOnLongTails) {
  const int above = check_long_pieces_and_tails([](const PlanCosts& c, const std::vector<int64_t>& len, double upper) {
    BoxBoundOptions o;
    o.time_limit_ms = 2000;
    return plan_box_lower_bound(c, len, upper, o).ms;
  });
  EXPECT_GE(above, 1);
}

TEST(BoxLowerBound, RejectsANonPositiveUpperBound) {
  const PlanCosts c = tiny_costs();
  EXPECT_THROW(plan_box_lower_bound(c, {500, 1500}, 0), Error);
}

}  // namespace
}  // namespace flexsp

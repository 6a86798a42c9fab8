// The strong lower bound (lib/planner/analysis/strong_bound.h): never above the best plan (found
// by brute force over every split and every group layout of tiny batches on 4 devices),
// never below the memory-aware bound, exact where that one is (64 pieces of 192K), and
// above it where the groups' memory couples the long pieces' micro-batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "lib/planner/analysis/lower_bound.h"
#include "lib/planner/mb/mb_solver.h"
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

TEST(StrongLowerBound, NeverAboveTheBestPlanOfTinyBatches) {
  ASSERT_EQ(tiny_costs().sizes, (std::vector<int>{1, 2, 4}));
  const auto [above, worst_gap] = check_tiny_batches(
      tiny_costs(), [](const PlanCosts& c, const std::vector<int64_t>& len, double upper, double, int rep) {
        StrongBoundOptions o;
        o.time_limit_ms = 5000;
        const StrongBound sb = plan_strong_lower_bound(c, len, upper, o);
        if (c.fixed_ms > 0) {
          EXPECT_TRUE(sb.proven) << rep;
        }
        return sb.ms;
      });
  std::printf("strong bound above the memory-aware one by > 1%% in %d of 12; best plan at most %.1f%% above it\n",
              above, 100 * worst_gap);
  EXPECT_GE(above, 1);  // the coupling of groups and memory binds on some of them
}

// Exact where the memory-aware bound is (64 pieces of 192K); never above the planner's
// plans of long-tailed batches nor below the memory-aware bound.
TEST(StrongLowerBound, ExactOnLongPiecesAndValidOnLongTails) {
  check_long_pieces_and_tails([](const PlanCosts& c, const std::vector<int64_t>& len, double upper) {
    StrongBoundOptions o;
    o.time_limit_ms = 4000;
    return plan_strong_lower_bound(c, len, upper, o).ms;
  });
}

TEST(StrongLowerBound, RejectsANonPositiveUpperBound) {
  const PlanCosts c = tiny_costs();
  EXPECT_THROW(plan_strong_lower_bound(c, {500, 1500}, 0), Error);
}

}  // namespace
}  // namespace flexsp

// The memory-aware lower bound (lib/planner/lower_bound.h): never below the memory-blind
// bound, never above a plan the planner makes (a bound that a plan beats is wrong), and
// exact on a batch of long pieces only, where the groups they need -- not the token
// count -- set the number of micro-batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "lib/planner/lower_bound.h"
#include "lib/planner/planner.h"
#include "support/planner_context.h"

namespace flexsp {
namespace {

PlannerContext ctx64() {
  PlannerContext c = testing::planner_context_7b_64();
  c.use_milp = false;
  return c;
}

TEST(MemoryLowerBound, ValidOnLongTailsAndExactOnLongPieces) {
  const PlannerContext ctx = ctx64();
  const PlanCosts c = plan_costs(ctx);
  std::mt19937_64 g(11);
  std::lognormal_distribution<double> d(8, 1.6);
  for (int step = 0; step < 4; ++step) {
    std::vector<int64_t> len(256);
    for (int64_t& x : len) x = std::clamp<int64_t>(static_cast<int64_t>(d(g)), 2, 196609);
    PlanStats st;
    plan_step(ctx, len, &st);
    const MemoryBound b = plan_memory_lower_bound(c, len);
    EXPECT_GE(b.ms, plan_lower_bound_ms(c, len) * (1 - 1e-9)) << step;
    EXPECT_LE(b.ms, st.predicted_ms * (1 + 1e-9)) << step;
  }
  // 64 pieces of 196608 tokens: each needs 16 devices (E = 17114), so 4 per micro-batch
  // and 16 micro-batches, where the token count alone says 12.
  const std::vector<int64_t> longs(64, 196608);
  PlanStats st;
  plan_step(ctx, longs, &st);
  const MemoryBound b = plan_memory_lower_bound(c, longs);
  EXPECT_EQ(b.micro_batches, 16);
  EXPECT_GT(b.ms, plan_lower_bound_ms(c, longs));
  EXPECT_NEAR(b.ms, st.predicted_ms, 1e-6 * st.predicted_ms);
}

}  // namespace
}  // namespace flexsp

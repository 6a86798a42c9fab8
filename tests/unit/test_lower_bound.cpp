// The memory-aware lower bound (lib/planner/analysis/lower_bound.h): never below the memory-blind
// bound, never above a plan the planner makes (a bound that a plan beats is wrong), and
// exact on a batch of long pieces only, where the groups they need -- not the token
// count -- set the number of micro-batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "lib/planner/analysis/lower_bound.h"
#include "lib/planner/mb/mb_solver.h"
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

// One micro-batch: three 192K pieces need 32-GPU groups to run under 17.15 s (their time
// on 16 GPUs), and no two share one, so 96 > 64 devices: the bound is 17.15 s where the
// memory-blind one lets all three use 32-GPU groups. Two pieces fit two 32-GPU groups.
// Never above a plan of the micro-batch (greedy plans of long-tailed micro-batches).
TEST(MicroBatchLowerBound, CountsTheDevicesOfPiecesThatCannotShare) {
  const PlanCosts c = plan_costs(ctx64());
  ASSERT_EQ(c.min_size(196609), 16);
  const std::vector<int64_t> three(3, 196609), two(2, 196609);
  const double on16 = c.seq_ms(196609, 16), on32 = c.seq_ms(196609, 32);
  ASSERT_GT(2 * on32, on16);  // two pieces on one 32-GPU group are slower than one on 16
  EXPECT_NEAR(plan_micro_batch_lower_bound_ms(c, three), on16, 1e-6 * on16);
  EXPECT_NEAR(mb_greedy(c, three, {0, 1, 2}).makespan_ms, on16, 1e-6 * on16);  // tight
  EXPECT_LT(plan_sum_lower_bound_ms(c, three) - c.fixed_ms, on16);
  EXPECT_LT(plan_micro_batch_lower_bound_ms(c, two), on16);
  EXPECT_GE(plan_micro_batch_lower_bound_ms(c, two), on32);
  std::mt19937_64 g(5);
  std::lognormal_distribution<double> d(8, 1.6);
  const int64_t cap = c.tokens_per_rank * c.world;
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<int64_t> len;
    std::vector<int32_t> seqs;
    int64_t tok = 0;
    for (;;) {
      const int64_t l = std::clamp<int64_t>(static_cast<int64_t>(d(g)), 2, 196609);
      if (tok + l > cap * 9 / 10) break;
      seqs.push_back(static_cast<int32_t>(len.size())), len.push_back(l), tok += l;
    }
    const MbPlan p = mb_greedy(c, len, seqs);
    ASSERT_TRUE(p.ok);
    EXPECT_LE(plan_micro_batch_lower_bound_ms(c, len), p.makespan_ms * (1 + 1e-9)) << rep;
    EXPECT_GE(plan_micro_batch_lower_bound_ms(c, len), plan_sum_lower_bound_ms(c, len) - c.fixed_ms - 1e-6);
  }
}

}  // namespace
}  // namespace flexsp

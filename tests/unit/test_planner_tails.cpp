// Heavy tails the planner was not tuned on (bench/bench_tails.sh): the micro-batch whose
// bound is its longest sequence alone (mb_unload), on a batch built so that memory pushes
// short sequences beside that sequence; and planning's time as a share of the step.
#include <gtest/gtest.h>

#include <vector>

#include "lib/plan/plan.h"
#include "lib/planner/planner.h"
#include "lib/planner/step/gates.h"
#include "support/planner_context.h"

namespace flexsp {
namespace {

// One 150K piece among short documents, 0.7 of a micro-batch's memory in all (64 GPUs, 80
// GB): the piece runs fastest alone on 32 devices (6.1 s), longer than all the work spread
// over the devices, but the other 32 devices lack the memory for the short documents, so a
// single micro-batch must put some beside the piece.
std::vector<int64_t> one_long_piece(const PlanCosts& c) {
  std::vector<int64_t> len = {150000};
  int64_t tok = len[0];
  for (int i = 0; 10 * tok < 7 * c.tokens_per_rank * c.world; ++i) len.push_back(500 + (i * 7919) % 1000), tok += len.back();
  return len;
}

// The makespan of the micro-batch that holds sequence q, and whether q's group holds it alone.
double makespan_of(const PlanCosts& c, const std::vector<int64_t>& len, const Plan& p, int32_t q, bool* alone) {
  for (const PlanMicroBatch& mb : p.micro_batches)
    for (const PlanGroup& g : mb.groups)
      for (int32_t s : g.seqs)
        if (s == q) {
          *alone = g.seqs.size() == 1;
          return mb_makespan(c, len, mb.groups);
        }
  return -1;
}

TEST(PlannerTails, LongestSequenceKeepsItsTimeWhereTheStepGetsShorter) {
  PlannerContext ctx = testing::planner_context_7b_64(196608);
  const PlanCosts c = plan_costs(ctx);
  const std::vector<int64_t> len = one_long_piece(c);
  const double alone = c.least_ms(len[0]);
  ASSERT_GT(alone, 0);
  double work = 0;
  for (int64_t l : len) work += c.least_work(l);
  ASSERT_LT(work / c.world, alone);  // the piece alone sets the bound
  PlanStats on, off;
  PlannerContext without = ctx;
  without.unload_max_tries = 0;
  const Plan p_off = plan_step(without, len, &off);
  const Plan p_on = plan_step(ctx, len, &on);
  bool alone_off = false, alone_on = false;
  // Without the pass the piece's micro-batch runs past its bound: short documents sit on
  // its group.
  EXPECT_GT(makespan_of(c, len, p_off, 0, &alone_off), 1.1 * alone);
  EXPECT_FALSE(alone_off);
  // With it the piece runs alone at its bound, the rest in a micro-batch of its own, and
  // the step is shorter for it.
  EXPECT_LE(makespan_of(c, len, p_on, 0, &alone_on), alone * (1 + 1e-9));
  EXPECT_TRUE(alone_on);
  EXPECT_GE(on.unloaded, 1);
  EXPECT_EQ(off.unloaded, 0);
  EXPECT_LT(on.predicted_ms, off.predicted_ms * 0.97);
  EXPECT_NO_THROW(plan_validate(p_on, len, plan_limits(ctx, c)));
}

// Where moving the short documents out costs more than it saves (a micro-batch's fixed
// cost against a little past the bound), the piece's group stays lengthened.
TEST(PlannerTails, LongestSequenceSharesItsGroupWhereThatIsFaster) {
  PlannerContext ctx = testing::planner_context_7b_64(196608);
  const PlanCosts c = plan_costs(ctx);
  std::vector<int64_t> len = {196608};
  int64_t tok = len[0];
  for (int i = 0; 10 * tok < 7 * c.tokens_per_rank * c.world; ++i) len.push_back(500 + (i * 7919) % 1000), tok += len.back();
  PlanStats on, off;
  PlannerContext without = ctx;
  without.unload_max_tries = 0;
  plan_step(without, len, &off);
  plan_step(ctx, len, &on);
  EXPECT_EQ(on.unloaded, 0);
  EXPECT_EQ(on.predicted_ms, off.predicted_ms);
  EXPECT_EQ(on.micro_batches, 1);
}

// The limit a step plans under: the configured one, at most the share of the step
// predicted, never 0 (which would mean none); a share of 0 or a limit of 0 leave it be.
TEST(PlannerTails, TimeLimitIsAShareOfThePredictedStep) {
  PlannerContext ctx = testing::planner_context_7b_64();
  ctx.time_limit_ms = 1000;
  ctx.time_step_share = 0.05;
  EXPECT_EQ(step_time_limit_ms(ctx, 4000), 200);
  EXPECT_EQ(step_time_limit_ms(ctx, 60000), 1000);
  EXPECT_EQ(step_time_limit_ms(ctx, 3), 1);
  EXPECT_EQ(step_limited(ctx, 4000).time_limit_ms, 200);
  ctx.time_step_share = 0;
  EXPECT_EQ(step_time_limit_ms(ctx, 4000), 1000);
  ctx.time_step_share = 0.05;
  ctx.time_limit_ms = 0;
  EXPECT_EQ(step_time_limit_ms(ctx, 4000), 0);
}

// The share binds where the step is short against the limit: with a share that leaves
// the step about a millisecond the MILPs get no time and the plan is the searches'
// (valid, every micro-batch planned); without it they run.
TEST(PlannerTails, PlanningFollowsTheShareOfTheStep) {
  PlannerContext ctx = testing::planner_context_7b_64(196608);
  ctx.time_limit_ms = 60000;
  const PlanCosts c = plan_costs(ctx);
  const std::vector<int64_t> len = one_long_piece(c);
  PlanStats share, limit;
  ctx.time_step_share = 1e-9;
  const Plan p = plan_step(ctx, len, &share);
  ctx.time_step_share = 0;
  plan_step(ctx, len, &limit);
  EXPECT_EQ(share.milp_solved, 0);
  EXPECT_EQ(share.milp_timed_out, share.micro_batches);
  EXPECT_GT(limit.milp_solved, 0);
  EXPECT_NO_THROW(plan_validate(p, len, plan_limits(ctx, c)));
}

}  // namespace
}  // namespace flexsp

// flexsp's search as a table and its gates (lib/planner/step/): the local-search passes
// run in the documented order; each gate tests its threshold from PlannerContext::gates
// (a wide piece, the stage's size for the wide passes and the sample, the time left for
// alternatives); plan_step with the wide passes gated off plans exactly as with their
// budgets at 0, and planning with the default gates is deterministic.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "lib/plan/plan.h"
#include "lib/planner/planner.h"
#include "lib/planner/step/gates.h"
#include "lib/planner/step/passes.h"
#include "support/planner_context.h"

namespace flexsp {
namespace {

PlannerContext ctx64() { return testing::planner_context_7b_64(196608); }

// A memory-bound heavy tail: 192K pieces (their smallest group: 16 devices) among shorter
// documents.
std::vector<int64_t> heavy_tail() {
  std::vector<int64_t> len = {196608, 196608, 150000, 120000, 90000, 60000};
  for (int i = 0; i < 120; ++i) len.push_back(500 + (i * 7919) % 12000);
  return len;
}

TEST(PlannerPasses, TableRunsInTheDocumentedOrder) {
  EXPECT_EQ(local_pass_names(),
            (std::vector<std::string>{"unload", "dissolve", "exchange", "partner", "exchange", "unload", "dissolve",
                                      "exchange", "swap", "resplit"}));
}

TEST(PlannerGates, WidePieceAndStageSize) {
  PlannerContext ctx = ctx64();
  const PlanCosts c = plan_costs(ctx);
  const std::vector<int64_t> tail = heavy_tail(), short_docs(64, 4096);
  EXPECT_TRUE(gate_wide_piece(ctx, c, tail));
  EXPECT_FALSE(gate_wide_piece(ctx, c, short_docs));
  EXPECT_TRUE(gate_wide_passes(ctx, c, tail));
  EXPECT_FALSE(gate_wide_passes(ctx, c, short_docs));
  EXPECT_FALSE(gate_sample(ctx, c, tail));  // 64 devices: the wide passes themselves run
  // A 100K piece needs 8 devices: wide beside half a node, not beside a whole one.
  const std::vector<int64_t> mid = {100000, 4096};
  EXPECT_TRUE(gate_wide_piece(ctx, c, mid));
  ctx.gates.wide_piece_divisor = 1;
  EXPECT_FALSE(gate_wide_piece(ctx, c, mid));
  ctx = ctx64();
  ctx.gates.wide_passes_max_devices = 32;
  EXPECT_FALSE(gate_wide_passes(ctx, c, tail));
}

TEST(PlannerGates, SampleOnWideStages) {
  PlannerContext ctx = ctx64();
  ctx.world = 1024;
  ctx.zero = {3, 1024, 1024, 1024};
  const PlanCosts c = plan_costs(ctx);
  const std::vector<int64_t> tail = heavy_tail();
  EXPECT_FALSE(gate_wide_passes(ctx, c, tail));
  EXPECT_TRUE(gate_sample(ctx, c, tail));
  ctx.gates.wide_passes_max_devices = 1024;
  EXPECT_TRUE(gate_wide_passes(ctx, c, tail));
  EXPECT_FALSE(gate_sample(ctx, c, tail));
  ctx = ctx64();
  ctx.world = 1024;
  ctx.sample_devices = 0;
  EXPECT_FALSE(gate_sample(ctx, c, tail));
}

TEST(PlannerGates, TimeLeftForAlternatives) {
  PlannerContext ctx = ctx64();
  const auto now = PlanClock::now();
  const auto ago = now - std::chrono::milliseconds(600);
  EXPECT_TRUE(gate_time_left(ctx, ago));  // limit 0: no clock
  ctx.time_limit_ms = 1000;
  EXPECT_TRUE(gate_time_left(ctx, now));
  EXPECT_FALSE(gate_time_left(ctx, ago));  // 600 of 1000 ms used: less than half left
  ctx.gates.alternatives_left = 0.3;
  EXPECT_TRUE(gate_time_left(ctx, ago));
}

// The gate decides for both wide passes: gated off, plan_step plans as with the levels
// splits and mb_resplit at budget 0 -- and, gated on, differently on this batch.
TEST(PlannerGates, WidePassesGateOffEqualsTheirBudgetsOff) {
  const std::vector<int64_t> len = heavy_tail();
  PlannerContext gated = ctx64();
  gated.gates.wide_passes_max_devices = 0;
  PlannerContext budgets = ctx64();
  budgets.levels_max_counts = 0;
  budgets.resplit_max_tries = 0;
  PlanStats a, b;
  const Plan pa = plan_step(gated, len, &a), pb = plan_step(budgets, len, &b);
  EXPECT_EQ(plan_encode(pa), plan_encode(pb));
  EXPECT_EQ(a.predicted_ms, b.predicted_ms);
  EXPECT_EQ(a.resplit, 0);
  PlanStats st;
  const Plan on = plan_step(ctx64(), len, &st);
  EXPECT_EQ(plan_encode(on), plan_encode(plan_step(ctx64(), len))) << "not deterministic";
  EXPECT_NE(plan_encode(on), plan_encode(pa));
  EXPECT_LE(st.predicted_ms, a.predicted_ms);
}

}  // namespace
}  // namespace flexsp

// The planner's per-micro-batch choice between activation offload and a wider group
// (PlannerContext::offload_choice, train.offload = auto; lib/planner/step/offload_choice.cpp):
// on a batch with one long sequence among short ones, the micro-batch that holds the long
// one offloads (a narrow group instead of a wide one) where the copies are cheap, and the
// micro-batches of short sequences keep their blocks on the device; where the copies are
// dear, nothing offloads that fits without. The plan is never predicted slower than the
// run-level choices (off, or offload everywhere), is valid under each micro-batch's
// memory, and survives the broadcast encoding.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "lib/planner/cost/plan_costs.h"
#include "lib/planner/planner.h"
#include "lib/util/error.h"
#include "support/planner_context.h"

using namespace flexsp;

namespace {

// The planner tests' 7B setting (greedy passes only: deterministic and quick) on 16 GPUs
// of 40 GB, with host copies at bw_h2d_gbs.
PlannerContext ctx7b(double bw_h2d_gbs) {
  PlannerContext c = flexsp::testing::planner_context_7b(16, 196608);
  c.mem_per_gpu_gb = 40;
  c.cost.bw_h2d_gbs = bw_h2d_gbs;
  return c;
}

PlannerContext with_offload(PlannerContext c, bool offload, bool choice) {
  c.model.offload = offload;
  c.offload_choice = choice;
  return c;
}

// One 100K-token sequence and 350 short ones (lognormal, up to 8K) on 16 GPUs of 40 GB:
// several micro-batches with or without offload.
std::vector<int64_t> batch() {
  std::mt19937_64 g(7);
  std::lognormal_distribution<double> d(7.0, 0.8);
  std::vector<int64_t> v{100000};
  for (int i = 0; i < 350; ++i) v.push_back(std::clamp<int64_t>(static_cast<int64_t>(d(g)), 16, 8192));
  return v;
}

int offloaded(const Plan& p) {
  return static_cast<int>(std::count_if(p.micro_batches.begin(), p.micro_batches.end(),
                                        [](const PlanMicroBatch& mb) { return mb.offload; }));
}

}  // namespace

// Whether every group of mb fits c's memory (tokens per device).
bool fits(const PlanCosts& c, const std::vector<int64_t>& len, const PlanMicroBatch& mb) {
  for (const PlanGroup& g : mb.groups) {
    int64_t tok = 0;
    for (int32_t s : g.seqs) tok += len[s];
    if (tok > c.tokens_per_rank * g.size) return false;
  }
  return true;
}

TEST(PlannerOffload, MixesPerMicroBatchWhereCopiesAreCheap) {
  const std::vector<int64_t> len = batch();
  const PlannerContext ctx = ctx7b(200);
  const Plan off = plan_step(with_offload(ctx, false, false), len);
  const Plan every = plan_step(with_offload(ctx, true, false), len);
  PlanStats st;
  const Plan p = plan_step(with_offload(ctx, false, true), len, &st);
  EXPECT_EQ(offloaded(off), 0);
  EXPECT_EQ(offloaded(every), static_cast<int>(every.micro_batches.size()));
  EXPECT_LE(p.predicted_ms, std::min(off.predicted_ms, every.predicted_ms) * (1 + 1e-9));
  EXPECT_LT(p.predicted_ms, off.predicted_ms * 0.95);
  // Mixed: some micro-batches offload, some keep their blocks on the device.
  EXPECT_EQ(st.offloaded, offloaded(p));
  EXPECT_GE(offloaded(p), 1);
  EXPECT_LT(offloaded(p), static_cast<int>(p.micro_batches.size()));
  // A micro-batch offloads only where its groups need the memory: the same groups without
  // offload would be as fast and copy nothing.
  const PlanCosts c = plan_costs(with_offload(ctx, false, true));
  ASSERT_TRUE(c.offload_costs);
  for (const PlanMicroBatch& mb : p.micro_batches) {
    EXPECT_EQ(!mb.offload, fits(c, len, mb));
    EXPECT_TRUE(fits(mb.offload ? *c.offload_costs : c, len, mb));
  }
  const Plan q = plan_decode(plan_encode(p));
  for (size_t m = 0; m < p.micro_batches.size(); ++m) EXPECT_EQ(q.micro_batches[m].offload, p.micro_batches[m].offload);
}

TEST(PlannerOffload, KeepsBlocksOnTheDeviceWhereCopiesAreDear) {
  const std::vector<int64_t> len = batch();
  const PlannerContext ctx = ctx7b(2);
  const Plan off = plan_step(with_offload(ctx, false, false), len);
  const Plan p = plan_step(with_offload(ctx, false, true), len);
  EXPECT_EQ(offloaded(p), 0);
  EXPECT_EQ(plan_encode(p), plan_encode(off));
}

TEST(PlannerOffload, OffloadsEverythingWhereNothingFitsWithout) {
  std::vector<int64_t> len = batch();
  len[0] = 150000;  // more than 16 devices hold without offload (7040 tokens each)
  const PlannerContext ctx = with_offload(ctx7b(25), false, true);
  EXPECT_THROW(plan_step(with_offload(ctx, false, false), len), Error);
  const Plan p = plan_step(ctx, len);
  EXPECT_EQ(offloaded(p), static_cast<int>(p.micro_batches.size()));
}

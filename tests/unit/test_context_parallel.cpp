// Context parallelism: the u x r split of each mode, and plans that may hold groups wider
// than the heads only when the mode has a ring.
#include <gtest/gtest.h>

#include "lib/plan/context_parallel.h"
#include "lib/plan/plan.h"
#include "lib/util/error.h"

namespace flexsp {
namespace {

void expect_split(CpMode m, int d, int heads, int kv, int per_node, int u, int r) {
  const CpSplit s = cp_split(m, d, heads, kv, per_node);
  EXPECT_EQ(s.u, u) << cp_mode_name(m) << " d=" << d;
  EXPECT_EQ(s.r, r) << cp_mode_name(m) << " d=" << d;
  EXPECT_EQ(s.u * s.r, d);
}

TEST(ContextParallel, SplitPerMode) {
  // 8 heads, 2 kv heads, 4 devices per node.
  expect_split(CpMode::ulysses, 4, 8, 2, 4, 4, 1);
  expect_split(CpMode::ring, 8, 8, 2, 4, 1, 8);
  expect_split(CpMode::automatic, 1, 8, 2, 4, 1, 1);
  expect_split(CpMode::automatic, 4, 8, 2, 4, 4, 1);
  expect_split(CpMode::automatic, 8, 8, 2, 4, 8, 1);    // Ulysses across nodes when heads allow
  expect_split(CpMode::automatic, 32, 8, 2, 4, 8, 4);   // the heads cap u at 8
  expect_split(CpMode::usp, 8, 8, 2, 4, 4, 2);          // u stays in a node
  expect_split(CpMode::usp, 64, 8, 2, 4, 4, 16);
  expect_split(CpMode::usp, 2, 8, 2, 0, 2, 1);          // 0: no node bound
  // 6 heads: only 2 divides them among powers of two.
  expect_split(CpMode::automatic, 8, 6, 6, 8, 2, 4);
  // 1 head: the ring only.
  expect_split(CpMode::automatic, 4, 1, 1, 8, 1, 4);
}

TEST(ContextParallel, UlyssesRefusesWhatTheHeadsCannotSplit) {
  EXPECT_THROW(cp_split(CpMode::ulysses, 16, 8, 8, 8), Error);
  EXPECT_THROW(cp_split(CpMode::automatic, 3, 8, 8, 8), Error);
  EXPECT_FALSE(cp_group_runnable(CpMode::ulysses, 16, 8, 8, 8));
  EXPECT_TRUE(cp_group_runnable(CpMode::ring, 16, 8, 8, 8));
  EXPECT_TRUE(cp_group_runnable(CpMode::automatic, 16, 8, 8, 8));
  EXPECT_EQ(cp_mode_parse("auto"), CpMode::automatic);
  EXPECT_STREQ(cp_mode_name(cp_mode_parse("usp")), "usp");
  try {
    cp_mode_parse("tree");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.cp_mode"), std::string::npos);
  }
}

TEST(ContextParallel, PlanValidationFollowsTheMode) {
  Plan p;
  p.micro_batches.resize(1);
  p.micro_batches[0].groups.push_back({0, 8, {0}});
  PlanLimits lim;
  lim.world = 8;
  lim.ranks_per_node = 8;
  lim.heads = 4;
  lim.kv_heads = 4;
  EXPECT_THROW(plan_validate(p, {10}, lim), Error);  // ulysses: 8 does not divide 4 heads
  lim.cp_mode = CpMode::automatic;
  EXPECT_NO_THROW(plan_validate(p, {10}, lim));
  lim.cp_mode = CpMode::ring;
  EXPECT_NO_THROW(plan_validate(p, {10}, lim));
}

}  // namespace
}  // namespace flexsp

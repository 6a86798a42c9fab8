// Plans: validation names every kind of violation; encoding round-trips; the static and
// plans are valid, cover every sequence once and respect the memory bound.
#include <gtest/gtest.h>

#include "lib/plan/plan.h"
#include "lib/util/error.h"

namespace flexsp {
namespace {

std::string error_of(const Plan& p, const std::vector<int64_t>& len, const PlanLimits& lim) {
  try {
    plan_validate(p, len, lim);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Plan, ValidationCatchesEveryViolation) {
  const std::vector<int64_t> len = {100, 50, 20};
  const PlanLimits lim{4, 2, 8, 0};
  Plan ok{{PlanMicroBatch{{{0, 2, {0}}, {2, 1, {1, 2}}, {3, 1, {}}}}}};
  EXPECT_EQ(error_of(ok, len, lim), "");
  Plan gap{{PlanMicroBatch{{{0, 2, {0, 1, 2}}, {3, 1, {}}}}}};
  EXPECT_NE(error_of(gap, len, lim).find("expected a group starting at rank 2"), std::string::npos);
  Plan misaligned{{PlanMicroBatch{{{0, 1, {0}}, {1, 2, {1, 2}}, {3, 1, {}}}}}};
  EXPECT_NE(error_of(misaligned, len, lim).find("not aligned"), std::string::npos);
  Plan three{{PlanMicroBatch{{{0, 3, {0, 1, 2}}, {3, 1, {}}}}}};
  EXPECT_NE(error_of(three, len, lim).find("power of two"), std::string::npos);
  Plan twice{{PlanMicroBatch{{{0, 2, {0, 1}}, {2, 2, {1, 2}}}}}};
  EXPECT_NE(error_of(twice, len, lim).find("assigned twice"), std::string::npos);
  Plan missing{{PlanMicroBatch{{{0, 2, {0}}, {2, 2, {1}}}}}};
  EXPECT_NE(error_of(missing, len, lim).find("sequence 2 is not assigned"), std::string::npos);
  Plan span{{PlanMicroBatch{{{0, 4, {0, 1, 2}}}}}};
  EXPECT_EQ(error_of(span, len, lim), "");  // d = 4 > 2 ranks per node may span nodes
  EXPECT_NE(error_of(span, len, {4, 8, 8, 0}), "x");
  EXPECT_NE(error_of(ok, len, {4, 2, 3, 0}).find("does not divide the 3 attention heads"), std::string::npos);
  EXPECT_NE(error_of(ok, len, {4, 2, 8, 0, 40}).find("exceed the memory"), std::string::npos);
  Plan short_cover{{PlanMicroBatch{{{0, 2, {0, 1, 2}}}}}};
  EXPECT_NE(error_of(short_cover, len, lim).find("covers ranks [0, 2) of 4"), std::string::npos);
  // A rank block of 2 starting at rank 2 with 3 ranks per node crosses nodes 0 and 1.
  EXPECT_NE(error_of(ok, len, {4, 2, 8, 3, 0}).find("kv heads"), std::string::npos);
  EXPECT_TRUE(sp_group_runnable(8, 2, 4));
  EXPECT_TRUE(sp_group_runnable(8, 4, 2));
  EXPECT_FALSE(sp_group_runnable(12, 3, 4));
  EXPECT_FALSE(sp_group_runnable(8, 2, 3));
  Plan cross{{PlanMicroBatch{{{0, 2, {0}}, {2, 2, {1, 2}}}}}};
  EXPECT_NE(error_of(cross, len, {4, 3, 8, 0}).find("span two nodes"), std::string::npos);
}

TEST(Plan, EncodeDecodeRoundTrip) {
  Plan p{{PlanMicroBatch{{{0, 2, {3, 1}}, {2, 1, {}}, {3, 1, {0, 2}}}},
          PlanMicroBatch{{{0, 4, {4}}}, true}},
         12.5};
  const Plan q = plan_decode(plan_encode(p));
  EXPECT_FALSE(q.micro_batches[0].offload);
  EXPECT_TRUE(q.micro_batches[1].offload);
  EXPECT_EQ(plan_encode(q), plan_encode(p));
  EXPECT_EQ(q.predicted_ms, 12.5);
  EXPECT_EQ(q.micro_batches[0].groups[2].seqs, (std::vector<int32_t>{0, 2}));
  auto flat = plan_encode(p);
  flat.pop_back();
  EXPECT_THROW(plan_decode(flat), Error);
}

TEST(Plan, StaticPlansAreValid) {
  std::vector<int64_t> len;
  for (int i = 0; i < 40; ++i) len.push_back(2 + (i * 53) % 257);
  for (int world : {1, 2, 4, 8}) {
    for (int d = 1; d <= world; d *= 2) {
      for (int64_t E : {0, 300}) {
        const Plan p = plan_static(len, world, d, E);
        EXPECT_NO_THROW(plan_validate(p, len, {world, world, 8, 0, E}));
        for (const auto& mb : p.micro_batches)
          for (const auto& g : mb.groups) EXPECT_EQ(g.size, d);
        if (E == 0) {
          EXPECT_EQ(p.micro_batches.size(), 1u);
        }
      }
    }
  }
  EXPECT_THROW(plan_static({500}, 2, 1, 100), Error);  // does not fit anywhere
  EXPECT_THROW(plan_static(len, 4, 3, 0), Error);      // not a power of two
  EXPECT_NO_THROW(plan_validate(plan_static({}, 4, 2, 0), {}, {4, 4, 8, 0}));  // empty batch
}

}  // namespace
}  // namespace flexsp

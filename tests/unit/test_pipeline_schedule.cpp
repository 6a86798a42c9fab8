// Pipeline schedules and the layer split (lib/runtime/pipeline_schedule.h).
#include <gtest/gtest.h>

#include <numeric>

#include "lib/runtime/pipeline_schedule.h"
#include "lib/util/error.h"

namespace flexsp {
namespace {

// Simulates every stage's schedule with blocking receives: each stage runs its next step
// once its input is there (a forward needs the previous stage's forward of the unit, a
// backward the next stage's backward and, within a micro-batch, the later chunk's).
// Returns false on a deadlock.
bool runs_to_completion(int stages, int mbs, int chunks) {
  std::vector<std::vector<PipeStep>> s;
  for (int i = 0; i < stages; ++i) s.push_back(pipeline_schedule(stages, i, mbs, chunks));
  const int units = mbs * chunks;
  std::vector<std::vector<bool>> fdone(stages, std::vector<bool>(units)), bdone = fdone;
  std::vector<size_t> at(stages, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int i = 0; i < stages; ++i) {
      if (at[i] == s[i].size()) continue;
      const PipeStep p = s[i][at[i]];
      const int u = p.unit;
      bool ready;
      if (p.forward) {
        ready = (i == 0 || fdone[i - 1][u]) && (u % chunks == 0 || fdone[i][u - 1]);
      } else {
        ready = fdone[i][u] && (i == stages - 1 || bdone[i + 1][u]) &&
                (u % chunks == chunks - 1 || bdone[i][u + 1]);
      }
      if (!ready) continue;
      (p.forward ? fdone : bdone)[i][u] = true;
      ++at[i];
      moved = true;
    }
  }
  for (int i = 0; i < stages; ++i)
    if (at[i] != s[i].size()) return false;
  return true;
}

TEST(PipelineSchedule, OneFOneBPhases) {
  // Stage 0 of 4, 6 micro-batches: 3 warm-up forwards, then F B alternately, then 3 B.
  const std::vector<PipeStep> s = pipeline_schedule(4, 0, 6, 1);
  ASSERT_EQ(s.size(), 12u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s[i].forward);
  EXPECT_TRUE(s[3].forward);
  EXPECT_FALSE(s[4].forward);
  EXPECT_EQ(s[4].unit, 0);
  for (size_t i = 9; i < 12; ++i) EXPECT_FALSE(s[i].forward);
  EXPECT_EQ(pipeline_in_flight(4, 0, 6, 1), 4);
  EXPECT_EQ(pipeline_in_flight(4, 3, 6, 1), 1);
  EXPECT_EQ(pipeline_in_flight(4, 0, 2, 1), 2);  // fewer micro-batches than stages
}

TEST(PipelineSchedule, EveryUnitOnceAndNoDeadlock) {
  for (int stages : {1, 2, 3, 4})
    for (int mbs : {0, 1, 2, 5, 9})
      for (int chunks : {1, 2, 4}) {
        for (int st = 0; st < stages; ++st) {
          std::vector<int> f(mbs * chunks), b(mbs * chunks);
          for (const PipeStep& p : pipeline_schedule(stages, st, mbs, chunks))
            ++(p.forward ? f : b)[p.unit];
          for (int u = 0; u < mbs * chunks; ++u) EXPECT_TRUE(f[u] == 1 && b[u] == 1);
        }
        EXPECT_TRUE(runs_to_completion(stages, mbs, chunks)) << stages << " " << mbs << " " << chunks;
      }
}

TEST(PipelineSchedule, LayerSplit) {
  EXPECT_EQ(pipeline_layers(4, 2, {}, 1.0), (std::vector<int>{2, 2}));
  EXPECT_EQ(pipeline_layers(4, 4, {}, 1.0), (std::vector<int>{1, 1, 1, 1}));
  // The embedding and the head weigh on the end stages.
  EXPECT_EQ(pipeline_layers(10, 4, {}, 1.0), (std::vector<int>{2, 3, 3, 2}));
  for (int L = 1; L <= 12; ++L)
    for (int P = 1; P <= L; ++P) {
      const std::vector<int> s = pipeline_layers(L, P, {}, 1.5);
      EXPECT_EQ(std::accumulate(s.begin(), s.end(), 0), L);
      for (int n : s) EXPECT_GE(n, 1);
    }
  EXPECT_EQ(pipeline_layers(4, 2, {3, 1}, 1.0), (std::vector<int>{3, 1}));
  EXPECT_THROW(pipeline_layers(2, 4, {}, 1.0), Error);
  EXPECT_THROW(pipeline_layers(4, 2, {2, 1}, 1.0), Error);
  EXPECT_THROW(pipeline_layers(4, 2, {4}, 1.0), Error);
  EXPECT_THROW(pipeline_layers(4, 2, {4, 0}, 1.0), Error);
  EXPECT_EQ(pipeline_describe({2, 2}), "stage 0: layers 0-1 (+embedding), stage 1: layers 2-3 (+head)");
}

}  // namespace
}  // namespace flexsp

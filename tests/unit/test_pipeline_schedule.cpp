// Pipeline schedules and the layer split (lib/plan/pipeline_schedule.h), Seq1F1B's
// chunk cuts (lib/plan/seq_chunk_cuts.h) and the runtime cut by them (lib/runtime/seq_chunks.h).
#include <gtest/gtest.h>

#include <numeric>

#include "lib/plan/pipeline_schedule.h"
#include "lib/plan/seq_chunk_cuts.h"
#include "lib/runtime/seq_chunks.h"
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
  EXPECT_EQ(pipeline_layers(4, 2, {}, 1.0, 1.0), (std::vector<int>{2, 2}));
  EXPECT_EQ(pipeline_layers(4, 4, {}, 1.0, 1.0), (std::vector<int>{1, 1, 1, 1}));
  // The embedding and the head weigh on the end stages.
  EXPECT_EQ(pipeline_layers(10, 4, {}, 1.0, 1.0), (std::vector<int>{2, 3, 3, 2}));
  EXPECT_EQ(pipeline_layers(8, 4, {}, 0.0, 0.1), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(pipeline_layers(7, 3, {}, 0.0, 2.0), (std::vector<int>{3, 3, 1}));
  for (int L = 1; L <= 12; ++L)
    for (int P = 1; P <= L; ++P) {
      const std::vector<int> s = pipeline_layers(L, P, {}, 1.5, 0.5);
      EXPECT_EQ(std::accumulate(s.begin(), s.end(), 0), L);
      for (int n : s) EXPECT_GE(n, 1);
    }
  EXPECT_EQ(pipeline_layers(4, 2, {3, 1}, 1.0, 1.0), (std::vector<int>{3, 1}));
  EXPECT_THROW(pipeline_layers(2, 4, {}, 1.0, 1.0), Error);
  EXPECT_THROW(pipeline_layers(4, 2, {2, 1}, 1.0, 1.0), Error);
  EXPECT_THROW(pipeline_layers(4, 2, {4}, 1.0, 1.0), Error);
  EXPECT_THROW(pipeline_layers(4, 2, {4, 0}, 1.0, 1.0), Error);
  EXPECT_EQ(pipeline_describe({2, 2}), "stage 0: layers 0-1 (+embedding), stage 1: layers 2-3 (+head)");
}

TEST(SeqChunks, BoundsBalanceCausalCost) {
  // Pure attention cost: equal t^2 shares, so later segments are shorter.
  const std::vector<int64_t> b = seq_chunk_bounds(1000, 4, 0.0, 1.0);
  ASSERT_EQ(b.size(), 5u);
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[2], 707);
  EXPECT_EQ(b[4], 1000);
  // Pure linear cost: equal lengths.
  EXPECT_EQ(seq_chunk_bounds(1000, 4, 1e9, 1.0), (std::vector<int64_t>{0, 250, 500, 750, 1000}));
  for (int64_t n : {0, 1, 2, 3, 7}) {
    const std::vector<int64_t> s = seq_chunk_bounds(n, 4, 10.0, 1.0);
    EXPECT_EQ(s.front(), 0);
    EXPECT_EQ(s.back(), n);
    for (size_t i = 1; i < s.size(); ++i) EXPECT_LE(s[i - 1], s[i]);
  }
}

TEST(SeqChunks, CutKeepsPositionsAndTargets) {
  HostMicroBatch mb;
  mb.cu_seqlens = {0, 5, 6, 9};
  for (int i = 0; i < 9; ++i) mb.ids.push_back(i + 10);
  mb.positions = {0, 1, 2, 3, 4, 0, 0, 1, 2};
  mb.targets = {11, 12, 13, 14, -1, -1, 17, 18, -1};
  std::vector<HostMicroBatch> c;
  seq_chunks_cut(mb, 3, 1.0, 1.0, c);
  ASSERT_EQ(c.size(), 3u);
  std::vector<int32_t> ids, pos, tgt;
  size_t tokens = 0;
  for (int s = 0; s < 3; ++s)  // sequence by sequence, chunk by chunk: the original order
    for (const HostMicroBatch& h : c) {
      ASSERT_EQ(h.cu_seqlens.size(), 4u);
      for (int32_t t = h.cu_seqlens[s]; t < h.cu_seqlens[s + 1]; ++t) {
        ids.push_back(h.ids[t]);
        pos.push_back(h.positions[t]);
        tgt.push_back(h.targets[t]);
      }
    }
  for (const HostMicroBatch& h : c) tokens += h.ids.size();
  EXPECT_EQ(tokens, 9u);
  EXPECT_EQ(ids, mb.ids);
  EXPECT_EQ(pos, mb.positions);
  EXPECT_EQ(tgt, mb.targets);
}

}  // namespace
}  // namespace flexsp

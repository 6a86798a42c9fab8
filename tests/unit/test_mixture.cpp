// Weighted mixtures (docs/batches.md): data.path parsing and its bad weights; the sampler's
// sources -- each source's token share within one sequence of its weight after every batch,
// epochs per source (a small source cycles, every document once per epoch), a one-source
// mixture drawing its dataset's batches, resume from a cursor, bad sources.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "lib/data/mixture.h"
#include "lib/data/sampler.h"
#include "support/error_of.h"

namespace flexsp {
namespace {

TEST(Mixture, ParseDataPath) {
  auto one = parse_data_path("a.h5, b/*.h5");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].patterns, (std::vector<std::string>{"a.h5", "b/*.h5"}));
  EXPECT_EQ(one[0].weight, 1.0);
  auto mix = parse_data_path("web.h5:0.6, code/*.h5:3e-1 ,books.h5 : 0.1");
  ASSERT_EQ(mix.size(), 3u);
  EXPECT_EQ(mix[1].patterns, (std::vector<std::string>{"code/*.h5"}));
  EXPECT_EQ(mix[1].name, "code/*.h5");
  EXPECT_DOUBLE_EQ(mix[1].weight, 0.3);
  EXPECT_EQ(mix[2].name, "books.h5");
  for (const char* w : {"0", "-1", "abc", "", "1e999", "nan", "inf", "0.5x"})
    EXPECT_EQ(error_of([&] { parse_data_path(std::string("a.h5:1, b.h5:") + w); }),
              fmt::format("data.path: weight '{}' of 'b.h5' is not a positive number", w));
  EXPECT_EQ(error_of([] { parse_data_path("a.h5:1, b.h5"); }),
            "data.path: 'b.h5' has no weight (in a mixture every source needs one: FILE:WEIGHT)");
  EXPECT_EQ(error_of([] { parse_data_path(" , "); }), "data.path: no file given (' , ')");
}

// Source 0: 40 documents of 3-300 tokens; source 1: 12 of 50-80; source 2: 100 short ones.
std::vector<int64_t> three_lengths() {
  std::vector<int64_t> l;
  for (int i = 0; i < 40; ++i) l.push_back(3 + (i * 53) % 298);
  for (int i = 0; i < 12; ++i) l.push_back(50 + (i * 7) % 31);
  for (int i = 0; i < 100; ++i) l.push_back(1 + i % 9);  // 1-token ones hold no target
  return l;
}
const std::vector<SamplerSource> kThree = {{0, 40, 0.6}, {40, 12, 0.3}, {52, 100, 0.1}};

TEST(Mixture, SharesFollowTheWeightsFromTheFirstBatch) {
  const SamplerOptions o{5, 64, 1000, 0};
  BatchSampler s(three_lengths(), o, kThree);
  ASSERT_EQ(s.num_sources(), 3);
  EXPECT_DOUBLE_EQ(s.share(0), 0.6);
  std::vector<int64_t> drawn(3, 0);
  int64_t total = 0;
  for (int step = 0; step < 300; ++step) {
    const auto batch = s.next();
    const auto t = s.source_tokens(batch);
    for (int k = 0; k < 3; ++k) drawn[k] += t[k], total += t[k];
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(drawn[k], s.cursor().sources[k].tokens);
      EXPECT_LE(std::abs(static_cast<double>(drawn[k]) - s.share(k) * static_cast<double>(total)), 65 * 1.0)
          << "step " << step << " source " << k;  // within one sequence (L + 1 tokens)
    }
  }
  // Epochs per source: the small source 1 has cycled many times, source 0 fewer.
  EXPECT_GT(s.cursor().sources[1].epoch, s.cursor().sources[0].epoch);
  EXPECT_GT(s.cursor().sources[2].epoch, 3);
}

TEST(Mixture, EverySourceDocumentOncePerEpoch) {
  BatchSampler s(three_lengths(), {11, 1000, 0, 7}, kThree);  // no cuts: one sequence per document
  std::map<int64_t, int> seen;
  while (s.cursor().sources[1].epoch < 3) {
    const int64_t before = s.cursor().sources[1].epoch;
    for (const SeqRef& q : s.next())
      if (q.doc >= 40 && q.doc < 52 && before < 3) ++seen[q.doc];
  }
  ASSERT_EQ(seen.size(), 12u);
  for (const auto& [doc, n] : seen) EXPECT_GE(n, 3) << doc;  // three epochs (a batch may start the fourth)
  for (const auto& [doc, n] : seen) EXPECT_LE(n, 4) << doc;
}

TEST(Mixture, OneSourceIsTheDatasetAndResumeIsExact) {
  const auto l = three_lengths();
  BatchSampler plain(l, {3, 32, 300, 0});
  BatchSampler one(l, {3, 32, 300, 0}, {{0, static_cast<int64_t>(l.size()), 2.5}});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(plain.next(), one.next()) << i;

  BatchSampler a(l, {3, 32, 300, 0}, kThree);
  for (int i = 0; i < 37; ++i) a.next();
  const SamplerCursor saved = a.cursor();
  std::vector<std::vector<SeqRef>> cont;
  for (int i = 0; i < 100; ++i) cont.push_back(a.next());
  BatchSampler b(l, {3, 32, 300, 0}, kThree);
  b.seek(saved);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(b.next(), cont[static_cast<size_t>(i)]) << i;
  // Another seed: another order within the sources.
  BatchSampler c(l, {4, 32, 300, 0}, kThree);
  BatchSampler d(l, {3, 32, 300, 0}, kThree);
  EXPECT_NE(c.next(), d.next());
}

TEST(Mixture, BadSources) {
  const auto l = three_lengths();
  EXPECT_EQ(error_of([&] { BatchSampler(l, {1, 32, 300, 0}, {{0, 40, 1}, {30, 10, 1}}); }),
            "data source 1: documents [30, 40) overlap another source or leave the 152 documents");
  EXPECT_EQ(error_of([&] { BatchSampler(l, {1, 32, 300, 0}, {{0, 40, 1}, {40, 0, 1}}); }),
            "data source 1 has no document with at least 2 tokens");
  EXPECT_EQ(error_of([&] { BatchSampler(l, {1, 32, 300, 0}, {{0, 40, 0}}); }),
            "data source 0: weight 0 is not a positive number");
  BatchSampler s(l, {1, 32, 300, 0}, kThree);
  EXPECT_EQ(error_of([&] { s.seek({{{0, 0, 0, 0}}}); }),
            "data cursor has 1 sources but data.path has 3 (a run resumes the mixture it was saved with)");
}

}  // namespace
}  // namespace flexsp

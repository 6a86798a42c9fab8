// The layout search (lib/planner/analysis/layout_search.h) on the GPT-7B figures: the space holds
// what the runtime supports, FlexSP's paper layout gets back the published fixed cost at
// 64 GPUs (the same pricing as flexsp plan and simulate), node shard groups cut the
// priced ZeRO traffic, checkpointing costs compute, caps that do not bind are dropped,
// and the ranking is by tokens/s.
#include <gtest/gtest.h>

#include <random>

#include "lib/planner/analysis/layout_search.h"
#include "lib/util/error.h"

namespace flexsp {
namespace {

SearchSetup setup64() {
  SearchSetup s;
  ModelSection ms;
  ms.preset = "7b";
  s.model = resolve_model_config(ms, {}, 32000);
  const CostModel cm = cost_model_default();
  s.fabric = sim_fabric(cm, 8, 0, 0);
  s.fixed = sim_fixed_split(s.model, cm, 8, s.fabric, 64);
  s.cost = sim_scale_fabric(cm, s.fabric);
  s.gpus = 64;
  s.max_seq_len = 32769;
  s.batch.seed = 3;
  s.batch.max_seq_len = 32768;
  s.batch.batch_seqs = 128;
  s.steps = 1;
  return s;
}

std::vector<int64_t> docs() {
  std::mt19937_64 g(5);
  std::lognormal_distribution<double> d(7.5, 1.2);
  std::vector<int64_t> v(2000);
  for (int64_t& x : v) x = std::max<int64_t>(2, static_cast<int64_t>(d(g)));
  return v;
}

// tp 1, no checkpointing, no caps, and a 1M-token piece: one piece needs a group wider
// than the 32 heads (so the rings are priced).
void setup_1m(SearchSetup& s, std::vector<int64_t>& d) {
  s.tp = {1};
  s.checkpoint = {false};
  s.micro_batch_tokens = {0};
  s.max_seq_len = 1048577;
  d.push_back(1048577);
  s.batch.batch_seqs = 0;
  s.batch.batch_tokens = 1500000;
  s.batch.max_seq_len = 1048576;
}

TEST(LayoutSearch, SpaceAndPaperLayout) {
  const SearchSetup s = setup64();
  // pp 1: tp 1, 2, 4, 8 x (stage 0; 1 and 2 with two groups each; 3 with four) x ckpt x 3
  // caps; pp 2 and 4, each with 1f1b and seq1f1b x4, without caps; x 2 cp modes.
  EXPECT_EQ(search_space(s).size(), 2u * (4 * 9 * 2 * 3 + 4 * 4 * 9 * 2));
  SearchSetup narrow = s;
  narrow.pp = {1};
  narrow.cp_mode = {CpMode::ulysses};
  EXPECT_EQ(search_space(narrow).size(), 4u * 9 * 2 * 3);
  // auto is not priced where ulysses holds every piece (the same plans).
  SearchLayout au = search_paper_layout();
  au.cp_mode = CpMode::automatic;
  EXPECT_TRUE(search_evaluate(s, au, docs()).redundant);
  const SearchResult paper = search_evaluate(s, search_paper_layout(), docs());
  ASSERT_TRUE(paper.rejected.empty()) << paper.rejected;
  EXPECT_NEAR(paper.fixed_ms, 629.36, 1e-6);
  EXPECT_DOUBLE_EQ(paper.sync_ms, 0);
  SearchLayout node = search_paper_layout();
  node.param_group = "node";
  const SearchResult n = search_evaluate(s, node, docs());
  EXPECT_LT(n.fixed_ms, 0.5 * paper.fixed_ms);  // gathers inside a node
  EXPECT_GT(n.sync_ms, 0);                      // the updated pieces gathered across nodes
  SearchLayout ck = search_paper_layout();
  ck.checkpoint = true;
  const SearchResult c = search_evaluate(s, ck, docs());
  EXPECT_GT(c.step_ms, paper.step_ms);  // the repeated forward
  EXPECT_GT(c.tokens_per_rank, 5 * paper.tokens_per_rank);
  SearchLayout cap = search_paper_layout();
  cap.micro_batch_tokens = 1 << 30;
  EXPECT_TRUE(search_evaluate(s, cap, docs()).redundant);
}

TEST(LayoutSearch, RanksByTokensPerSecond) {
  SearchSetup s = setup64();
  s.tp = {1, 2};
  s.micro_batch_tokens = {0};
  s.mem_per_gpu_gb = 40;
  const std::vector<SearchResult> r = search_layouts(s, docs());
  bool rejected_seen = false;
  for (size_t i = 0; i < r.size(); ++i) {
    if (!r[i].rejected.empty()) {
      rejected_seen = true;
      continue;
    }
    EXPECT_FALSE(rejected_seen) << "a ranked layout after a rejected one";
    EXPECT_TRUE(i == 0 || r[i - 1].priced_only.empty() || !r[i].priced_only.empty()) << "runnable after priced only";
    if (i > 0 && r[i - 1].rejected.empty() && r[i - 1].priced_only.empty() == r[i].priced_only.empty()) {
      EXPECT_GE(r[i - 1].tokens_per_s, r[i].tokens_per_s);
    }
    EXPECT_LE(r[i].peak_gb, 40.0 + 1e-9) << r[i].layout.name();
  }
  EXPECT_TRUE(rejected_seen);  // ZeRO-0 of 7B does not fit 40 GB
  EXPECT_FALSE(search_why(r[0], r[1]).empty());
}

TEST(LayoutSearch, PipelinesAndRingsAreSearched) {
  SearchSetup s = setup64();
  s.zero = {3};
  std::vector<int64_t> d = docs();
  setup_1m(s, d);
  const std::vector<SearchResult> r = search_layouts(s, d);
  bool ring_ranked = false;
  for (const SearchResult& x : r) {
    if (!x.rejected.empty()) {
      // ulysses cannot hold the 1M piece (pipelines: pp + chunks - 1 chunks in flight on
      // the first stage): refused as train refuses it.
      if (x.layout.cp_mode == CpMode::ulysses) {
        EXPECT_NE(x.rejected.find("the longest sequence, 1048577 tokens"), std::string::npos) << x.rejected;
      }
      if (x.layout.pipeline.pp > 1 && x.layout.cp_mode == CpMode::ulysses) {
        EXPECT_NE(x.rejected.find("(first stage)"), std::string::npos) << x.rejected;
      }
      continue;
    }
    // Without a pipeline ulysses cannot hold 1M here (32 heads x ~17K tokens per GPU).
    EXPECT_NE(x.layout.cp_mode, CpMode::ulysses) << x.layout.name();
    ring_ranked = ring_ranked || (x.layout.cp_mode != CpMode::ulysses && x.priced_only.empty());
  }
  EXPECT_TRUE(ring_ranked);
  ASSERT_TRUE(search_runnable_ranked(r.front()));
  const std::string ini = search_ini(s, r.front(), "");
  for (const char* key : {"cp_mode = ", "pp_size = ", "pp_schedule = ", "seq_chunks = "})
    EXPECT_NE(ini.find(key), std::string::npos) << key << " in\n" << ini;

  // Up to 32K tokens: the pipelines (ZeRO-2 within a stage) fit and are ranked.
  SearchSetup p = setup64();
  p.tp = {1};
  p.zero = {2};
  p.checkpoint = {false};
  p.micro_batch_tokens = {0};
  bool pp_ranked = false;
  for (const SearchResult& x : search_layouts(p, docs()))
    if (x.layout.pipeline.pp > 1 && search_runnable_ranked(x)) {
      EXPECT_GT(x.bubble, 0);
      pp_ranked = true;
    }
  EXPECT_TRUE(pp_ranked);
}

// What train refuses (lib/train/session.cpp) is priced only: never the best, never an INI.
TEST(LayoutSearch, OnlyRunnableLayoutsAreChosen) {
  SearchLayout l = search_paper_layout();
  EXPECT_TRUE(layout_runnable_now(l));  // ZeRO-3 without a pipeline
  l.pipeline = {4, PpSchedule::seq1f1b, 4, 0};
  std::string why;
  EXPECT_TRUE(layout_runnable_now(l, &why)) << why;  // and with one (units gathered per pipeline unit)
  l.zero = 2;
  EXPECT_TRUE(layout_runnable_now(l));
  for (CpMode cp : {CpMode::ring, CpMode::usp}) {
    l.cp_mode = cp;
    EXPECT_TRUE(layout_runnable_now(l, &why)) << why;  // Seq1F1B stages run rings too
    EXPECT_EQ(layout_cp_mode_run(l), cp);
    PipelineLayout one_f_one_b = l.pipeline;
    one_f_one_b.schedule = PpSchedule::one_f_one_b;
    one_f_one_b.seq_chunks = 1;
    SearchLayout ring = l;
    ring.pipeline = one_f_one_b;
    EXPECT_TRUE(layout_runnable_now(ring)) << cp_mode_name(cp);  // 1F1B stages run rings
  }
  l.cp_mode = CpMode::automatic;  // Seq1F1B runs ring groups: auto stays auto
  EXPECT_TRUE(layout_runnable_now(l));
  EXPECT_EQ(layout_cp_mode_run(l), CpMode::automatic);
  l.pipeline.schedule = PpSchedule::one_f_one_b;
  l.pipeline.seq_chunks = 1;
  EXPECT_EQ(layout_cp_mode_run(l), CpMode::automatic);
  l.pipeline = {};
  EXPECT_EQ(layout_cp_mode_run(l), CpMode::automatic);

  SearchSetup s = setup64();
  s.tp = {1};
  s.zero = {2, 3};
  s.checkpoint = {false};
  s.micro_batch_tokens = {0};
  const std::vector<SearchResult> r = search_layouts(s, docs());
  int tier = 0;  // runnable ranked, priced only, rejected: in that order
  bool pp_zero3_ranked = false;
  for (const SearchResult& x : r) {
    const int t = !x.rejected.empty() ? 2 : x.priced_only.empty() ? 0 : 1;
    EXPECT_GE(t, tier) << x.layout.name();
    tier = t;
    EXPECT_EQ(x.priced_only.empty(), layout_runnable_now(x.layout)) << x.layout.name();
    if (t == 0 && x.layout.pipeline.pp > 1 && x.layout.zero == 3) pp_zero3_ranked = true;
    if (t == 1) {
      EXPECT_THROW(search_ini(s, x, ""), Error);
    }
  }
  EXPECT_TRUE(pp_zero3_ranked);
  ASSERT_TRUE(search_runnable_ranked(r.front()));
  EXPECT_NO_THROW(search_ini(s, r.front(), ""));
}

}  // namespace
}  // namespace flexsp

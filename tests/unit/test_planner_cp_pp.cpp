// The planner's ring/USP groups and pipeline: the point-to-point keys of the
// cost model, a ring group's price (overlap, not sum), groups wider than the heads only for
// sequences that need them, the pipeline's bubble and memory, and the memory model's
// refusal with pp and a ring (never of small valid layouts).
#include <gtest/gtest.h>

#include <algorithm>

#include "lib/model/model_config.h"
#include "lib/planner/analysis/lower_bound.h"
#include "lib/planner/mb/mb_solver.h"
#include "lib/planner/cost/memory_model.h"
#include "lib/planner/cost/pipeline.h"
#include "lib/planner/planner.h"
#include "lib/util/error.h"

using namespace flexsp;

namespace {

ModelConfig model(const char* name, int kv_heads = 0) {
  ModelSection ms;
  ms.preset = name;
  ms.kv_heads = kv_heads;
  return resolve_model_config(ms, kv_heads > 0 ? std::set<std::string>{"model.kv_heads"} : std::set<std::string>{},
                              32000);
}

PlannerContext ctx7b(int world, CpMode cp, int kv_heads = 8) {
  PlannerContext c;
  c.world = world;
  c.ranks_per_node = 8;
  c.model = model("7b", kv_heads);
  c.zero = {3, world, world, world};
  c.cp_mode = cp;
  c.time_limit_ms = 0;  // greedy: deterministic and quick
  return c;
}

}  // namespace

TEST(PlannerP2p, KeysParseRoundTripAndErrors) {
  const CostModel d = cost_model_default();
  EXPECT_DOUBLE_EQ(d.bw_p2p_intra_gbs, 119.5);  // the all-to-all figure at d = 2
  EXPECT_DOUBLE_EQ(d.bw_p2p_inter_gbs, 10.3);   // at d = 16
  const CostModel cm = cost_model_parse("bw_p2p_intra = 40\nbw_p2p_inter = 3.5\n", "p.ini");
  EXPECT_DOUBLE_EQ(cost_p2p_bandwidth_gbs(cm, false), 40);
  EXPECT_DOUBLE_EQ(cost_p2p_bandwidth_gbs(cm, true), 3.5);
  const CostModel back = cost_model_parse(cost_model_to_ini(cm, "t"), "x.ini");
  EXPECT_DOUBLE_EQ(back.bw_p2p_intra_gbs, 40);
  EXPECT_DOUBLE_EQ(back.bw_p2p_inter_gbs, 3.5);
  try {
    cost_model_parse("bw_p2p_inter = 0\n", "p.ini");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("p.ini:1: bw_p2p_inter"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cost_model_parse("bw_p2p_intra = fast\n", "p.ini"), Error);
  // k, v forward; k, v, dk, dv backward: 3 x 2 x kv_heads x head_dim x 2 bytes per layer.
  const ModelConfig m = model("7b", 8);
  EXPECT_DOUBLE_EQ(cost_ring_bytes_per_token(d, m, 8), 3.0 * 32 * 2 * 8 * 128 * 2);
  EXPECT_DOUBLE_EQ(cost_pp_bytes_per_token(d, m), 2.0 * 4096 * 2);
}

TEST(PlannerRing, GroupPriceOverlapsTransferWithAttention) {
  const PlanCosts c = plan_costs(ctx7b(64, CpMode::automatic));
  EXPECT_EQ(c.ulysses_max, 32);  // 32 heads
  EXPECT_EQ(c.max_size(), 64);   // a ring of 2 Ulysses groups of 32
  EXPECT_EQ(c.ring_r[6], 2);
  const int64_t s = 1 << 20;
  const double x = static_cast<double>(s);
  const double attn = c.a1 * x * x / 64, rest = c.a2 * x / 64 + c.comm_ms_per_token[6] * x;
  const double step = attn / 2, transfer = c.ring_ms_per_token[6] * x;
  EXPECT_NEAR(c.seq_ms(s, 64), rest + step + std::max(step, transfer), 1e-6 * c.seq_ms(s, 64));
  EXPECT_LT(c.seq_ms(s, 64), rest + step + step + transfer);  // overlapped, not summed
  // Ulysses-only contexts keep every group a Ulysses group.
  const PlanCosts u = plan_costs(ctx7b(64, CpMode::ulysses));
  EXPECT_EQ(u.max_size(), 32);
  for (int r : u.ring_r) EXPECT_EQ(r, 1);
  // ring mode: every group of 2+ is a ring (u = 1): no all-to-all.
  const PlanCosts r = plan_costs(ctx7b(64, CpMode::ring));
  EXPECT_EQ(r.ring_r[3], 8);
  EXPECT_DOUBLE_EQ(r.comm_ms_per_token[3], 0);
}

TEST(PlannerRing, WideGroupsOnlyForSequencesThatNeedThem) {
  // 7B with 8 kv heads on 64 GPUs: heads-wide groups of 32 hold ~546K tokens; 1M does not fit.
  PlannerContext ctx = ctx7b(64, CpMode::automatic);
  EXPECT_FALSE(ctx.ring_only_when_needed);  // the default: any sequence may go on a ring
  ctx.ring_only_when_needed = true;         // --ring-groups needed
  const PlanCosts c = plan_costs(ctx);
  const int64_t heads_wide = c.tokens_per_rank * c.ulysses_max;
  std::vector<int64_t> len{1048577, 775201, heads_wide - 1000, 300000, 200000};
  for (int i = 0; i < 200; ++i) len.push_back(500 + 97 * i);
  const Plan p = plan_step(ctx, len);
  int wide = 0;
  for (const PlanMicroBatch& mb : p.micro_batches)
    for (const PlanGroup& g : mb.groups) {
      if (g.size <= c.ulysses_max) continue;
      ++wide;
      for (int32_t s : g.seqs) EXPECT_GT(len[s], heads_wide) << "sequence " << s << " on a group of " << g.size;
    }
  EXPECT_GE(wide, 2);  // the 1M and 775K pieces
  // Without the rule the planner may put any sequence on a ring, and predicts no worse.
  PlannerContext any = ctx;
  any.ring_only_when_needed = false;
  EXPECT_EQ(plan_costs(any).wide_from, 0);
  PlanStats st_needed, st_any;
  plan_step(ctx, len, &st_needed);
  plan_step(any, len, &st_any);
  EXPECT_LE(st_any.predicted_ms, st_needed.predicted_ms * (1 + 1e-9));
  // The same batch under ulysses is infeasible, with the mode in the error.
  ctx.cp_mode = CpMode::ulysses;
  try {
    plan_step(ctx, len);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.cp_mode ulysses"), std::string::npos) << e.what();
  }
}

TEST(PlannerRing, WorldWidePiecesStackInAMicroBatchOfTheirOwn) {
  // The 32 longest pieces of a 1M long-tail step (7B, 8 kv heads, 64 GPUs, auto): the
  // three of 280-335K lose nothing on the 64-GPU ring (their least rank-time is there), the
  // 110-130K pieces take 24-27% more rank-time on it than on 8 GPUs. The chunk DP put 280K
  // beside four of those on the ring (50.06 s, 1.074x the memory-aware bound); the three
  // stacked alone, the rest split on its own: 48.25 s.
  const std::vector<int64_t> len{335003, 293443, 280769, 133413, 123143, 112430, 111348, 104642,
                                 99471,  90817,  75274,  72083,  67973,  65044,  60710,  60510,
                                 60165,  58467,  53869,  44097,  39272,  36892,  35921,  34940,
                                 34446,  33688,  33614,  32732,  32262,  30810,  30719,  30180};
  const PlannerContext ctx = ctx7b(64, CpMode::automatic);
  const PlanCosts c = plan_costs(ctx);
  for (int64_t l : {len[0], len[1], len[2]}) {
    double wmin = 1e300;
    for (int d : c.sizes)
      if (c.holds(l, d)) wmin = std::min(wmin, d * c.seq_ms(l, d));
    EXPECT_LE(64 * c.seq_ms(l, 64), wmin * 1.01) << l;
  }
  PlanStats st;
  const Plan p = plan_step(ctx, len, &st);
  int found = 0;
  for (const PlanMicroBatch& mb : p.micro_batches) {
    std::vector<int32_t> seqs;
    for (const PlanGroup& g : mb.groups) seqs.insert(seqs.end(), g.seqs.begin(), g.seqs.end());
    if (std::find(seqs.begin(), seqs.end(), 0) == seqs.end()) continue;
    ++found;
    std::sort(seqs.begin(), seqs.end());
    EXPECT_EQ(seqs, (std::vector<int32_t>{0, 1, 2}));
  }
  EXPECT_EQ(found, 1);
  EXPECT_LT(st.predicted_ms, 1.04 * plan_memory_lower_bound(c, len).ms);
  // The 20 longest: the stacked split wins the greedy comparison (47.06 s after the local
  // search), the other split's plan is improved too and kept (46.69 s).
  const std::vector<int64_t> first20(len.begin(), len.begin() + 20);
  PlanStats st20;
  plan_step(ctx, first20, &st20);
  EXPECT_LT(st20.predicted_ms, 46700);
}

TEST(PlannerPipeline, BubbleAndMicroBatchCount) {
  PipelineLayout p{4, PpSchedule::one_f_one_b, 1, 0};
  EXPECT_DOUBLE_EQ(pp_bubble_factor(p, 4), 7.0 / 4);
  EXPECT_DOUBLE_EQ(pp_in_flight(p, 1), 4);
  PipelineLayout q{4, PpSchedule::seq1f1b, 4, 0};
  EXPECT_DOUBLE_EQ(pp_bubble_factor(q, 4), 19.0 / 16);
  EXPECT_DOUBLE_EQ(pp_in_flight(q, 0.5), 3.5);  // pp + chunks - 1 chunks of at most half
  EXPECT_DOUBLE_EQ(pp_in_flight({8, PpSchedule::seq1f1b, 2, 0}, 1), 9);
  EXPECT_EQ(pp_stage_layers(p, 30), 8);
  EXPECT_THROW(pp_schedule_parse("gpipe"), Error);
  EXPECT_THROW(pp_check({64, PpSchedule::one_f_one_b, 1, 0}, 32), Error);

  // One stage's plan: 16 devices of 64 GPUs at pp 4; the step is the pipeline's price.
  PlannerContext ctx = ctx7b(64, CpMode::ulysses, 32);
  ctx.zero = {3, 16, 16, 16};
  ctx.pipeline = p;
  std::vector<int64_t> len;
  for (int i = 0; i < 400; ++i) len.push_back(1000 + (i * 7919) % 30000);
  PlanStats st;
  const Plan plan = plan_step(ctx, len, &st);
  const PlanCosts c = plan_costs(ctx);
  EXPECT_EQ(c.world, 16);
  EXPECT_DOUBLE_EQ(c.stage_share, 0.25);
  int64_t tokens = 0;
  for (int64_t l : len) tokens += l;
  double sum = 0;
  for (const PlanMicroBatch& mb : plan.micro_batches) {
    EXPECT_EQ(static_cast<int>(mb.groups.back().first + mb.groups.back().size), 16);
    double span = 0;
    for (const PlanGroup& g : mb.groups) {
      double t = 0;
      for (int32_t s : g.seqs) t += c.seq_ms(len[s], g.size);
      span = std::max(span, t);
    }
    sum += c.fixed_ms + span;
  }
  const int m = static_cast<int>(plan.micro_batches.size());
  // The step is the simulated pipeline (plan_pipeline_ms), near the closed form (which takes
  // micro-batches as equal, the stages as the slowest, the boundary traffic as serial).
  EXPECT_NEAR(st.predicted_ms, plan_predict_ms(c, plan, len), 1e-9 * st.predicted_ms);
  EXPECT_NEAR(st.predicted_ms, c.step_ms(sum, m, tokens), 0.1 * st.predicted_ms)
      << st.predicted_ms << " " << c.step_ms(sum, m, tokens);
  EXPECT_GE(m, 2);  // the bubble makes the planner cut more micro-batches than memory needs
  EXPECT_LE(st.lower_bound_ms, st.predicted_ms * (1 + 1e-9));
  // Without the bubble: the closed form's work term (the stage's share and the p2p).
  EXPECT_NEAR(st.unpipelined_ms, c.step_ms(sum, m, tokens) / pp_bubble_factor(c.pipeline, m),
              1e-9 * st.unpipelined_ms);
  EXPECT_LT(st.unpipelined_ms, st.predicted_ms);
  PlannerContext flat = ctx;
  flat.pipeline = {};
  PlanStats st_flat;
  plan_step(flat, len, &st_flat);
  EXPECT_DOUBLE_EQ(st_flat.unpipelined_ms, st_flat.predicted_ms);
}

TEST(PlannerPipeline, MemoryOfAStageAndTheRefusal) {
  const CostModel cm = cost_model_default();
  const ModelConfig m = model("7b");
  const MemoryEstimate whole = memory_estimate(cm, m, {1, 64, {3, 64, 64, 64}});
  const MemoryEstimate st4 = memory_estimate(cm, m, {1, 16, {3, 16, 16, 16}}, {{4, PpSchedule::one_f_one_b, 1, 0}, 0});
  // A stage's 8 layers (embedding and head both counted): about a quarter of the states x 4 peers.
  EXPECT_LT(st4.params, whole.params * 4 * 0.4);
  // ZeRO 3 in a stage: the scratch pieces and the unit slots, as without a pipeline (the
  // units are gathered per pipeline unit; no whole weights and gradients).
  EXPECT_DOUBLE_EQ(st4.buffers, memory_estimate(cm, m, {1, 16, {3, 16, 16, 16}}).buffers);
  // 1F1B keeps 4 micro-batches of a quarter of the layers: the whole model's activations.
  EXPECT_NEAR(st4.activation_per_token, whole.activation_per_token, 1e-6 * whole.activation_per_token);
  // Seq1F1B x 4: 7 chunks of at most 1/sqrt(4) of a micro-batch (no longest given), and per
  // layer and token of each the chunk attention's k, v, dk, dv (32 kv heads x 128) and
  // statistics (32 floats), plus one prefix's k, v, dk, dv.
  const MemoryEstimate seq = memory_estimate(cm, m, {1, 16, {3, 16, 16, 16}}, {{4, PpSchedule::seq1f1b, 4, 0}, 0});
  const double kv = 4.0 * 32 * 128 * cm.bytes_per_element;
  EXPECT_NEAR(seq.activation_per_token, whole.activation_per_token / 4 * 3.5 + 3.5 * 8 * (kv + 4 * 32) + kv,
              1e-6 * whole.activation_per_token);
  // A ring block: 4 x kv heads x head_dim x bytes per token.
  const MemoryEstimate ring = memory_estimate(cm, m, {1, 64, {3, 64, 64, 64}}, {{}, 32});
  EXPECT_DOUBLE_EQ(ring.activation_per_token - whole.activation_per_token, 4.0 * 32 * 128 * 2);

  // Small valid layouts pass: a tiny model on 4 ranks at pp 2 and pp 4, a ring of 4.
  PlannerContext t;
  t.world = 4;
  t.ranks_per_node = 2;
  t.model = model("tiny");
  t.zero = {1, 2, 2, 2};
  t.max_seq_len = 257;
  t.pipeline = {2, PpSchedule::one_f_one_b, 1, 0};
  EXPECT_NO_THROW(memory_require_fit(t));
  t.pipeline = {2, PpSchedule::seq1f1b, 2, 1};
  t.zero = {3, 2, 2, 2};
  EXPECT_NO_THROW(memory_require_fit(t));
  t.pipeline = {};
  t.zero = {0, 1, 1, 1};
  t.cp_mode = CpMode::ring;
  EXPECT_NO_THROW(memory_require_fit(t));
  // 7B at pp 4 that does not fit says so, naming the pipeline.
  PlannerContext big = ctx7b(64, CpMode::ulysses, 32);
  big.zero = {0, 1, 1, 1};
  big.mem_per_gpu_gb = 25;  // a stage of 8 layers with embedding and head: ~30 GB of ZeRO-0 states
  big.max_seq_len = 4097;
  big.pipeline = {4, PpSchedule::one_f_one_b, 1, 0};
  try {
    memory_require_fit(big);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pp 4 1f1b (first stage)"), std::string::npos) << e.what();
  }
  // Wide rings: under auto a 1M piece fits on 64 GPUs where ulysses refuses it.
  PlannerContext wide = ctx7b(64, CpMode::automatic);
  wide.max_seq_len = 1048577;
  EXPECT_NO_THROW(memory_require_fit(wide));
  wide.cp_mode = CpMode::ulysses;
  EXPECT_THROW(memory_require_fit(wide), Error);
}

TEST(PlannerFill, IdleDevicesTakeTheLastMicroBatch) {
  // 4 devices, 2 per node, E = 100 tokens: a 150-token piece needs a group of 2 and
  // leaves 2 devices idle; the short sequences of the last micro-batch fit there.
  PlanCosts c;
  c.world = 4, c.ranks_per_node = 2, c.tokens_per_rank = 100;
  c.fixed_ms = 10, c.a1 = 1e-3, c.a2 = 1;
  c.sizes = {1, 2, 4};
  c.comm_ms_per_token = {0, 0.2, 0.5};
  const std::vector<int64_t> len{150, 20, 20};
  std::vector<std::vector<int32_t>> mbs{{0}, {1, 2}};
  std::vector<MbPlan> plans{mb_greedy(c, len, mbs[0]), mb_greedy(c, len, mbs[1])};
  ASSERT_TRUE(plans[0].ok && plans[1].ok);
  const double before = plans[0].makespan_ms;
  EXPECT_TRUE(mb_fill(c, len, mbs, plans, 64));
  ASSERT_EQ(mbs.size(), 1u);  // the last micro-batch emptied: one fixed cost less
  EXPECT_LE(plans[0].makespan_ms, before * (1 + 1e-9));
  std::vector<int32_t> all = mbs[0];
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int32_t>{0, 1, 2}));
  // Nothing idle: nothing moves.
  std::vector<std::vector<int32_t>> full{{0, 1}, {2}};
  std::vector<MbPlan> fp{mb_greedy(c, len, full[0]), mb_greedy(c, len, full[1])};
  bool idle = false;
  for (const PlanGroup& g : fp[0].groups) idle = idle || g.seqs.empty();
  if (!idle) {
    EXPECT_FALSE(mb_fill(c, len, full, fp, 64));
  }
}

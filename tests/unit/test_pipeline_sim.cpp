// The pipeline's simulated step and slot replay (lib/planner/cost/pipeline.h): equal
// units on equal stages give the closed form exactly; a heavier stage, uneven units, the
// sends and Seq1F1B's reversed backwards give the makespans worked out by hand below; the
// slots follow the runtime's free list and growth rule; a plan's units are priced per
// chunk (fixed and per-sequence costs paid by every chunk).
#include <gtest/gtest.h>

#include <vector>

#include "lib/model/model_config.h"
#include "lib/planner/cost/memory_model.h"
#include "lib/planner/cost/pipeline.h"
#include "lib/planner/planner.h"

using namespace flexsp;

namespace {

// Units of the same forward f and backward b on every stage.
double equal_units(int P, int M, int C, double f, double b) {
  const size_t U = static_cast<size_t>(M) * C;
  return pp_simulate_ms(P, M, C, std::vector<double>(U * P, f), std::vector<double>(U * P, b),
                        std::vector<double>(U, 0));
}

}  // namespace

TEST(PipelineSim, EqualUnitsGiveTheClosedForm) {
  for (int P : {2, 3, 4, 8})
    for (int M : {1, 2, 3, 8, 13})
      for (int C : {1, 2, 4}) {
        PipelineLayout p{P, C == 1 ? PpSchedule::one_f_one_b : PpSchedule::seq1f1b, C, 0};
        const double work = M * C * 3.0;  // f 1 + b 2 per unit
        EXPECT_NEAR(equal_units(P, M, C, 1, 2), work * pp_bubble_factor(p, M), 1e-9)
            << "pp " << P << " m " << M << " chunks " << C;
      }
  EXPECT_DOUBLE_EQ(equal_units(1, 4, 1, 1, 2), 12);
}

TEST(PipelineSim, HeavierLastStage) {
  // pp 2, 2 micro-batches; stage 0 f 1 b 2, stage 1 f 2 b 4. Stage 0: F0 F1 B0 B1, stage 1:
  // F0 B0 F1 B1. s0 F0 0-1, F1 1-2; s1 F0 1-3, B0 3-7, F1 7-9, B1 9-13; s0 B0 7-9, B1 13-15.
  const std::vector<double> f = {1, 1, 2, 2}, b = {2, 2, 4, 4};
  EXPECT_DOUBLE_EQ(pp_simulate_ms(2, 2, 1, f, b, {0, 0}), 15);
  // The closed form on the slower stage says (2 + 1) x 6 = 18.
}

TEST(PipelineSim, UnevenUnits) {
  // pp 2, units (f 1, b 2) then (f 2, b 4) on both stages. s0 F0 0-1, F1 1-3; s1 F0 1-2,
  // B0 2-4, F1 3-> 4-6, B1 6-10; s0 B0 4-6, B1 10-14. The closed form: 9 x 3 / 2 = 13.5.
  const std::vector<double> f = {1, 2, 1, 2}, b = {2, 4, 2, 4};
  EXPECT_DOUBLE_EQ(pp_simulate_ms(2, 2, 1, f, b, {0, 0}), 14);
}

TEST(PipelineSim, SendsDelayTheNeighbourNotTheSender) {
  // pp 2, one unit f 1 b 2, 0.5 each way: s0 F 0-1; s1 F 1.5-2.5, B 2.5-4.5; s0 B 5-7.
  EXPECT_DOUBLE_EQ(pp_simulate_ms(2, 1, 1, {1, 1}, {2, 2}, {0.5}), 7);
  // Two units: s0 F0 0-1, F1 1-2 (its send does not hold it), B0 5-7, B1 ... s1 F0 1.5-2.5,
  // B0 2.5-4.5, F1 4.5-5.5, B1 5.5-7.5; s0 B1 8-10.
  EXPECT_DOUBLE_EQ(pp_simulate_ms(2, 2, 1, {1, 1, 1, 1}, {2, 2, 2, 2}, {0.5, 0.5}), 10);
}

TEST(PipelineSim, Seq1f1bChunksBackwardInReverse) {
  // pp 2, one micro-batch of 2 chunks: chunk 0 f 2 b 4, chunk 1 f 1 b 2. Stage 0: F0 F1 B1
  // B0; stage 1: F0 F1 B1 B0. s0 F0 0-2, F1 2-3; s1 F0 2-4, F1 4-5, B1 5-7, B0 7-11;
  // s0 B1 7-9, B0 11-15.
  EXPECT_DOUBLE_EQ(pp_simulate_ms(2, 1, 2, {2, 1, 2, 1}, {4, 2, 4, 2}, {0, 0}), 15);
}

TEST(PipelineSlots, ReplayOfTheFreeList) {
  // pp 2, stage 0, 2 micro-batches x 2 chunks: F0 F1 F2 B1 F3 B0 B3 B2, 3 slots, the free
  // list hands out slot 0, 1, 2, then slot 1 again for unit 3. Slots start at 250 tokens.
  std::vector<int64_t> caps;
  EXPECT_EQ(pp_slot_tokens(2, 0, 2, 2, {600, 400, 500, 300}, 250, 1000, &caps), 600 + 400 + 500);
  EXPECT_EQ(caps, (std::vector<int64_t>{600, 400, 500}));
  // Slots are kept: smaller chunks the next step change nothing, a larger one grows its slot.
  EXPECT_EQ(pp_slot_tokens(2, 0, 2, 2, {100, 100, 100, 700}, 250, 1000, &caps), 600 + 700 + 500);
  // A unit empty on this rank takes no slot: unit 2 gets slot 1, unit 3 slot 2 (250 grown
  // by a quarter: 312).
  caps.clear();
  EXPECT_EQ(pp_slot_tokens(2, 0, 2, 2, {600, 0, 500, 300}, 250, 1000, &caps), 600 + 500 + 312);
  // Growth: at least a quarter more, at most max_cap.
  caps.clear();
  EXPECT_EQ(pp_slot_tokens(2, 1, 1, 1, {450}, 400, 1000, &caps), 500);
  caps.clear();
  EXPECT_EQ(pp_slot_tokens(2, 1, 1, 1, {450}, 400, 480, &caps), 480);
  // 1F1B sized for the micro-batch from the start: pp - stage slots of it.
  caps.clear();
  EXPECT_EQ(pp_slot_tokens(4, 0, 8, 1, std::vector<int64_t>(8, 900), 1000, 1000, &caps), 4000);
}

namespace {

// A stage of one device, compute a2 = 1 ms per token, fixed and per-sequence costs as given.
PlanCosts one_device(int pp, int chunks, double fixed, double per_seq) {
  PlanCosts c;
  c.sizes = {1};
  c.comm_ms_per_token = {0};
  c.ring_r = {1};
  c.ring_ms_per_token = {0};
  c.a2 = 1;
  c.fixed_ms = fixed;
  c.per_sequence_ms = per_seq;
  c.tokens_per_rank = 1 << 20;
  c.pipeline = {pp, chunks > 1 ? PpSchedule::seq1f1b : PpSchedule::one_f_one_b, chunks, 0};
  c.stage_share = 1.0 / pp;
  c.stage_attn.assign(static_cast<size_t>(pp), 1.0 / pp);
  c.stage_rest.assign(static_cast<size_t>(pp), 1.0 / pp);
  c.chunk_lin = 1;
  c.chunk_att = 1e-12;  // next to no attention: chunks cut by tokens
  return c;
}

}  // namespace

TEST(PipelinePrice, PlanUnitsPerChunk) {
  std::vector<int64_t> len(4, 60);
  std::vector<std::vector<PlanGroup>> groups;
  for (int32_t i = 0; i < 4; ++i) groups.push_back({PlanGroup{0, 1, {i}}});
  std::vector<const std::vector<PlanGroup>*> mbs;
  for (const auto& g : groups) mbs.push_back(&g);
  // 1F1B, pp 2: each micro-batch costs (fixed 6 + 60) / 2 = 33 per stage; 5 x 33.
  PlanCosts c = one_device(2, 1, 6, 0);
  EXPECT_NEAR(plan_pipeline_ms(c, mbs, len), 5 * 33, 1e-9);
  EXPECT_NEAR(plan_pipeline_ms(c, mbs, len), c.step_ms(4 * 66, 4, 240), 1e-9);  // the closed form
  // Seq1F1B x 2: chunks of 30 tokens, each paying fixed 6 and per-sequence 1: (6 + 30 + 1)
  // / 2 = 18.5 per chunk and stage, 9 chunk-slots of the step (8 units + pp - 1).
  c = one_device(2, 2, 6, 1);
  EXPECT_NEAR(plan_pipeline_ms(c, mbs, len), 9 * 18.5, 1e-9);
  // A last stage carrying more (the head): 40% / 60% of the rest. Stage 1's 8 chunks of
  // 0.6 x 37 bound the step from below.
  c.stage_rest = {0.4, 0.6};
  EXPECT_GT(plan_pipeline_ms(c, mbs, len), 8 * 0.6 * 37);
  // No pipeline: the sum of fixed + makespan.
  c = one_device(1, 1, 6, 0);
  EXPECT_NEAR(plan_pipeline_ms(c, mbs, len), 4 * 66, 1e-9);
}

TEST(PipelinePrice, UnitTokensPerDevice) {
  // Seq1F1B x 2, chunks cut by tokens: sequence 0 (30) alone on a device, 1 (40) and 2 (42)
  // on a group of 2. Chunk j: 15 tokens on the first; 20 + 21 = 41 padded to 42 over 2
  // devices = 21 on the group (tp 2: padded to 44, 22).
  const PlanCosts c = one_device(2, 2, 0, 0);
  Plan p;
  p.micro_batches.push_back({{PlanGroup{0, 1, {0}}, PlanGroup{2, 2, {1, 2}}}});
  const std::vector<int64_t> len = {30, 40, 42};
  EXPECT_EQ(plan_unit_tokens(c, p, len, 1), (std::vector<int64_t>{21, 21}));
  EXPECT_EQ(plan_unit_tokens(c, p, len, 2), (std::vector<int64_t>{22, 22}));
  // 1F1B: the micro-batch's tokens per device.
  EXPECT_EQ(plan_unit_tokens(one_device(2, 1, 0, 0), p, len, 1), (std::vector<int64_t>{41}));
}

TEST(PipelinePrice, PlannedStepsAboveTheirBound) {
  // 7B on 32 GPUs at pp 4 (8 devices a stage), long-tailed lengths: the planned step is the
  // simulated one, never under the lower bound, and an uneven split of the layers costs more
  // (the default splits 8 layers a stage, the head's 0.65 of a layer on the last).
  ModelSection ms;
  ms.preset = "7b";
  PlannerContext ctx;
  ctx.world = 32;
  ctx.ranks_per_node = 8;
  ctx.model = resolve_model_config(ms, {}, 32000);
  ctx.zero = {3, 8, 8, 8};
  ctx.time_limit_ms = 0;
  std::vector<int64_t> len;
  for (int i = 0; i < 200; ++i) len.push_back(500 + (i * 7919) % (i % 10 == 0 ? 30000 : 4000));
  for (int chunks : {1, 2, 4}) {
    ctx.pipeline = {4, chunks > 1 ? PpSchedule::seq1f1b : PpSchedule::one_f_one_b, chunks, 0};
    ctx.pp_layers.clear();
    PlanStats st;
    const Plan p = plan_step(ctx, len, &st);
    const PlanCosts c = plan_costs(ctx);
    EXPECT_NEAR(st.predicted_ms, plan_predict_ms(c, p, len), 1e-9 * st.predicted_ms);
    EXPECT_LE(st.lower_bound_ms, st.predicted_ms) << chunks;
    ctx.pp_layers = {11, 7, 7, 7};
    ctx.pipeline.stage_layers = 11;
    const PlanCosts uneven = plan_costs(ctx);
    // Slower, though less than the heavy stage's 11 / 8.65 layers: the lighter stages'
    // bubble is shorter (the closed form would take the heavy stage's share everywhere).
    const double slow = plan_predict_ms(uneven, p, len);
    EXPECT_GT(slow, st.predicted_ms * 1.02) << chunks;
    EXPECT_LT(slow, st.predicted_ms * 11 / 8.65) << chunks;
  }
}

TEST(PipelineSlots, MemoryModelTakesTheReplayedInFlight) {
  // The bound's in_flight given explicitly is the bound; the activations of a smaller one
  // (the replay's) shrink with it, states and buffers alike.
  ModelSection ms;
  ms.preset = "small";
  const ModelConfig m = resolve_model_config(ms, {}, 257);
  const CostModel cm = cost_model_default();
  MemoryExtras x;
  x.pipeline = {2, PpSchedule::seq1f1b, 2, 0};
  x.longest = 1025;
  const MemoryEstimate bound = memory_estimate(cm, m, {1, 1, {}}, x);
  x.in_flight = pp_in_flight(x.pipeline, pp_chunk_share(x.pipeline, m, x.longest));
  const MemoryEstimate same = memory_estimate(cm, m, {1, 1, {}}, x);
  EXPECT_DOUBLE_EQ(same.activation_per_token, bound.activation_per_token);
  const double full = x.in_flight;
  x.in_flight = full / 2;
  const MemoryEstimate half = memory_estimate(cm, m, {1, 1, {}}, x);
  EXPECT_DOUBLE_EQ(half.fixed(), bound.fixed());
  EXPECT_LT(half.activation_per_token, 0.6 * bound.activation_per_token);
  EXPECT_GT(half.activation_per_token, 0.5 * bound.activation_per_token);  // the shared prefix stays
}

// The per-step cost (predicted against measured): the cost-model keys flexsp
// profile writes for it (bw_zero_intra, bw_zero_inter, optimizer_ns_per_param: round
// trip, old files without them, bad values) and the one sync definition that simulate, the
// search and the trainer's predicted step share (lib/planner/cost/sim_price.h), against
// hand-computed figures.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lib/model/model_config.h"
#include "lib/planner/cost/sim_price.h"
#include "lib/planner/planner.h"
#include "lib/util/error.h"

using namespace flexsp;

namespace {

ModelConfig preset(const char* name) { return resolve_model_config(ModelSection{.preset = name}, {}, 256); }

// A profile-like file: fp32 states, measured rings and optimizer, no ZeRO traffic in fixed.
CostModel profiled() {
  return cost_model_parse(
      "model = small\na1_ms = 3e-4\na2_ms = 0.4\nfixed_ms = 20\nbw_intra_2 = 3\nbw_inter_4 = 2.5\n"
      "param_bytes = 4\ngrad_bytes = 4\noptim_bytes = 8\nbytes_per_element = 4\n"
      "bw_zero_intra = 0.8\nbw_zero_inter = 0.5\noptimizer_ns_per_param = 6\n",
      "cm.ini");
}

// The small model on 4 ranks, 2 per node, as the accuracy test trains it.
PlannerContext ctx_small(const CostModel& cm, int zero) {
  PlannerContext c;
  c.world = 4;
  c.ranks_per_node = 2;
  c.model = preset("small");
  c.cost = cm;
  c.mem_per_gpu_gb = 2;
  c.max_seq_len = 1025;
  c.time_limit_ms = 0;
  c.use_milp = false;
  c.zero = {zero, zero >= 3 ? 4 : 1, zero >= 2 ? 4 : 1, zero >= 1 ? 4 : 1};
  return c;
}

std::string error_of(const std::string& text) {
  try {
    cost_model_parse(text, "cm.ini");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(StepCost, KeysRoundTripAndOldFileDefaults) {
  const CostModel d = cost_model_default();
  EXPECT_EQ(d.bw_zero_intra_gbs, 0);  // not measured: the all-to-all table's figure
  EXPECT_EQ(d.bw_zero_inter_gbs, 0);
  EXPECT_EQ(d.optimizer_ns_per_param, 0);  // not priced
  const CostModel cm = profiled();
  EXPECT_DOUBLE_EQ(cm.bw_zero_intra_gbs, 0.8);
  EXPECT_DOUBLE_EQ(cm.bw_zero_inter_gbs, 0.5);
  EXPECT_DOUBLE_EQ(cm.optimizer_ns_per_param, 6);
  const CostModel back = cost_model_parse(cost_model_to_ini(cm, "header"), "back.ini");
  EXPECT_DOUBLE_EQ(back.bw_zero_intra_gbs, 0.8);
  EXPECT_DOUBLE_EQ(back.bw_zero_inter_gbs, 0.5);
  EXPECT_DOUBLE_EQ(back.optimizer_ns_per_param, 6);
  // A file written before the keys existed loads with the defaults.
  const CostModel old = cost_model_parse("[cost_model]\nmodel = small\na1_ms = 3e-4\nfixed_ms = 20\n", "old.ini");
  EXPECT_EQ(old.bw_zero_intra_gbs, 0);
  EXPECT_EQ(old.bw_zero_inter_gbs, 0);
  EXPECT_EQ(old.optimizer_ns_per_param, 0);
  // 0 is allowed (not measured); negative or not a number is an error naming file, line, key.
  EXPECT_EQ(cost_model_parse("optimizer_ns_per_param = 0\n", "cm.ini").optimizer_ns_per_param, 0);
  EXPECT_NE(error_of("a1_ms = 1\noptimizer_ns_per_param = -1\n").find("cm.ini:2: optimizer_ns_per_param"),
            std::string::npos);
  EXPECT_NE(error_of("bw_zero_inter = fast\n").find("cm.ini:1: bw_zero_inter"), std::string::npos);
  EXPECT_NE(error_of("bw_zero_intra = -2\n").find("cm.ini:1: bw_zero_intra"), std::string::npos);
}

TEST(StepCost, FabricTakesMeasuredRingsElseTheAllToAllTable) {
  const CostModel cm = profiled();
  const SimFabric f = sim_fabric(cm, 2, 0, 0);
  EXPECT_DOUBLE_EQ(f.intra_gbs, 0.8);
  EXPECT_DOUBLE_EQ(f.inter_gbs, 0.5);
  CostModel old = cm;
  old.bw_zero_intra_gbs = old.bw_zero_inter_gbs = 0;
  const SimFabric g = sim_fabric(old, 2, 0, 0);
  EXPECT_DOUBLE_EQ(g.intra_gbs, 3);    // the node-wide all-to-all group (d = 2)
  EXPECT_DOUBLE_EQ(g.inter_gbs, 2.5);  // the largest listed inter-node group
}

TEST(StepCost, SyncHandComputed) {
  const CostModel cm = profiled();
  const PlannerContext c0 = ctx_small(cm, 0);
  const double P = static_cast<double>(model_num_params(c0.model));
  // ZeRO 0 on 4 ranks over 2 nodes: an all-reduce of the fp32 gradient, 2 x 3/4 of it per
  // rank at the inter-node ring bandwidth, and AdamW over every parameter.
  const double ar = 2 * 0.75 * 4 * P / 0.5e9 * 1e3, opt = 6e-6 * P;
  EXPECT_NEAR(sim_step_pricing(c0).sync_ms, ar + opt, 1e-9 * (ar + opt));
  // ZeRO 1 over the 4 ranks: the same all-reduce plus the all-gather of the parameters;
  // the optimizer over a quarter.
  const double ag = 0.75 * 4 * P / 0.5e9 * 1e3;
  EXPECT_NEAR(sim_step_pricing(ctx_small(cm, 1)).sync_ms, ar + ag + opt / 4, 1e-9 * ar);
  // Without the keys: the traffic at the all-to-all table's figure, no optimizer (the
  // figures simulate and the search gave before the keys existed).
  CostModel old = cm;
  old.bw_zero_intra_gbs = old.bw_zero_inter_gbs = old.optimizer_ns_per_param = 0;
  const double ar_old = 2 * 0.75 * 4 * P / 2.5e9 * 1e3;
  EXPECT_NEAR(sim_step_pricing(ctx_small(old, 0)).sync_ms, ar_old, 1e-9 * ar_old);
  // One rank: no traffic, the optimizer alone.
  PlannerContext one = ctx_small(cm, 0);
  one.world = one.ranks_per_node = 1;
  EXPECT_NEAR(sim_step_pricing(one).sync_ms, opt, 1e-9 * opt);
}

TEST(StepCost, TrainerStepIsThePlanPlusTheSync) {
  const std::vector<int64_t> len{1000, 900, 700, 512, 300, 200, 120, 64, 33};
  // ZeRO 0 with a profile's file: fixed(G) is the file's fixed cost, so the step is the
  // planner's prediction plus the sync.
  const PlannerContext c0 = ctx_small(profiled(), 0);
  PlanStats st;
  const Plan p0 = plan_step(c0, len, &st);
  const SimStepPricing s0 = sim_step_pricing(c0);
  EXPECT_DOUBLE_EQ(s0.costs.fixed_ms, 20);
  EXPECT_NEAR(sim_step_ms(s0, p0, len), p0.predicted_ms + s0.sync_ms, 1e-9 * p0.predicted_ms);
  // ZeRO 3: each micro-batch also pays its gathers (2 all-gathers of the fp32 parameters)
  // and the gradient reduce-scatter over the 4 ranks, as the search prices it.
  const PlannerContext c3 = ctx_small(profiled(), 3);
  const Plan p3 = plan_step(c3, len, &st);
  const SimStepPricing s3 = sim_step_pricing(c3);
  const double P = static_cast<double>(model_num_params(c3.model));
  const double per_mb = 3 * 0.75 * 4 * P / 0.5e9 * 1e3;
  EXPECT_NEAR(s3.costs.fixed_ms, 20 + per_mb, 1e-9 * per_mb);
  const double mbs = static_cast<double>(p3.micro_batches.size());
  EXPECT_NEAR(sim_step_ms(s3, p3, len), p3.predicted_ms + mbs * per_mb + s3.sync_ms, 1e-6 * p3.predicted_ms);
  EXPECT_NEAR(s3.sync_ms, 6e-6 * P / 4, 1e-9 * P);  // grads and states over the world: the optimizer only
  // The trainer plans at the same fixed(G) (sim_plan_context): its plan is the one priced.
  const PlannerContext t3 = sim_plan_context(c3);
  EXPECT_NEAR(t3.cost.fixed_ms, s3.costs.fixed_ms, 1e-12 * per_mb);
  const Plan q3 = plan_step(t3, len, &st);
  EXPECT_NEAR(sim_step_ms(s3, q3, len), q3.predicted_ms + s3.sync_ms, 1e-6 * q3.predicted_ms);
}

TEST(StepCost, CheckpointingScalesComputeByFourThirds) {
  // plan_costs: the repeated forward costs a third more compute (a1, a2, per_sequence),
  // for the planner, simulate, the search and the trainer alike; fixed is not compute.
  CostModel cm = profiled();
  cm.per_sequence_ms = 0.3;
  PlannerContext c = ctx_small(cm, 0);
  const PlanCosts off = plan_costs(c);
  c.model.checkpoint_activations = true;
  const PlanCosts on = plan_costs(c);
  EXPECT_NEAR(on.a1, off.a1 * 4 / 3, 1e-12 * off.a1);
  EXPECT_NEAR(on.a2, off.a2 * 4 / 3, 1e-12 * off.a2);
  EXPECT_NEAR(on.per_sequence_ms, off.per_sequence_ms * 4 / 3, 1e-12);
  EXPECT_EQ(on.fixed_ms, off.fixed_ms);
}

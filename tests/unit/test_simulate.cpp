// flexsp simulate's model (lib/planner/analysis/simulate.h): ring and ZeRO traffic against hand-
// computed figures, the fixed-cost split (no double counting), the fabric overrides, the
// per-node-count aggregation and efficiencies, and sanity of whole scaling runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "lib/model/model_config.h"
#include "lib/planner/analysis/simulate.h"
#include "lib/planner/cost/sim_price.h"
#include "lib/util/error.h"

using namespace flexsp;

namespace {

ModelConfig preset(const char* name) { return resolve_model_config(ModelSection{.preset = name}, {}, 0); }

// 20000 document lengths from 2 to 30001 tokens, spread by a multiplicative hash.
std::vector<int64_t> spread_lengths(int64_t salt) {
  std::vector<int64_t> v(20000);
  for (int64_t i = 0; i < 20000; ++i) v[i] = 2 + (i * 7919 + salt) % 30000;
  return v;
}

// GPT-7B on the built-in figures, 8 GPUs per node, greedy planning (deterministic).
SimSetup setup7b(std::vector<int> nodes, int zero, double inter_override = 0) {
  SimSetup s;
  const CostModel cm = cost_model_default();
  s.model = preset("7b");
  s.gpus_per_node = 8;
  s.nodes = std::move(nodes);
  s.run.parallel.cp_mode = CpMode::ulysses;
  s.run.parallel.zero = zero;
  s.fabric = sim_fabric(cm, 8, 0, inter_override);
  s.fixed = sim_fixed_split(s.model, cm, 8, s.fabric, 64);
  s.cost = sim_scale_fabric(cm, s.fabric);
  s.run.planner.time_limit_ms = 0;
  s.run.data.max_seq_len = 32768;
  s.batch.seed = 7;
  s.batch.max_seq_len = 32768;
  s.batch.batch_seqs = 64;
  s.steps = 2;
  return s;
}

}  // namespace

TEST(SimulateRing, BytesPerGpu) {
  EXPECT_DOUBLE_EQ(sim_ring_bytes(SimCollective::all_reduce, 4, 100), 150);     // 2 x 3/4
  EXPECT_DOUBLE_EQ(sim_ring_bytes(SimCollective::reduce_scatter, 4, 100), 75);  // 3/4
  EXPECT_DOUBLE_EQ(sim_ring_bytes(SimCollective::all_gather, 8, 800), 700);     // 7/8
  EXPECT_DOUBLE_EQ(sim_ring_bytes(SimCollective::all_reduce, 1, 100), 0);
}

TEST(SimulateZero, HandComputed7b) {
  const ModelConfig m = preset("7b");
  ASSERT_EQ(model_num_params(m), 6738415616);  // LLaMA-7B, untied, vocab 32000
  const CostModel cm = cost_model_default();   // bf16 params and grads: 2 bytes each
  const double p2 = 2.0 * 6738415616;          // bytes of one bf16 copy
  // ZeRO-3 on 64 GPUs (8 nodes) at 4.9 GB/s: 2 gathers + 1 reduce-scatter of 63/64 x 2P.
  SimZeroComm z = sim_zero_comm(m, cm, 3, {64, 8, 96.5, 4.9});
  EXPECT_NEAR(z.per_micro_batch_ms, 3 * 63.0 / 64 * p2 / 4.9e9 * 1e3, 1e-6);
  EXPECT_NEAR(z.per_micro_batch_ms, 8122.197, 1e-3);
  EXPECT_EQ(z.per_step_ms, 0);
  // Stage 0 on one node of 8 at 96.5 GB/s: all-reduce 2 x 7/8 x 2P.
  z = sim_zero_comm(m, cm, 0, {8, 1, 96.5, 4.9});
  EXPECT_NEAR(z.per_step_ms, 2 * 7.0 / 8 * p2 / 96.5e9 * 1e3, 1e-6);
  EXPECT_NEAR(z.per_step_ms, 244.398, 1e-3);
  EXPECT_EQ(z.per_micro_batch_ms, 0);
  // Stage 1 adds a parameter all-gather (1.5x stage 0); stage 2 = reduce-scatter +
  // all-gather, the same bytes as an all-reduce when params and grads have one width.
  const SimCluster c{32, 4, 96.5, 4.9};
  const double s0 = sim_zero_comm(m, cm, 0, c).per_step_ms;
  EXPECT_NEAR(s0, 2 * 31.0 / 32 * p2 / 4.9e9 * 1e3, 1e-6);
  EXPECT_NEAR(sim_zero_comm(m, cm, 1, c).per_step_ms, 1.5 * s0, 1e-6);
  EXPECT_NEAR(sim_zero_comm(m, cm, 2, c).per_step_ms, s0, 1e-6);
  // Activation checkpointing re-gathers for the re-forward: 3 gathers + 1 reduce-scatter.
  ModelConfig mc = m;
  mc.checkpoint_activations = true;
  EXPECT_NEAR(sim_zero_comm(mc, cm, 3, c).per_micro_batch_ms, 4 * 31.0 / 32 * p2 / 4.9e9 * 1e3, 1e-6);
  // One GPU: nothing to reduce.
  EXPECT_EQ(sim_zero_comm(m, cm, 0, {1, 1, 96.5, 4.9}).per_step_ms, 0);
  EXPECT_THROW(sim_zero_comm(m, cm, 4, c), Error);
}

TEST(SimulateFabric, DefaultsAndOverrides) {
  const CostModel cm = cost_model_default();
  SimFabric f = sim_fabric(cm, 8, 0, 0);
  EXPECT_DOUBLE_EQ(f.intra_gbs, 96.5);  // d = 8: one whole node
  EXPECT_DOUBLE_EQ(f.inter_gbs, 4.9);   // d = 64: the largest inter-node group listed
  f = sim_fabric(cm, 8, 193, 9.8);
  EXPECT_DOUBLE_EQ(f.ref_inter_gbs, 4.9);
  const CostModel scaled = sim_scale_fabric(cm, f);
  EXPECT_DOUBLE_EQ(scaled.bw_intra_gbs.at(2), 239);
  EXPECT_DOUBLE_EQ(scaled.bw_inter_gbs.at(16), 20.6);
  EXPECT_DOUBLE_EQ(scaled.bw_inter_gbs.at(64), 9.8);
}

TEST(SimulateFixed, SplitReproducesTheReference) {
  const ModelConfig m = preset("7b");
  const CostModel cm = cost_model_default();
  const SimFabric f = sim_fabric(cm, 8, 0, 0);
  // Published: the modelled ZeRO-3 traffic at 64 GPUs (8122 ms) exceeds 629.36 ms, so it
  // is all traffic, of which 7.75% shows.
  const SimFixedSplit s = sim_fixed_split(m, cm, 8, f, 64);
  EXPECT_NEAR(s.exposure, 629.36 / 8122.197, 1e-6);
  EXPECT_DOUBLE_EQ(s.residual_ms, 0);
  // No reference: all of it is overhead, traffic comes on top in full.
  const SimFixedSplit none = sim_fixed_split(m, cm, 8, f, 0);
  EXPECT_DOUBLE_EQ(none.residual_ms, 629.36);
  EXPECT_DOUBLE_EQ(none.exposure, 1);
  // Traffic below the fixed cost: fully exposed, the rest is residual.
  CostModel big = cm;
  big.fixed_ms = 10000;
  const SimFixedSplit r = sim_fixed_split(m, big, 8, f, 64);
  EXPECT_DOUBLE_EQ(r.exposure, 1);
  EXPECT_NEAR(r.residual_ms, 10000 - 8122.197, 1e-3);
  // Overrides change the traffic at other sizes, not the calibration (made on the
  // reference fabric).
  const SimFixedSplit o = sim_fixed_split(m, cm, 8, sim_fabric(cm, 8, 0, 49), 64);
  EXPECT_DOUBLE_EQ(o.exposure, s.exposure);
}

TEST(SimulatePoint, AggregatesAndEfficiency) {
  std::vector<SimStep> st(2);
  st[0] = {1000, 1500, 1200, 10, 4000, 4e15, 2};
  st[1] = {3000, 4500, 3000, 30, 8000, 8e15, 4};
  const SimPoint p = sim_point(1, 4, st, 1000);
  // Means per step; tokens/s = 12000 tokens / 4 s; speedups = 6 s / 4 s and 4.2 s / 4 s;
  // MFU = 12e15 FLOP / (4 s x 4 GPUs x 1000 TFLOP/s).
  const std::pair<double, double> want[] = {
      {p.flexsp_ms, 2000}, {p.static_ms, 3000},       {p.batch_adaptive_ms, 2100},
      {p.seqs, 20},        {p.tokens, 6000},          {p.micro_batches, 3},
      {p.tokens_per_s, 3000}, {p.speedup_vs_static, 1.5}, {p.speedup_vs_batch_adaptive, 1.05},
      {p.mfu, 0.75}};
  for (const auto& [got, expected] : want) EXPECT_NEAR(got, expected, 1e-12 * expected);
  SimPoint base = p;
  base.gpus = 1;
  base.tokens_per_s = 1000;
  EXPECT_DOUBLE_EQ(sim_efficiency(p, base), 0.75);  // 3000/4 per GPU vs 1000
  EXPECT_DOUBLE_EQ(sim_efficiency(p, p), 1);
}

TEST(SimulateScaling, WeakAndStrongSanity) {
  const std::vector<int64_t> docs = spread_lengths(3);
  SimSetup s = setup7b({1, 2, 4, 8}, 3);
  const std::vector<SimRow> rows = sim_scaling(s, docs);
  ASSERT_EQ(rows.size(), 4u);
  // The reference size (64 GPUs, ZeRO-3) gets the cost model's fixed cost back.
  EXPECT_NEAR(rows[3].fixed_ms, 629.36, 1e-6);
  EXPECT_EQ(rows[3].sync_ms, 0);
  // One node rings over NVLink; across nodes the traffic is slower and grows as (n-1)/n.
  EXPECT_LT(rows[0].fixed_ms, 0.1 * rows[1].fixed_ms);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GT(rows[i].fixed_ms, rows[i - 1].fixed_ms);
  // The first row: weak and strong are the same batch and the efficiency baseline.
  EXPECT_EQ(rows[0].weak.flexsp_ms, rows[0].strong.flexsp_ms);
  EXPECT_EQ(rows[0].weak.efficiency, 1);
  EXPECT_EQ(rows[0].strong.efficiency, 1);
  for (size_t i = 0; i < rows.size(); ++i) {
    const SimRow& r = rows[i];
    EXPECT_EQ(r.gpus, 8 * r.nodes);
    EXPECT_NEAR(r.weak.seqs, 64.0 * r.nodes, 1e-9);  // weak: the batch grows with the GPUs
    EXPECT_NEAR(r.strong.seqs, 64.0, 1e-9);
    for (const SimPoint* p : {&r.weak, &r.strong}) {
      EXPECT_GT(p->speedup_vs_static, 0);
      EXPECT_GT(p->mfu, 0);
      EXPECT_LT(p->mfu, 1);
      EXPECT_NEAR(p->tokens_per_s, p->tokens / (p->flexsp_ms / 1e3), 1e-6 * p->tokens_per_s);
      EXPECT_LE(p->efficiency, 1 + 1e-9);  // more traffic per GPU, never better than the base
    }
    if (i > 0) {
      EXPECT_GT(r.weak.tokens_per_s, rows[i - 1].weak.tokens_per_s);
    }
  }
  // Leaving the node costs: both efficiencies drop below 1 at 2 nodes.
  EXPECT_LT(rows[1].weak.efficiency, 0.99);
  EXPECT_LT(rows[1].strong.efficiency, 0.99);
}

TEST(SimulateScaling, FreeNetworkStrongScalesDown) {
  // With no gradient traffic to pay (a very fast fabric, the fixed cost pure overhead),
  // a fixed batch on more GPUs never takes longer.
  const std::vector<int64_t> docs = spread_lengths(5);
  SimSetup s = setup7b({1, 2, 4}, 3, 1e9);
  s.fabric.intra_gbs = 1e9;
  s.cost = sim_scale_fabric(cost_model_default(), s.fabric);
  s.fixed = {20, 1};
  s.weak = false;
  const std::vector<SimRow> rows = sim_scaling(s, docs);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_NEAR(rows[i].fixed_ms, 20, 1e-3);
    EXPECT_LT(rows[i].strong.flexsp_ms, rows[i - 1].strong.flexsp_ms);
  }
}

// A node count that cannot hold the batch is a row saying why; the sweep goes on, and
// fails only when no node count fits.
TEST(SimulateScaling, InfeasibleRowsSayWhyAndTheSweepGoesOn) {
  const std::vector<int64_t> docs(100, 200000);
  SimSetup s = setup7b({1, 2, 4}, 3);
  s.run.data.max_seq_len = 199999;  // the longest piece: 200000
  s.batch.max_seq_len = 200000;
  s.batch.batch_seqs = 8;
  const std::vector<SimRow> rows = sim_scaling(s, docs);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_NE(rows[0].infeasible.find("200000"), std::string::npos) << rows[0].infeasible;
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_TRUE(rows[i].infeasible.empty()) << rows[i].infeasible;
    EXPECT_GT(rows[i].weak.flexsp_ms, 0);
  }
  EXPECT_DOUBLE_EQ(rows[1].weak.efficiency, 1.0);  // the first computed row is the base
  s.nodes = {1};
  try {
    sim_scaling(s, docs);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no node count holds the batch; 1 node (8 GPUs)"), std::string::npos)
        << e.what();
  }
}

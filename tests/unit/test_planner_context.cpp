// The planner context's one builder (lib/planner/context.h): a config's layout keys become
// the context (modes, the pipeline, ZeRO's shard groups over a stage's data-parallel peers,
// the longest piece, the caps), bad layouts fail with the key named, and the same config
// gives the same context whichever cost model is passed in (the overload that loads it
// from planner.cost_model builds the same).
#include <gtest/gtest.h>

#include <string>

#include "lib/config/config.h"
#include "lib/planner/planner.h"
#include "lib/util/error.h"

namespace flexsp {
namespace {

ModelConfig model7b() {
  ModelSection ms;
  ms.preset = "7b";
  return resolve_model_config(ms, {}, 32000);
}

void expect_error(const RunConfig& cfg, int world, const std::string& part) {
  try {
    planner_context(cfg, model7b(), cost_model_default(), world, 8);
    ADD_FAILURE() << "no error, expected one naming " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(PlannerContextBuilder, ConfigKeysBecomeTheContext) {
  RunConfig cfg;
  cfg.parallel.sp_mode = SpMode::batch_adaptive;
  cfg.parallel.tp_size = 2;
  cfg.parallel.cp_mode = CpMode::usp;
  cfg.parallel.pp_size = 2;
  cfg.parallel.pp_schedule = PpSchedule::seq1f1b;
  cfg.parallel.seq_chunks = 4;
  cfg.parallel.pp_layers = "20,12";
  cfg.parallel.zero = 3;
  cfg.parallel.zero_param_group = ZeroGroup::node;
  cfg.parallel.zero_grad_group = ZeroGroup::world;
  cfg.parallel.zero_optim_group = ZeroGroup::world;
  cfg.planner.mem_per_gpu_gb = 40;
  cfg.planner.time_limit_ms = 250;
  cfg.data.max_seq_len = 8191;
  cfg.train.micro_batch_tokens = 4096;
  const PlannerContext c = planner_context(cfg, model7b(), cost_model_default(), 64, 8);
  EXPECT_EQ(c.mode, SpMode::batch_adaptive);
  EXPECT_EQ(c.tp, 2);
  EXPECT_EQ(c.cp_mode, CpMode::usp);
  EXPECT_EQ(c.pipeline.pp, 2);
  EXPECT_EQ(c.pipeline.schedule, PpSchedule::seq1f1b);
  EXPECT_EQ(c.pipeline.seq_chunks, 4);
  EXPECT_EQ(c.pipeline.stage_layers, 20);
  EXPECT_EQ(c.pp_layers, (std::vector<int>{20, 12}));
  // A stage of 32 ranks, 16 of each tp index; a node holds 4 of them.
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.zero.param_group, 4);
  EXPECT_EQ(c.zero.grad_group, 16);
  EXPECT_EQ(c.zero.optim_group, 16);
  EXPECT_EQ(c.mem_per_gpu_gb, 40);
  EXPECT_EQ(c.time_limit_ms, 250);
  EXPECT_EQ(c.max_seq_len, 8192);
  EXPECT_EQ(c.max_tokens_per_rank, 4096);
  EXPECT_EQ(c.static_sp_size, 0);  // not set: static takes the smallest size that holds the longest
  EXPECT_EQ(c.world, 64);
  EXPECT_EQ(c.ranks_per_node, 8);
}

TEST(PlannerContextBuilder, LowerZeroStagesShardOnlyWhatTheyShard) {
  RunConfig cfg;
  cfg.parallel.zero = 1;
  const PlannerContext c = planner_context(cfg, model7b(), cost_model_default(), 64, 8);
  EXPECT_EQ(c.zero.param_group, 1);
  EXPECT_EQ(c.zero.grad_group, 1);
  EXPECT_EQ(c.zero.optim_group, 64);
  cfg.parallel.zero = 0;
  EXPECT_EQ(planner_context(cfg, model7b(), cost_model_default(), 64, 8).zero.optim_group, 1);
}

TEST(PlannerContextBuilder, TheCostModelOverloadBuildsTheSame) {
  RunConfig cfg;
  cfg.parallel.zero = 2;
  const PlannerContext a = planner_context(cfg, model7b(), 64, 8);
  const PlannerContext b = planner_context(cfg, model7b(), cost_model_default(), 64, 8);
  EXPECT_EQ(a.zero.grad_group, b.zero.grad_group);
  EXPECT_EQ(a.cost.fixed_ms, b.cost.fixed_ms);
  EXPECT_EQ(plan_costs(a).tokens_per_rank, plan_costs(b).tokens_per_rank);
}

TEST(PlannerContextBuilder, BadLayoutsNameTheKey) {
  RunConfig cfg;
  cfg.parallel.zero = 5;
  expect_error(cfg, 64, "parallel.zero: stage must be 0-3");
  cfg = RunConfig{};
  cfg.parallel.pp_size = 3;
  expect_error(cfg, 64, "parallel.pp_size: 3 stages of tp 1 do not divide the 64 ranks");
  cfg = RunConfig{};
  cfg.parallel.tp_size = 16;
  expect_error(cfg, 64, "parallel.tp_size: 16 does not divide the 8 ranks per node");
  cfg = RunConfig{};
  cfg.planner.mem_per_gpu_gb = 0;
  expect_error(cfg, 64, "planner.mem_per_gpu_gb: must be positive");
  cfg = RunConfig{};
  cfg.planner.time_step_share = 1.5;
  expect_error(cfg, 64, "planner.time_step_share: must be in [0, 1]");
}

}  // namespace
}  // namespace flexsp

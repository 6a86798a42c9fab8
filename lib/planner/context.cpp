// The planner context's modes and its builder (context.h).
#include "lib/planner/context.h"

#include <fmt/format.h>

#include <algorithm>

#include "lib/model/offload.h"
#include "lib/model/tensor_parallel.h"
#include "lib/util/error.h"

namespace flexsp {

void planner_check(const PlannerContext& ctx) {
  FLEXSP_CHECK(ctx.world >= 1, "planner: world size {} must be positive", ctx.world);
  FLEXSP_CHECK(ctx.ranks_per_node >= 1, "planner: ranks per node {} must be positive",
               ctx.ranks_per_node);
  FLEXSP_CHECK(ctx.mem_per_gpu_gb > 0, "planner.mem_per_gpu_gb: must be positive, got {}",
               ctx.mem_per_gpu_gb);
  FLEXSP_CHECK(ctx.time_step_share >= 0 && ctx.time_step_share <= 1,
               "planner.time_step_share: must be in [0, 1], got {}", ctx.time_step_share);
  const int tp = ctx.tp, pp = ctx.pipeline.pp;
  FLEXSP_CHECK(tp >= 1 && ctx.ranks_per_node % tp == 0,
               "parallel.tp_size: {} does not divide the {} ranks per node", tp, ctx.ranks_per_node);
  tp_check(ctx.model, tp);
  pp_check(ctx.pipeline, ctx.model.layers);
  FLEXSP_CHECK(ctx.world % (tp * pp) == 0,
               "parallel.pp_size: {} stages of tp {} do not divide the {} ranks", pp, tp, ctx.world);
  FLEXSP_CHECK(ctx.zero.stage >= 0 && ctx.zero.stage <= 3, "parallel.zero: stage must be 0-3, got {}",
               ctx.zero.stage);
}

PlannerContext planner_context(const RunConfig& cfg, const ModelConfig& model, const CostModel& cost, int world,
                               int ranks_per_node) {
  const ParallelSection& p = cfg.parallel;
  PlannerContext ctx;
  ctx.mode = p.sp_mode;
  ctx.cp_mode = p.cp_mode;
  ctx.pipeline.schedule = p.pp_schedule;
  ctx.pp_layers = pp_layers_parse(p.pp_layers);
  const bool param_node = p.zero_param_group == ZeroGroup::node;
  const bool grad_node = p.zero_grad_group == ZeroGroup::node;
  const bool optim_node = p.zero_optim_group == ZeroGroup::node;

  ctx.world = world;
  ctx.ranks_per_node = ranks_per_node;
  ctx.model = model;
  ctx.cost = cost;
  ctx.mem_per_gpu_gb = cfg.planner.mem_per_gpu_gb;
  ctx.tp = p.tp_size;
  ctx.pipeline.pp = p.pp_size;
  ctx.pipeline.seq_chunks = p.seq_chunks;
  for (int l : ctx.pp_layers) ctx.pipeline.stage_layers = std::max(ctx.pipeline.stage_layers, l);
  // ZeRO shards over the data-parallel peers: the ranks of one tp index in one stage.
  const int stage = world / std::max(1, ctx.pipeline.pp), tp = std::max(1, ctx.tp);
  auto ranks = [&](bool node) { return std::min(node ? ranks_per_node : world, stage) / tp; };
  ctx.zero.stage = p.zero;
  ctx.zero.param_group = p.zero >= 3 ? ranks(param_node) : 1;
  ctx.zero.grad_group = p.zero >= 2 ? ranks(grad_node) : 1;
  ctx.zero.optim_group = p.zero >= 1 ? ranks(optim_node) : 1;
  ctx.static_sp_size = cfg.is_set("parallel.sp_size") ? p.sp_size : 0;
  ctx.max_seq_len = cfg.data.max_seq_len + 1;
  ctx.time_limit_ms = cfg.planner.time_limit_ms;
  ctx.time_step_share = cfg.planner.time_step_share;
  ctx.max_tokens_per_rank = cfg.train.micro_batch_tokens;
  // auto with a pipeline stays one decision per run (the trainer's, from the memory model):
  // a stage's units in flight would each need their own choice of layout.
  ctx.offload_choice = cfg.train.offload == Offload::automatic && ctx.pipeline.pp == 1 &&
                       LayerOffload::useful(model.layers, model.offload_ahead);
  if (ctx.offload_choice) ctx.model.offload = false;
  planner_check(ctx);
  return ctx;
}

PlannerContext planner_offload_side(const PlannerContext& ctx) {
  PlannerContext o = ctx;
  o.offload_choice = false;
  o.model.offload = true;
  return o;
}

PlannerContext planner_context(const RunConfig& cfg, const ModelConfig& model, int world, int ranks_per_node) {
  const CostModel cost = cfg.planner.cost_model.empty() ? cost_model_default() : cost_model_load(cfg.planner.cost_model);
  return planner_context(cfg, model, cost, world, ranks_per_node);
}

}  // namespace flexsp

// The planner context's modes and its builder (context.h).
#include "lib/planner/context.h"

#include <fmt/format.h>

#include <algorithm>

#include "lib/util/error.h"

namespace flexsp {

SpMode sp_mode_from_string(const std::string& s) {
  if (s == "flexsp") return SpMode::flexsp;
  if (s == "static") return SpMode::static_sp;
  if (s == "batch_adaptive") return SpMode::batch_adaptive;
  fail(fmt::format("parallel.sp_mode: unknown mode '{}' (flexsp, static, batch_adaptive)", s));
}

const char* sp_mode_name(SpMode m) {
  switch (m) {
    case SpMode::flexsp: return "flexsp";
    case SpMode::static_sp: return "static";
    case SpMode::batch_adaptive: return "batch_adaptive";
  }
  return "?";
}

PlannerContext planner_context(const RunConfig& cfg, const ModelConfig& model, int world,
                               int ranks_per_node) {
  PlannerContext ctx;
  ctx.mode = sp_mode_from_string(cfg.parallel.sp_mode);
  ctx.world = world;
  ctx.ranks_per_node = ranks_per_node;
  ctx.model = model;
  ctx.cost = cfg.planner.cost_model.empty() ? cost_model_default()
                                            : cost_model_load(cfg.planner.cost_model);
  ctx.mem_per_gpu_gb = cfg.planner.mem_per_gpu_gb;
  ctx.tp = cfg.parallel.tp_size;
  ctx.cp_mode = cp_mode_parse(cfg.parallel.cp_mode);
  ctx.pipeline.pp = cfg.parallel.pp_size;
  ctx.pipeline.schedule = pp_schedule_parse(cfg.parallel.pp_schedule);
  ctx.pipeline.seq_chunks = cfg.parallel.seq_chunks;
  ctx.pp_layers = pp_layers_parse(cfg.parallel.pp_layers);
  for (int l : ctx.pp_layers) ctx.pipeline.stage_layers = std::max(ctx.pipeline.stage_layers, l);
  // ZeRO shards over the data-parallel peers: the ranks of one tp index in one stage.
  auto ranks = [&](const std::string& group) {
    return std::min(group == "node" ? ranks_per_node : world, world / ctx.pipeline.pp) / ctx.tp;
  };
  ctx.zero.stage = cfg.parallel.zero;
  ctx.zero.param_group = cfg.parallel.zero >= 3 ? ranks(cfg.parallel.zero_param_group) : 1;
  ctx.zero.grad_group = cfg.parallel.zero >= 2 ? ranks(cfg.parallel.zero_grad_group) : 1;
  ctx.zero.optim_group = cfg.parallel.zero >= 1 ? ranks(cfg.parallel.zero_optim_group) : 1;
  ctx.static_sp_size = cfg.is_set("parallel.sp_size") ? cfg.parallel.sp_size : 0;
  ctx.max_seq_len = cfg.data.max_seq_len + 1;
  ctx.time_limit_ms = cfg.planner.time_limit_ms;
  ctx.max_tokens_per_rank = cfg.train.micro_batch_tokens;
  return ctx;
}

}  // namespace flexsp

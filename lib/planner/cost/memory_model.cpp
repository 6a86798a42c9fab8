// The per-rank memory model (memory_model.h): the runtime's ZeRO buffers, sized from the
// parameter table of the rank's tensor-parallel block.
#include "lib/planner/cost/memory_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "lib/model/llama.h"
#include "lib/model/params.h"
#include "lib/model/tensor_parallel.h"
#include "lib/plan/plan.h"
#include "lib/planner/context.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

int64_t round_up(int64_t n, int64_t k) { return (n + k - 1) / k * k; }

}  // namespace

MemoryEstimate memory_estimate(const CostModel& cm, const ModelConfig& m, const MemoryLayout& l,
                               const MemoryExtras& x) {
  const ZeroLayout& z = l.zero;
  FLEXSP_CHECK(z.stage >= 0 && z.stage <= 3, "parallel.zero: stage must be 0-3, got {}", z.stage);
  FLEXSP_CHECK(l.tp >= 1 && l.dp >= 1, "memory model: tp {} and dp {} must be positive", l.tp, l.dp);
  pp_check(x.pipeline, m.layers);
  ModelConfig stage = m;  // the largest stage's layers; its table keeps embedding and head
  stage.layers = pp_stage_layers(x.pipeline, m.layers);
  const ParamTable t = make_param_table(stage, l.tp, 0);
  const double p_bytes = cm.param_bytes, g_bytes = cm.grad_bytes, o_bytes = cm.optim_bytes;
  MemoryEstimate e;
  if (z.stage < 3) {
    // One flat buffer each, padded to the optimizer shard count (stage 0: not sharded).
    const int64_t shards = z.stage == 0 ? 1 : std::max(1, z.optim_group);
    const int64_t padded = round_up(t.total, shards), block = padded / shards;
    e.params = p_bytes * static_cast<double>(padded);
    e.grads = g_bytes * static_cast<double>(padded);
    // AdamW holds its range clipped to the real parameters: the last shard can be short.
    e.optim = o_bytes * static_cast<double>(std::min(block, t.total));
    if (z.stage >= 1) e.buffers = 4.0 * static_cast<double>(block);  // fp32 collective scratch
  } else {
    const int64_t W = l.dp, pg = std::max(1, z.param_group);
    const int64_t gg = std::max(1, z.grad_group), og = std::max(1, z.optim_group);
    int64_t pshard = 0, gshard = 0, oshard = 0, maxp = 0, maxs = 0, slot = 0;
    for (int u = 0; u < param_units(t); ++u) {
      const int64_t padded = round_up(param_unit_end(t, u) - param_unit_begin(t, u), W);
      // Pieces over the param group; sub-pieces when the param group is a node's.
      const int64_t piece = padded / pg, sub = padded / W;
      pshard += piece;
      gshard += padded / gg;
      oshard += padded / og;
      maxp = std::max(maxp, piece);
      maxs = std::max(maxs, sub);
      slot = std::max(slot, padded);
    }
    e.params = p_bytes * static_cast<double>(pshard);
    e.grads = g_bytes * static_cast<double>(gshard);
    e.optim = o_bytes * static_cast<double>(oshard);
    // The slots of the units in use (lib/runtime/zero.h), in a pipeline stage as without
    // one: five with tied embeddings (the head needs the embedding unit; in a pipeline the
    // last stage), else four.
    const int slots = t.tied ? 5 : 4;
    e.buffers = 4.0 * static_cast<double>(maxp + maxs) +
                std::max(p_bytes, g_bytes) * static_cast<double>(slots) * static_cast<double>(slot);
  }
  const double in_flight =
      x.in_flight > 0 ? x.in_flight : pp_in_flight(x.pipeline, pp_chunk_share(x.pipeline, m, x.longest));
  // With activation offload the device keeps the ring's blocks, not every layer's: the
  // figure without offload less the blocks that wait on the host (their shapes are exact).
  ModelConfig plain = stage;
  plain.offload = false;
  e.host_per_token = memory_offload_host_per_token(cm, stage, l.tp) * in_flight;
  const double away = stage.layers > 0 && e.host_per_token > 0
                          ? e.host_per_token / stage.layers *
                                (stage.layers - LayerOffload::ring_slots(stage.layers, stage.offload_ahead))
                          : 0;
  e.activation_per_token = cost_activation_bytes_per_token(cm, plain) / l.tp * in_flight - away;
  if (x.pipeline.pp > 1 && x.pipeline.schedule == PpSchedule::seq1f1b) {  // the chunk attention's buffers
    const ModelConfig local = tp_local_config(m, l.tp);
    const double kv = 4.0 * std::max(local.kv_heads, x.chunk_kv_heads) * m.head_dim * cm.bytes_per_element;
    e.activation_per_token += in_flight * stage.layers * (kv + 4.0 * local.heads) + kv;
  }
  if (x.ring_kv_heads > 0) e.activation_per_token += 4.0 * x.ring_kv_heads * m.head_dim * cm.bytes_per_element;
  if (m.token_chunk > 0) {  // the header's list of what a token past the chunk does not hold
    const ModelConfig local = tp_local_config(m, l.tp);
    const double b = cm.bytes_per_element, q = local.q_dim();
    const double temporaries = 3.0 * m.hidden + 5.0 * local.ffn + (x.whole_q ? 0 : 4 * q) +
                               (x.pipeline.pp > 1 ? 0 : local.vocab);  // a pipeline's last stage alone
    e.chunk_tokens = m.token_chunk;
    // Never all of a token: its checkpoints, keys and values stay (a figure scaled from
    // another model could claim more).
    e.chunk_saving_per_token = std::min(b * temporaries + 8.0, 0.95 * e.activation_per_token);
    e.buffers += static_cast<double>(m.token_chunk) * (b * (2 * q + 2.0 * local.kv_dim()) + 8.0 * local.heads);
  }
  return e;
}

double memory_offload_host_per_token(const CostModel& cm, const ModelConfig& m, int tp) {
  if (!m.offload || !LayerOffload::useful(m.layers, m.offload_ahead)) return 0;
  const ModelConfig lc = tp_local_config(m, tp);
  const double rows = static_cast<double>(m.hidden) / tp;  // a rank's rows per device token
  const double block = m.checkpoint_activations
                           ? rows * cm.bytes_per_element
                           : (4 * rows + 2.0 * lc.q_dim() + 2.0 * lc.kv_dim() + 2.0 * lc.ffn) * cm.bytes_per_element +
                                 2 * 4.0 / tp;
  return m.layers * block;
}

int64_t memory_tokens_per_rank(const MemoryEstimate& e, const CostModel& cm, double mem_gb) {
  const double avail = (mem_gb - cm.reserve_gb) * 1e9 - e.fixed();
  if (avail <= 0 || e.activation_per_token <= 0) return 0;
  const double a = e.activation_per_token, C = static_cast<double>(e.chunk_tokens);
  if (e.chunk_tokens <= 0 || a * C >= avail) return static_cast<int64_t>(std::floor(avail / a));
  return e.chunk_tokens + static_cast<int64_t>(std::floor((avail - a * C) / (a - e.chunk_saving_per_token)));
}

std::string memory_describe(const MemoryEstimate& e, const CostModel& cm, int64_t tokens, double mem_gb) {
  const auto gb = [](double b) { return b / 1e9; };
  return fmt::format(
      "params {:.3g} + grads {:.3g} + optimizer {:.3g} + ZeRO buffers {:.3g} + activations {:.3g} ({} tokens x "
      "{:.4g} bytes) = {:.3g} GB per GPU, more than the {:g} GB of planner.mem_per_gpu_gb{}",
      gb(e.params), gb(e.grads), gb(e.optim), gb(e.buffers), gb(e.activations(tokens)),
      tokens, e.activations(tokens) / static_cast<double>(std::max<int64_t>(tokens, 1)), gb(e.total(tokens)), mem_gb,
      cm.reserve_gb > 0 ? fmt::format(" less {:g} GB reserve", cm.reserve_gb) : std::string());
}

}  // namespace flexsp

namespace flexsp {

MemoryEstimate memory_estimate_context(const PlannerContext& ctx, int* widest_out, double in_flight) {
  const int tp = std::max(1, ctx.tp), pp = std::max(1, ctx.pipeline.pp);
  const int devices = std::max(1, ctx.world / (tp * pp));
  const int per_node = std::max(1, std::min(ctx.ranks_per_node, ctx.world / pp) / tp);
  // The widest group the mode runs on a stage's devices, and the kv heads of a ring block.
  const ModelConfig local = tp_local_config(ctx.model, tp);
  int widest = 1, ring_kv = 0;
  for (int d = 1; d <= devices; d *= 2) {
    if (!cp_group_runnable(ctx.cp_mode, d, local.heads, local.kv_heads, per_node)) continue;
    widest = d;
    const CpSplit sp = cp_split(ctx.cp_mode, d, local.heads, local.kv_heads, per_node);
    if (sp.r > 1) ring_kv = std::max({ring_kv, local.kv_heads, sp.u});
  }
  if (widest_out) *widest_out = widest;
  return memory_estimate(ctx.cost, ctx.model, {tp, devices, ctx.zero},
                         {ctx.pipeline, ring_kv, ctx.max_seq_len, widest, in_flight,
                          widest > 1 || (pp > 1 && ctx.pipeline.schedule == PpSchedule::seq1f1b)});
}

namespace {

// The tokens per device of the longest sequence on the widest group ctx may use.
int64_t longest_need(const PlannerContext& ctx, int widest) {
  if (ctx.mode == SpMode::static_sp && ctx.static_sp_size > 0) widest = ctx.static_sp_size;
  return std::max<int64_t>(1, (ctx.max_seq_len + widest - 1) / widest);
}

}  // namespace

bool memory_fits(const PlannerContext& ctx) {
  if (ctx.offload_choice) return memory_fits(planner_offload_side(ctx));  // what fits either way
  int widest = 1;
  const MemoryEstimate e = memory_estimate_context(ctx, &widest);
  return memory_tokens_per_rank(e, ctx.cost, ctx.mem_per_gpu_gb) >= longest_need(ctx, widest);
}

double memory_peak_bytes(const PlannerContext& ctx, int64_t tokens, bool offload, int64_t plain_tokens) {
  if (!ctx.offload_choice || !offload) return memory_estimate_context(ctx).total(tokens);
  const double with = memory_estimate_context(planner_offload_side(ctx)).total(tokens);
  return plain_tokens > 0 ? std::max(with, memory_estimate_context(ctx).total(plain_tokens)) : with;
}

void memory_require_fit(const PlannerContext& ctx) {
  if (ctx.offload_choice) return memory_require_fit(planner_offload_side(ctx));
  int widest = 1;
  const MemoryEstimate e = memory_estimate_context(ctx, &widest);
  const int64_t need = longest_need(ctx, widest);
  if (ctx.mode == SpMode::static_sp && ctx.static_sp_size > 0) widest = ctx.static_sp_size;
  if (memory_tokens_per_rank(e, ctx.cost, ctx.mem_per_gpu_gb) >= need) return;
  fail(fmt::format("parallel: the layout does not fit the memory (tp {}, {}ZeRO-{} with shard groups of {}/{}/{} ranks for "
                   "params/grads/optimizer, checkpointing {}; the longest sequence, {} tokens, on {} device{}): {}",
                   ctx.tp, ctx.pipeline.pp > 1 ? pp_describe(ctx.pipeline) + " (first stage), " : "", ctx.zero.stage,
                   ctx.zero.param_group, ctx.zero.grad_group, ctx.zero.optim_group,
                   ctx.model.checkpoint_activations ? "on" : "off", ctx.max_seq_len, widest,
                   widest == 1 ? "" : "s", memory_describe(e, ctx.cost, need, ctx.mem_per_gpu_gb)));
}

}  // namespace flexsp

// The context resolved into prices (plan_costs.h): per-group costs, memory, the step of a
// plan and the memory-blind bound on it.
#include "lib/planner/cost/plan_costs.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "lib/model/cut_costs.h"
#include "lib/model/tensor_parallel.h"
#include "lib/planner/cost/memory_model.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

PlanCosts plan_costs_one(const PlannerContext& ctx) {
  planner_check(ctx);
  const int tp = ctx.tp, pp = ctx.pipeline.pp;
  PlanCosts c;
  const int stage_ranks = ctx.world / pp;  // pp is the outermost dimension: a stage is a block
  c.world = stage_ranks / tp;
  c.ranks_per_node = std::max(1, std::min(ctx.ranks_per_node, stage_ranks) / tp);
  c.pipeline = ctx.pipeline;
  c.fixed_ms = ctx.cost.fixed_ms;
  // A device's tp GPUs split the compute; each moves its tp traffic per token of the device.
  const double tp_ms = cost_tp_bytes_per_token(ctx.cost, ctx.model, tp) /
                       (cost_tp_bandwidth_gbs(ctx.cost, tp) * 1e9) * 1e3;
  // Activation checkpointing repeats each layer's forward in backward: the compute
  // coefficients (measured without it, as `flexsp profile` times them) grow by 4/3, a
  // forward being a third of a step's FLOPs. Its extra communication is in the byte counts.
  const double recompute = ctx.model.checkpoint_activations ? 4.0 / 3.0 : 1.0;
  c.a1 = ctx.cost.a1_ms / tp * recompute;
  c.a2 = ctx.cost.a2_ms / tp * recompute + tp_ms;
  c.per_sequence_ms = ctx.cost.per_sequence_ms * recompute;
  // The memory model (lib/planner/cost/memory_model.h): model states, ZeRO buffers, the
  // pipeline's activations in flight and a ring block, per rank.
  const ModelConfig local = tp_local_config(ctx.model, tp);
  const MemoryEstimate mem = memory_estimate_context(ctx);
  c.model_state_gb = mem.fixed() / 1e9;
  // Activation offload: each device token's blocks go to the host and back at bw_h2d on a
  // copy stream beside the compute; a token costs at least its copies (an upper bound of
  // max(compute, copies): the attention's share, which also hides them, is not counted).
  c.offload = mem.host_per_token > 0;
  if (c.offload) c.a2 = std::max(c.a2, 2 * mem.host_per_token / (ctx.cost.bw_h2d_gbs * 1e9) * 1e3);
  c.tokens_per_rank = memory_tokens_per_rank(mem, ctx.cost, ctx.mem_per_gpu_gb);
  if (ctx.max_tokens_per_rank > 0)
    c.tokens_per_rank = std::min(c.tokens_per_rank, ctx.max_tokens_per_rank * tp);
  FLEXSP_CHECK(c.tokens_per_rank >= 1,
               "planner.mem_per_gpu_gb: {} GB per GPU leaves no room for activations after {:.2f} "
               "GB of model states (ZeRO stage {}) and {} GB reserve",
               ctx.mem_per_gpu_gb, c.model_state_gb, ctx.zero.stage, ctx.cost.reserve_gb);
  // Ulysses between the ranks of equal tp index: each carries 1/tp of the payload. Its
  // sub-groups are blocks of u devices: inside a node when u fits one.
  const double bytes_per_token = cost_comm_bytes(ctx.cost, ctx.model, 1) / tp;
  const auto ms_at = [](double bytes, double gbs) { return bytes / (gbs * 1e9) * 1e3; };
  c.ulysses_max = 1;
  for (int d = 1; d <= c.world; d *= 2) {
    const bool ok = cp_group_runnable(ctx.cp_mode, d, local.heads, local.kv_heads, c.ranks_per_node);
    const CpSplit sp = ok ? cp_split(ctx.cp_mode, d, local.heads, local.kv_heads, c.ranks_per_node) : CpSplit{d, 1};
    c.comm_ms_per_token.push_back(
        sp.u == 1 ? 0.0 : ms_at(bytes_per_token / d, cost_bandwidth_gbs(ctx.cost, sp.u * tp, sp.u > c.ranks_per_node)));
    // A ring step moves the device's block: s / d tokens of max(kv, u) kv heads per rank.
    const int kv = std::max(local.kv_heads, sp.u);
    c.ring_r.push_back(sp.r);
    c.ring_ms_per_token.push_back(
        sp.r == 1 ? 0.0
                  : ms_at(cost_ring_bytes_per_token(ctx.cost, ctx.model, kv) / sp.u / d,
                          cost_p2p_bandwidth_gbs(ctx.cost, d > c.ranks_per_node)));
    if (!ok) continue;
    c.sizes.push_back(d);
    if (sp.r == 1) c.ulysses_max = d;
  }
  FLEXSP_ASSERT(!c.sizes.empty());
  c.wide_from = ctx.ring_only_when_needed ? c.tokens_per_rank * c.ulysses_max : 0;
  // Pipeline: a stage's share of the work, and each rank's share of the boundary traffic
  // (a device's tokens, 1/tp of the rows per rank), between nodes when a stage fills nodes.
  c.stage_share = static_cast<double>(pp_stage_layers(ctx.pipeline, ctx.model.layers)) / ctx.model.layers;
  if (pp > 1) {
    c.pp_ms_per_token = ms_at(cost_pp_bytes_per_token(ctx.cost, ctx.model) / tp / c.world,
                              cost_p2p_bandwidth_gbs(ctx.cost, stage_ranks >= ctx.ranks_per_node));
    pp_stage_shares(ctx.pipeline, ctx.pp_layers, ctx.model, &c.stage_attn, &c.stage_rest);
    c.forward_share = pp_forward_share(ctx.model);
    seq_chunk_costs(ctx.model, &c.chunk_lin, &c.chunk_att);  // as the runtime cuts
  }
  return c;
}

}  // namespace

PlanCosts plan_costs(const PlannerContext& ctx) {
  if (!ctx.offload_choice) return plan_costs_one(ctx);
  auto off = std::make_shared<const PlanCosts>(plan_costs_one(planner_offload_side(ctx)));
  if (memory_tokens_per_rank(memory_estimate_context(ctx), ctx.cost, ctx.mem_per_gpu_gb) < 1) return *off;
  PlanCosts c = plan_costs_one(ctx);
  if (off->tokens_per_rank > c.tokens_per_rank) c.offload_costs = std::move(off);
  return c;
}

int PlanCosts::min_size(int64_t s) const {
  for (int d : sizes)
    if (holds(s, d)) return d;
  return 0;
}

double PlanCosts::least_work(int64_t s) const {
  double w = std::numeric_limits<double>::infinity();
  for (int d : sizes)
    if (holds(s, d)) w = std::min(w, d * seq_ms(s, d));
  return w;
}

double PlanCosts::least_ms(int64_t s) const {
  double t = std::numeric_limits<double>::infinity();
  for (int d : sizes)
    if (holds(s, d)) t = std::min(t, seq_ms(s, d));
  return t;
}

double PlanCosts::unpipelined_ms(double sum_ms, int64_t tokens) const {
  if (pipeline.pp <= 1) return sum_ms;
  return sum_ms * stage_share + pp_ms_per_token * static_cast<double>(tokens);
}

double PlanCosts::step_ms(double sum_ms, int m, int64_t tokens) const {
  if (pipeline.pp <= 1) return sum_ms;
  return unpipelined_ms(sum_ms, tokens) * pp_bubble_factor(pipeline, m);
}

double PlanCosts::step_lower_ms(double sum_ms) const {
  const int P = pipeline.pp;
  if (P <= 1) return sum_ms;
  double best = 0, before_last = 0, after_first = 0;
  for (int s = 0; s < P; ++s) {
    const double a = stage_attn[static_cast<size_t>(s)], r = stage_rest[static_cast<size_t>(s)];
    best = std::max(best, std::min(a, r) * sum_ms);
    if (s < P - 1) before_last += forward_share * fixed_ms * r;
    if (s > 0) after_first += (1 - forward_share) * fixed_ms * r;
  }
  const auto work = [&](int s) {
    return std::min(stage_attn[static_cast<size_t>(s)], stage_rest[static_cast<size_t>(s)]) * sum_ms;
  };
  return std::max({best, work(P - 1) + before_last, work(0) + after_first});
}

PlanCosts plan_costs_relaxed(const PlanCosts& c) {
  PlanCosts r = c;
  r.offload_costs.reset();
  if (!c.offload_costs) return r;
  r.tokens_per_rank = std::max(c.tokens_per_rank, c.offload_costs->tokens_per_rank);
  r.wide_from = std::min(c.wide_from, c.offload_costs->wide_from);
  return r;
}

PlanLimits plan_limits(const PlannerContext& ctx, const PlanCosts& c) {
  PlanLimits l;
  const ModelConfig local = tp_local_config(ctx.model, ctx.tp);
  l.world = c.world;
  l.ranks_per_node = c.ranks_per_node;
  l.heads = local.heads;
  l.kv_heads = local.kv_heads;
  l.cp_mode = ctx.cp_mode;
  l.max_tokens_per_rank = c.tokens_per_rank;
  if (c.offload_costs) l.max_tokens_per_rank_offload = c.offload_costs->tokens_per_rank;
  return l;
}

double mb_makespan(const PlanCosts& c, const std::vector<int64_t>& len,
                   const std::vector<PlanGroup>& groups) {
  double m = 0;
  for (const PlanGroup& g : groups) {
    double t = 0;
    for (int32_t s : g.seqs) t += c.seq_ms(len[s], g.size);
    m = std::max(m, t);
  }
  return m;
}

double plan_predict_ms(const PlanCosts& c, const Plan& p, const std::vector<int64_t>& len) {
  if (c.pipeline.pp > 1) {
    std::vector<const std::vector<PlanGroup>*> mbs;
    for (const PlanMicroBatch& mb : p.micro_batches) mbs.push_back(&mb.groups);
    return plan_pipeline_ms(c, mbs, len);
  }
  double t = 0;
  for (const PlanMicroBatch& mb : p.micro_batches) t += c.fixed_ms + mb_makespan(c.of(mb), len, mb.groups);
  int64_t tokens = 0;
  for (int64_t l : len) tokens += l;
  return c.step_ms(t, static_cast<int>(p.micro_batches.size()), tokens);
}

double plan_lower_bound_ms(const PlanCosts& c, const std::vector<int64_t>& len) {
  // With a pipeline: the simulated step's bound (PlanCosts::step_lower_ms).
  return c.step_lower_ms(plan_sum_lower_bound_ms(c, len));
}

double plan_sum_lower_bound_ms(const PlanCosts& c, const std::vector<int64_t>& len) {
  // T >= M fixed + (sum over sequences of the least rank-time among the sizes whose time
  // fits in T - M fixed) / world, where M is the fewest micro-batches memory allows: every
  // micro-batch pays fixed, every sequence runs inside one micro-batch's makespan, and
  // more micro-batches only raise the bound. The right side falls as T grows, so the
  // least T that satisfies it is found by bisection; also T >= fixed + longest alone.
  double longest = 0;
  int64_t tokens = 0;
  for (int64_t l : len) longest = std::max(longest, c.least_ms(l)), tokens += l;
  const int64_t cap = c.tokens_per_rank * c.world;
  const double fixed = std::max<int64_t>(1, (tokens + cap - 1) / cap) * c.fixed_ms;
  auto work_within = [&](double span) {  // least rank-time with every sequence within span
    double w = 0;
    for (int64_t l : len) {
      double best = std::numeric_limits<double>::infinity();
      for (int d : c.sizes)
        if (c.holds(l, d) && c.seq_ms(l, d) <= span) best = std::min(best, d * c.seq_ms(l, d));
      w += best;
    }
    return w / c.world;
  };
  double lo = std::max(fixed, c.fixed_ms + longest);
  if (fixed + work_within(lo - fixed) <= lo) return lo;
  double hi = lo;
  while (fixed + work_within(hi - fixed) > hi) hi *= 2;
  for (int it = 0; it < 60 && hi - lo > 1e-9 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (fixed + work_within(mid - fixed) <= mid ? hi : lo) = mid;
  }
  return lo;  // the least T lies in (lo, hi]
}

}  // namespace flexsp

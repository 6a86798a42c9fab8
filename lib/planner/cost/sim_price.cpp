// The price of a simulated step beyond its micro-batches (see sim_price.h).
#include "lib/planner/cost/sim_price.h"

#include <algorithm>

#include "lib/util/error.h"

namespace flexsp {

namespace {

double ms_at(double bytes, double gbs) { return gbs > 0 ? bytes / (gbs * 1e9) * 1e3 : 0.0; }

}  // namespace

SimCluster sim_cluster_of(int gpus, int gpus_per_node, double intra, double inter) {
  return {gpus, (gpus + gpus_per_node - 1) / gpus_per_node, intra, inter};
}

double sim_ring_bytes(SimCollective c, int n, double bytes) {
  if (n <= 1) return 0;
  const double share = static_cast<double>(n - 1) / n;
  return (c == SimCollective::all_reduce ? 2.0 : 1.0) * share * bytes;
}

SimZeroComm sim_zero_traffic(const ModelConfig& m, const CostModel& cm, const ZeroLayout& z, int stage_gpus,
                             int gpus_per_node, int tp, double intra_gbs, double inter_gbs) {
  FLEXSP_CHECK(z.stage >= 0 && z.stage <= 3, "--zero: stage must be 0-3, got {}", z.stage);
  const double P = static_cast<double>(model_num_params(m)) / tp;
  const double params = P * cm.param_bytes, grads = P * cm.grad_bytes;
  const int dp = stage_gpus / tp, node = std::min(gpus_per_node, stage_gpus) / tp;
  const int nodes = std::max(1, stage_gpus / gpus_per_node);
  auto ring = [&](SimCollective c, int n, double bytes) {
    return ms_at(sim_ring_bytes(c, n, bytes), n > node ? inter_gbs : intra_gbs);
  };
  // Across nodes: one rank per node in a ring, its shard of a node group.
  auto across = [&](SimCollective c, double bytes) { return ms_at(sim_ring_bytes(c, nodes, bytes), inter_gbs); };
  SimZeroComm t;
  switch (z.stage) {
    case 0:
      t.per_step_ms = ring(SimCollective::all_reduce, dp, grads);
      break;
    case 1:
      t.per_step_ms = ring(SimCollective::all_reduce, dp, grads) + ring(SimCollective::all_gather, z.optim_group, params);
      break;
    case 2: {
      const int g = z.grad_group;
      t.per_step_ms = ring(SimCollective::reduce_scatter, g, grads) + ring(SimCollective::all_gather, g, params);
      if (g < dp) t.per_step_ms += across(SimCollective::all_reduce, grads / g);
      break;
    }
    default: {
      const int pg = z.param_group, gg = z.grad_group, og = z.optim_group;
      const double gathers = m.checkpoint_activations ? 3 : 2;
      t.per_micro_batch_ms =
          gathers * ring(SimCollective::all_gather, pg, params) + ring(SimCollective::reduce_scatter, gg, grads);
      if (gg < dp) t.per_step_ms += across(SimCollective::all_reduce, grads / gg);
      if (pg < og) t.per_step_ms += across(SimCollective::all_gather, params / pg);
    }
  }
  return t;
}

SimZeroComm sim_zero_comm(const ModelConfig& m, const CostModel& cm, int stage, const SimCluster& c,
                          int tp) {
  const int n = c.gpus / tp;
  const int per_node = c.nodes > 1 ? std::max(1, c.gpus / c.nodes) : c.gpus;  // a ring spans nodes iff c has several
  return sim_zero_traffic(m, cm, ZeroLayout{stage, n, n, n}, c.gpus, per_node, tp, c.bw_intra_gbs, c.bw_inter_gbs);
}

double sim_sync_ms(const ModelConfig& m, const CostModel& cm, const ZeroLayout& z, int tp,
                   const SimZeroComm& traffic, double exposure, double share) {
  const double shard = static_cast<double>(model_num_params(m)) / tp / (z.stage >= 1 ? std::max(1, z.optim_group) : 1);
  return share * (exposure * traffic.per_step_ms + shard * cm.optimizer_ns_per_param * 1e-6);
}

int sim_default_fixed_ref_gpus(const CostModel& cm) {
  const CostModel d = cost_model_default();
  return cm.a1_ms == d.a1_ms && cm.a2_ms == d.a2_ms && cm.fixed_ms == d.fixed_ms ? 64 : 0;
}

namespace {

// The fixed split and the ZeRO traffic of ctx's layout on the cost model's own fabric.
struct LayoutTraffic {
  SimFixedSplit split;
  SimZeroComm zero;
};

LayoutTraffic layout_traffic(const PlannerContext& ctx) {
  const int pp = std::max(1, ctx.pipeline.pp), stage = std::max(1, ctx.world / pp);
  const int per_node = std::min(ctx.ranks_per_node, stage);
  const SimFabric f = sim_fabric(ctx.cost, ctx.ranks_per_node, 0, 0);
  LayoutTraffic t;
  t.split = sim_fixed_split(ctx.model, ctx.cost, ctx.ranks_per_node, f, sim_default_fixed_ref_gpus(ctx.cost));
  t.zero = sim_zero_traffic(ctx.model, ctx.cost, ctx.zero, stage, per_node, ctx.tp, f.intra_gbs, f.inter_gbs);
  return t;
}

}  // namespace

PlannerContext sim_plan_context(const PlannerContext& ctx) {
  const LayoutTraffic t = layout_traffic(ctx);
  PlannerContext c = ctx;
  c.cost.fixed_ms = t.split.residual_ms + t.split.exposure * t.zero.per_micro_batch_ms;
  return c;
}

SimStepPricing sim_step_pricing(const PlannerContext& ctx) {
  const LayoutTraffic t = layout_traffic(ctx);
  const int pp = std::max(1, ctx.pipeline.pp);
  const double share =
      pp > 1 ? static_cast<double>(pp_stage_layers(ctx.pipeline, ctx.model.layers)) / ctx.model.layers : 1.0;
  SimStepPricing p;
  p.costs = plan_costs(sim_plan_context(ctx));
  p.sync_ms = sim_sync_ms(ctx.model, ctx.cost, ctx.zero, ctx.tp, t.zero, t.split.exposure, share);
  return p;
}

double sim_step_ms(const SimStepPricing& p, const Plan& plan, const std::vector<int64_t>& lengths) {
  return plan_predict_ms(p.costs, plan, lengths) + p.sync_ms;
}

SimFabric sim_fabric(const CostModel& cm, int gpus_per_node, double intra_override, double inter_override) {
  FLEXSP_CHECK(gpus_per_node >= 1, "--gpus-per-node: must be positive, got {}", gpus_per_node);
  SimFabric f;
  // The widest group of each span: one whole node inside, the largest listed across.
  // Measured ring figures first (flexsp profile), else the widest group of each span: one
  // whole node inside, the largest listed across.
  const int widest = cm.bw_inter_gbs.empty() ? 2 * gpus_per_node : cm.bw_inter_gbs.rbegin()->first;
  f.ref_intra_gbs = cm.bw_zero_intra_gbs > 0 ? cm.bw_zero_intra_gbs
                                             : cost_bandwidth_gbs(cm, std::max(2, gpus_per_node), false);
  f.ref_inter_gbs = cm.bw_zero_inter_gbs > 0 ? cm.bw_zero_inter_gbs : cost_bandwidth_gbs(cm, widest, true);
  f.intra_gbs = intra_override > 0 ? intra_override : f.ref_intra_gbs;
  f.inter_gbs = inter_override > 0 ? inter_override : f.ref_inter_gbs;
  return f;
}

CostModel sim_scale_fabric(CostModel cm, const SimFabric& f) {
  for (auto& [d, bw] : cm.bw_intra_gbs) bw *= f.intra_gbs / f.ref_intra_gbs;
  for (auto& [d, bw] : cm.bw_inter_gbs) bw *= f.inter_gbs / f.ref_inter_gbs;
  return cm;
}

SimFixedSplit sim_fixed_split(const ModelConfig& m, const CostModel& cm, int gpus_per_node,
                              const SimFabric& f, int fixed_ref_gpus) {
  SimFixedSplit s{cm.fixed_ms, 1.0};
  if (fixed_ref_gpus <= 0) return s;
  const SimCluster ref = sim_cluster_of(fixed_ref_gpus, gpus_per_node, f.ref_intra_gbs, f.ref_inter_gbs);
  const double t3 = sim_zero_comm(m, cm, 3, ref).per_micro_batch_ms;
  if (t3 <= 0) return s;  // one GPU: no traffic to split out
  s.exposure = std::min(1.0, cm.fixed_ms / t3);
  s.residual_ms = std::max(0.0, cm.fixed_ms - s.exposure * t3);
  return s;
}

}  // namespace flexsp

// The arithmetic and the node-count loop of flexsp simulate (see simulate.h).
#include "lib/planner/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "lib/util/error.h"

namespace flexsp {

namespace {

double ms_at(double bytes, double gbs) { return gbs > 0 ? bytes / (gbs * 1e9) * 1e3 : 0.0; }

SimCluster cluster_of(int gpus, int gpus_per_node, double intra, double inter) {
  return {gpus, (gpus + gpus_per_node - 1) / gpus_per_node, intra, inter};
}

// One step's batch: the planner's three predictions plus the per-step sync.
SimStep plan_one(const PlannerContext& ctx, const std::vector<int64_t>& len, double sync_ms) {
  SimStep st;
  PlanStats fs, ss, bs;
  PlannerContext c = ctx;
  c.mode = SpMode::flexsp;
  plan_step(c, len, &fs);
  c.mode = SpMode::static_sp;
  plan_step(c, len, &ss);
  c.mode = SpMode::batch_adaptive;
  plan_step(c, len, &bs);
  st.flexsp_ms = fs.predicted_ms + sync_ms;
  st.static_ms = ss.predicted_ms + sync_ms;
  st.batch_adaptive_ms = bs.predicted_ms + sync_ms;
  st.micro_batches = fs.micro_batches;
  st.seqs = static_cast<int64_t>(len.size());
  for (int64_t l : len) st.tokens += l;
  st.flops = model_train_flops(ctx.model, len);
  return st;
}

// The steps of one batch size on one node count.
std::vector<SimStep> plan_steps(const SimSetup& s, const PlannerContext& ctx,
                                const std::vector<int64_t>& docs, const SamplerOptions& so,
                                double sync_ms) {
  BatchSampler sampler(docs, so);
  std::vector<SimStep> out;
  for (int64_t k = 0; k < s.steps; ++k) {
    std::vector<int64_t> len;
    for (const SeqRef& r : sampler.next()) len.push_back(r.length);
    out.push_back(plan_one(ctx, len, sync_ms));
  }
  return out;
}

}  // namespace

SamplerOptions sim_weak_batch(const SamplerOptions& base, int gpus, int base_gpus) {
  SamplerOptions so = base;
  const double f = static_cast<double>(gpus) / base_gpus;
  if (so.batch_seqs > 0) so.batch_seqs = std::max<int64_t>(1, std::llround(so.batch_seqs * f));
  if (so.batch_tokens > 0) so.batch_tokens = std::max<int64_t>(1, std::llround(so.batch_tokens * f));
  return so;
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
  const SimCluster ref = cluster_of(fixed_ref_gpus, gpus_per_node, f.ref_intra_gbs, f.ref_inter_gbs);
  const double t3 = sim_zero_comm(m, cm, 3, ref).per_micro_batch_ms;
  if (t3 <= 0) return s;  // one GPU: no traffic to split out
  s.exposure = std::min(1.0, cm.fixed_ms / t3);
  s.residual_ms = std::max(0.0, cm.fixed_ms - s.exposure * t3);
  return s;
}

SimPoint sim_point(int nodes, int gpus, const std::vector<SimStep>& steps, double peak_tflops) {
  FLEXSP_ASSERT(!steps.empty() && gpus >= 1 && peak_tflops > 0);
  SimPoint p;
  p.nodes = nodes;
  p.gpus = gpus;
  double flops = 0;
  for (const SimStep& s : steps) {
    p.seqs += static_cast<double>(s.seqs);
    p.tokens += static_cast<double>(s.tokens);
    p.micro_batches += s.micro_batches;
    p.flexsp_ms += s.flexsp_ms;
    p.static_ms += s.static_ms;
    p.batch_adaptive_ms += s.batch_adaptive_ms;
    flops += s.flops;
  }
  const double seconds = p.flexsp_ms / 1e3;  // over all steps
  p.tokens_per_s = seconds > 0 ? p.tokens / seconds : 0;
  p.mfu = seconds > 0 ? flops / (seconds * gpus * peak_tflops * 1e12) : 0;
  p.speedup_vs_static = p.flexsp_ms > 0 ? p.static_ms / p.flexsp_ms : 0;
  p.speedup_vs_batch_adaptive = p.flexsp_ms > 0 ? p.batch_adaptive_ms / p.flexsp_ms : 0;
  const double n = static_cast<double>(steps.size());
  for (double* v : {&p.seqs, &p.tokens, &p.micro_batches, &p.flexsp_ms, &p.static_ms, &p.batch_adaptive_ms})
    *v /= n;
  p.efficiency = 1;
  return p;
}

double sim_efficiency(const SimPoint& p, const SimPoint& base) {
  const double b = base.tokens_per_s / base.gpus;
  return b > 0 ? (p.tokens_per_s / p.gpus) / b : 0;
}

std::vector<SimRow> sim_scaling(const SimSetup& s, const std::vector<int64_t>& docs,
                                const std::function<void(const SimRow&)>& on_row) {
  FLEXSP_CHECK(!s.nodes.empty(), "--nodes: no node counts");
  FLEXSP_CHECK(s.weak || s.strong, "--scaling: neither weak nor strong");
  FLEXSP_CHECK(s.steps >= 1, "--steps: must be positive, got {}", s.steps);
  const int base_gpus = s.nodes.front() * s.gpus_per_node;
  std::vector<SimRow> rows;
  const SimRow* base = nullptr;  // the first row with figures: the efficiencies' reference
  rows.reserve(s.nodes.size());  // so that base stays valid
  for (int n : s.nodes) {
    SimRow r;
    r.nodes = n;
    r.gpus = n * s.gpus_per_node;
    // ZeRO runs over a pipeline stage's GPUs; the stage's share of the fixed cost is taken
    // by the pipeline's price (planner.h), of the sync here.
    const int tp = s.planner.tp, pp = std::max(1, s.planner.pipeline.pp), stage = std::max(1, r.gpus / pp);
    const SimCluster c = cluster_of(stage, std::min(s.gpus_per_node, stage), s.fabric.intra_gbs, s.fabric.inter_gbs);
    const SimZeroComm z = sim_zero_comm(s.planner.model, s.planner.cost, s.zero_stage, c, tp);
    const double share = pp > 1 ? static_cast<double>(pp_stage_layers(s.planner.pipeline, s.planner.model.layers)) /
                                      s.planner.model.layers
                                : 1.0;
    PlannerContext ctx = s.planner;
    ctx.world = r.gpus;
    ctx.ranks_per_node = s.gpus_per_node;
    ctx.zero = {s.zero_stage, stage / tp, stage / tp, stage / tp};
    r.fixed_ms = s.fixed.residual_ms + s.fixed.exposure * z.per_micro_batch_ms;
    r.sync_ms = sim_sync_ms(ctx.model, ctx.cost, ctx.zero, tp, z, s.fixed.exposure, share);
    ctx.cost.fixed_ms = r.fixed_ms;
    ctx.use_milp = ctx.time_limit_ms > 0;
    try {
      if (s.weak) {
        const SamplerOptions so = sim_weak_batch(s.batch, r.gpus, base_gpus);
        r.weak = sim_point(n, r.gpus, plan_steps(s, ctx, docs, so, r.sync_ms), s.peak_tflops);
      }
      if (s.strong) {
        // At the first node count the strong batch is the weak one: planned once.
        r.strong = s.weak && rows.empty()
                       ? r.weak
                       : sim_point(n, r.gpus, plan_steps(s, ctx, docs, s.batch, r.sync_ms), s.peak_tflops);
      }
    } catch (const Error& e) {
      // One row that cannot hold its batch says so; the sweep goes on (issue 17).
      r.infeasible = e.what();
      r.weak = r.strong = SimPoint{};
    }
    if (r.infeasible.empty() && base) {
      if (s.weak) r.weak.efficiency = sim_efficiency(r.weak, base->weak);
      if (s.strong) r.strong.efficiency = sim_efficiency(r.strong, base->strong);
    }
    rows.push_back(r);
    if (r.infeasible.empty() && !base) base = &rows.back();
    if (on_row) on_row(rows.back());
  }
  if (!base)
    fail(fmt::format("simulate: no node count holds the batch; {} node{} ({} GPUs): {}", rows.front().nodes,
                     rows.front().nodes == 1 ? "" : "s", rows.front().gpus, rows.front().infeasible));
  return rows;
}

}  // namespace flexsp

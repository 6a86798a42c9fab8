// The node-count loop of flexsp simulate (see simulate.h).
#include "lib/planner/analysis/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "lib/util/error.h"

namespace flexsp {

namespace {

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
    try {
      PlannerContext ctx = planner_context(s.run, s.model, s.cost, r.gpus, s.gpus_per_node);
      ctx.ring_only_when_needed = s.ring_only_when_needed;
      const int tp = ctx.tp, pp = ctx.pipeline.pp, stage = r.gpus / pp;
      const SimCluster c = sim_cluster_of(stage, std::min(s.gpus_per_node, stage), s.fabric.intra_gbs, s.fabric.inter_gbs);
      const SimZeroComm z = sim_zero_comm(ctx.model, ctx.cost, ctx.zero.stage, c, tp);
      const double share =
          pp > 1 ? static_cast<double>(pp_stage_layers(ctx.pipeline, ctx.model.layers)) / ctx.model.layers : 1.0;
      r.fixed_ms = s.fixed.residual_ms + s.fixed.exposure * z.per_micro_batch_ms;
      r.sync_ms = sim_sync_ms(ctx.model, ctx.cost, ctx.zero, tp, z, s.fixed.exposure, share);
      ctx.cost.fixed_ms = r.fixed_ms;
      ctx.use_milp = ctx.time_limit_ms > 0;
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
      // One row that cannot hold its batch says so; the sweep goes on.
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

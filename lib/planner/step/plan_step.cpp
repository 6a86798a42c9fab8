// plan_step (planner.h): the costs, the baselines (static: one d for every step;
// batch_adaptive: the best uniform d per step) and flexsp's search (step/flexsp.h), one
// predicted time and one validation for every mode.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "lib/planner/planner.h"
#include "lib/planner/step/candidate.h"
#include "lib/planner/step/flexsp.h"
#include "lib/planner/step/offload_choice.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

using Clock = PlanClock;

void check_feasible(const PlannerContext& ctx, const PlanCosts& c,
                    const std::vector<int64_t>& len) {
  for (size_t i = 0; i < len.size(); ++i) {
    FLEXSP_CHECK(len[i] >= 1, "planner: sequence {} has {} tokens", i, len[i]);
    const int d = c.max_size();
    FLEXSP_CHECK(len[i] <= c.tokens_per_rank * d,
                 "infeasible batch: sequence {} has {} tokens, more than the largest group the "
                 "model runs ({} devices of {}; parallel.cp_mode {}{}) holds: {} "
                 "tokens ({} per device with {} GB per GPU; all devices together hold {})",
                 i, len[i], d, c.world, cp_mode_name(ctx.cp_mode),
                 ctx.cp_mode == CpMode::ulysses
                     ? fmt::format(": d must divide {} heads per tp rank", ctx.model.heads / ctx.tp)
                     : std::string(),
                 c.tokens_per_rank * d, c.tokens_per_rank, ctx.mem_per_gpu_gb, c.tokens_per_rank * c.world);
  }
}

// Tokens per device of a uniform plan: memory's E; with a pipeline, less where that gives
// the pipeline pp micro-batches (a single one would leave pp - 1 stages idle), never less
// than the longest sequence needs.
int64_t uniform_tokens(const PlanCosts& c, const std::vector<int64_t>& len, int d) {
  if (c.pipeline.pp <= 1) return c.tokens_per_rank;
  int64_t tokens = 0, longest = 0;
  for (int64_t l : len) tokens += l, longest = std::max(longest, l);
  const int64_t per_mb = (tokens + c.pipeline.pp - 1) / c.pipeline.pp;
  const int64_t e = std::max((per_mb + c.world - 1) / c.world, (longest + d - 1) / d);
  return std::min(c.tokens_per_rank, e);
}

// batch_adaptive's plan: the uniform size with the least predicted time among those that
// hold the batch's longest sequence and tile the nodes; empty when none does.
template <class UniformOk>
Plan plan_uniform_best(const PlanCosts& c, const std::vector<int64_t>& len, UniformOk uniform_ok) {
  int64_t longest = 1;
  for (int64_t l : len) longest = std::max(longest, l);
  double best = std::numeric_limits<double>::infinity();
  Plan p;
  for (int d : c.sizes) {
    if (d < c.min_size(longest) || !uniform_ok(d)) continue;
    Plan q = plan_static(len, c.world, d, uniform_tokens(c, len, d));
    const double t = plan_predict_ms(c, q, len);
    if (t < best - 1e-9) best = t, p = std::move(q);
  }
  return p;
}

// The plan of one mode in the space c allows (c's offload flag on every micro-batch).
Plan plan_mode(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
               Clock::time_point t0, PlanStats& st) {
  Plan p;
  auto uniform_ok = [&](int d) {
    return c.world % d == 0 && (d > c.ranks_per_node ? d % c.ranks_per_node == 0
                                                     : c.ranks_per_node % d == 0);
  };
  switch (ctx.mode) {
    case SpMode::static_sp: {
      const int d = plan_static_size(ctx, c, len);
      const int heads = ctx.model.heads / ctx.tp;
      const bool runnable = std::find(c.sizes.begin(), c.sizes.end(), d) != c.sizes.end();
      FLEXSP_CHECK(uniform_ok(d) && runnable,
                   "parallel.sp_size: {} must be a power of two dividing the {} devices and the {} "
                   "devices per node (or a multiple of it){}",
                   d, c.world, c.ranks_per_node,
                   ctx.cp_mode == CpMode::ulysses ? fmt::format(", and the {} heads per tp rank", heads)
                                                  : std::string());
      p = plan_static(len, c.world, d, uniform_tokens(c, len, d));
      break;
    }
    case SpMode::batch_adaptive:
      p = plan_uniform_best(c, len, uniform_ok);
      FLEXSP_CHECK(!p.micro_batches.empty(), "batch_adaptive: no uniform group size fits the batch");
      break;
    case SpMode::flexsp: {
      // The best uniform plan lies in flexsp's space: its split is one candidate.
      // With rings open to any sequence, the plan of the space without short sequences on
      // rings (--ring-groups needed) lies in it too, and the heuristics sometimes find a
      // better plan there (a batch of long pieces only): both are planned and the faster
      // kept. Rings open to any sequence first, under the whole time limit (halving it
      // would cut the first space's local search at scale); the rule's space then gets
      // what is left, if the alternatives' gate allows (plan_keep_faster).
      const Plan uniform = plan_uniform_best(c, len, uniform_ok);
      const bool both = !ctx.ring_only_when_needed && c.max_size() > c.ulysses_max;
      if (!both) {
        p = plan_flexsp(ctx, c, len, uniform, t0, &st);
        break;
      }
      PlanCosts needed = c;
      needed.wide_from = c.tokens_per_rank * c.ulysses_max;
      p = plan_flexsp(ctx, c, len, uniform, t0, &st);
      plan_keep_faster(ctx, c, len, t0, p, &st, [&](const PlannerContext& rest, PlanStats* s) {
        return plan_flexsp(rest, needed, len, plan_uniform_best(needed, len, uniform_ok), Clock::now(), s);
      });
      break;
    }
  }
  for (PlanMicroBatch& mb : p.micro_batches) mb.offload = c.offload;
  return p;
}

}  // namespace

int plan_static_size(const PlannerContext& ctx, const PlanCosts& c,
                     const std::vector<int64_t>& len) {
  if (ctx.static_sp_size > 0) return ctx.static_sp_size;
  int64_t longest = ctx.max_seq_len;
  if (longest <= 0)
    for (int64_t l : len) longest = std::max(longest, l);
  const int d = c.min_size(std::max<int64_t>(longest, 1));
  FLEXSP_CHECK(d > 0,
               "static SP: no group size holds a sequence of {} tokens ({} per rank; groups of up to {} devices "
               "with parallel.cp_mode {})",
               longest, c.tokens_per_rank, c.max_size(), cp_mode_name(ctx.cp_mode));
  return d;
}

Plan plan_step(const PlannerContext& ctx, const std::vector<int64_t>& len, PlanStats* stats) {
  const Clock::time_point t0 = Clock::now();
  const PlanCosts c = plan_costs(ctx);
  check_feasible(ctx, c.offload_costs ? *c.offload_costs : c, len);
  PlanStats st;
  Plan p = c.offload_costs ? plan_offload_choice(ctx, c, len, t0, &st,
                                                 [&](const PlannerContext& k, const PlanCosts& kc,
                                                     Clock::time_point k0, PlanStats* s) {
                                                   return plan_mode(k, kc, len, k0, *s);
                                                 })
                           : plan_mode(ctx, c, len, t0, st);
  p.predicted_ms = plan_predict_ms(c, p, len);
  plan_validate(p, len, plan_limits(ctx, c));
  st.predicted_ms = p.predicted_ms;
  st.unpipelined_ms = p.predicted_ms;
  if (c.pipeline.pp > 1) {
    double sum = 0;
    int64_t tokens = 0;
    for (const PlanMicroBatch& mb : p.micro_batches) sum += c.fixed_ms + mb_makespan(c, len, mb.groups);
    for (int64_t l : len) tokens += l;
    st.unpipelined_ms = c.unpipelined_ms(sum, tokens);
  }
  st.lower_bound_ms = plan_lower_bound_ms(c.offload_costs ? plan_costs_relaxed(c) : c, len);
  st.micro_batches = static_cast<int>(p.micro_batches.size());
  st.offloaded = static_cast<int>(std::count_if(p.micro_batches.begin(), p.micro_batches.end(),
                                                [](const PlanMicroBatch& mb) { return mb.offload; }));
  if (ctx.mode != SpMode::flexsp) st.greedy_ms = p.predicted_ms;
  st.solve_ms = ms_since(t0);
  if (stats) *stats = st;
  return p;
}

}  // namespace flexsp

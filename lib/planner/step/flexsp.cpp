// flexsp's search in one space (flexsp.h): the first split (splits.h), the local search
// over it (passes.cpp), the alternatives through the same local search, and the last
// passes (finish.cpp) on the fastest.
//
// Alternatives, each kept where the local search makes it faster than the best so far,
// each started only while gate_time_left allows (under a tight limit the last rarely
// starts), in this order so that a limit cuts the least promising:
//  - runners-up: where the stacked split won, the best of the other splits (the local
//    search can reverse their order);
//  - levels: where gate_wide_passes holds, the levels splits (levels_split) of the
//    winner's count, one less and one more, without and with pieces sharing groups (a
//    levels split that loses before the local search often wins after it); last, the
//    winner's count with the first level widened (a heavy tail's longest pieces can pull
//    shorter long ones beside them);
//  - sample: where gate_sample holds (stages too wide for the wide passes), a sample's
//    split (sample_split): alone it is no good, the local search and the MILPs make it.
// No seeded run (PlannerContext::seed_split) takes alternatives: the experiment asks for
// its own start.
#include "lib/planner/step/flexsp.h"

#include <algorithm>

#include "lib/planner/step/gates.h"
#include "lib/planner/step/passes.h"
#include "lib/planner/step/splits.h"

namespace flexsp {

namespace {

// A levels split to try: micro-batch count, group sharing, first level widened.
struct LevelsSpec {
  int count;
  double share;
  bool widen_first;
};

// The levels splits in the order they are tried (see above); counts below the fewest that
// fit memory are left out.
std::vector<LevelsSpec> levels_specs(const PlannerContext& ctx, int m, int fewest) {
  std::vector<LevelsSpec> specs;
  const int counts[] = {m, m - 1, m + 1};
  for (int i = 0; i < std::min(3, ctx.levels_max_counts); ++i)
    for (double share : {0.0, 0.1})
      if (counts[i] >= std::max(1, fewest)) specs.push_back({counts[i], share, false});
  if (ctx.levels_max_counts > 0 && m >= std::max(1, fewest)) specs.push_back({m, 0.0, true});
  return specs;
}

}  // namespace

void plan_keep_faster(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                      PlanClock::time_point t0, Plan& p, PlanStats* st,
                      const std::function<Plan(const PlannerContext&, PlanStats*)>& plan_fn) {
  PlannerContext rest = ctx;
  const int limit = step_time_limit_ms(ctx, plan_predict_ms(c, p, len));
  if (limit > 0) {
    rest.time_limit_ms = static_cast<int>(limit - ms_since(t0));
    rest.time_step_share = 0;  // the share was taken of the plan in hand
    const int needed = static_cast<int>(ctx.gates.alternatives_left * limit);
    if (rest.time_limit_ms < std::max(1, needed)) return;
  }
  PlanStats alt_st;
  Plan q = plan_fn(rest, &alt_st);
  if (plan_predict_ms(c, q, len) < plan_predict_ms(c, p, len) - 1e-9) {
    p = std::move(q);
    if (st) *st = alt_st;
  }
}

Plan plan_flexsp(const PlannerContext& step_ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                 const Plan& uniform, PlanClock::time_point t0, PlanStats* st) {
  const int64_t tokens = total_tokens(len);
  auto step = [&](const Candidate& k) { return candidate_step_ms(c, k, len, tokens); };
  std::vector<Candidate> runners_up;
  Candidate first = flexsp_split(step_ctx, c, len, uniform, t0, true, &runners_up);
  const int m = static_cast<int>(first.mbs.size());
  // From here the limit is the share of the first split's step (step_time_limit_ms).
  const PlannerContext ctx = step_limited(step_ctx, step(first));
  Candidate best = local_search(ctx, c, len, std::move(first), t0, st);
  auto try_alternative = [&](Candidate k) {
    PlanStats alt;
    Candidate r = local_search(ctx, c, len, std::move(k), t0, &alt);
    if (step(r) < step(best) - 1e-9) {
      best = std::move(r);
      if (st) *st = alt;
    }
  };
  for (Candidate& k : runners_up)
    if (gate_time_left(ctx, t0)) try_alternative(std::move(k));
  const bool seeded = !ctx.seed_split.empty();
  if (!seeded && gate_wide_passes(ctx, c, len)) {
    const int64_t cap = c.tokens_per_rank * c.world;
    const int fewest = static_cast<int>((tokens + cap - 1) / cap);
    for (const LevelsSpec& s : levels_specs(ctx, m, fewest))
      if (gate_time_left(ctx, t0))
        if (Candidate lv = levels_split(c, len, s.count, s.share, s.widen_first); lv.ok) try_alternative(std::move(lv));
  }
  if (!seeded && gate_sample(ctx, c, len) && gate_time_left(ctx, t0))
    if (Candidate k = sample_split(ctx, c, len, t0); k.ok) try_alternative(std::move(k));
  return finish_passes(ctx, c, len, std::move(best), t0, st);
}

}  // namespace flexsp

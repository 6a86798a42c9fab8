// The last passes of flexsp's search (passes.h: finish_passes), on the winner of the local
// search: per micro-batch the MILPs, then mb_resize. The MILPs go first: their
// compositions start from the greedy plan and can beat the re-sized one.
#include <algorithm>

#include "lib/planner/step/passes.h"

namespace flexsp {

namespace {

// Per micro-batch, within what is left of the time limit (shared evenly by the micro-batches
// not done yet): the class MILP picks group sizes (any scale); the slot MILP, exact, where
// it is small enough to close. A MILP the limit stops proposes nothing.
void finish_milps(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len, Candidate& best,
                  PlanClock::time_point t0, PlanStats* st) {
  const int nmb = static_cast<int>(best.mbs.size());
  for (int k = 0; k < nmb; ++k) {
    auto share = [&] { return (ctx.time_limit_ms - ms_since(t0)) / (nmb - k); };
    if (share() < 1) {  // no time left: greedy stands
      if (st) st->milp_timed_out++;
      continue;
    }
    ComposeOptions co;
    co.time_limit_ms = share();
    MbPlan mp;
    const ComposeStatus cs = mb_compose(c, len, best.mbs[k], best.plans[k], co, &mp);
    if (cs == ComposeStatus::timed_out) {
      if (st) st->milp_timed_out++;
      continue;
    }
    if (st) st->milp_solved++;
    if (cs == ComposeStatus::improved) {
      best.plans[k] = std::move(mp);
      if (st) st->milp_improved++;
    }
    MilpOptions opt;
    opt.max_buckets = ctx.max_buckets;
    opt.time_limit_ms = share();
    opt.max_columns = ctx.milp_max_columns;
    opt.max_nodes = ctx.milp_max_nodes;
    if (opt.time_limit_ms < 1) continue;
    const MilpStatus s = mb_milp(c, len, best.mbs[k], best.plans[k], opt, &mp);
    if (s == MilpStatus::timed_out && st) st->milp_timed_out++;
    if (mp.ok && mp.makespan_ms < best.plans[k].makespan_ms * (1 - 1e-9)) {
      best.plans[k] = std::move(mp);
      if (st) st->milp_improved++;
    }
  }
}

// Each micro-batch's group sizes re-sized (mb_resize, then the pooled uniform plans) while
// the limit lasts; kept when the step is faster (a pipeline prices the plan as a whole).
void finish_resize(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len, Candidate& best,
                   PlanClock::time_point t0, PlanStats* st) {
  const int64_t tokens = total_tokens(len);
  Candidate resized = best;
  int changed = 0;
  best.total_ms = resized.total_ms = 0;  // the MILPs changed plans, not the totals
  for (size_t k = 0; k < resized.plans.size(); ++k) {
    const double before = resized.plans[k].makespan_ms;
    if (ctx.time_limit_ms == 0 || ms_since(t0) < ctx.time_limit_ms) {
      mb_resize(c, len, resized.mbs[k], resized.plans[k], ctx.resize_max_rounds);
      if (ctx.resize_max_rounds > 0)
        if (MbPlan u = mb_pooled(c, len, resized.mbs[k]); u.ok && u.makespan_ms < resized.plans[k].makespan_ms)
          resized.plans[k] = std::move(u);
    }
    if (resized.plans[k].makespan_ms < before) ++changed;
    best.total_ms += c.fixed_ms + before;
    resized.total_ms += c.fixed_ms + resized.plans[k].makespan_ms;
  }
  if (changed > 0 &&
      candidate_step_ms(c, resized, len, tokens) < candidate_step_ms(c, best, len, tokens) - 1e-9) {
    best = std::move(resized);
    if (st) st->resized = changed;
  }
}

}  // namespace

Plan finish_passes(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                   Candidate best, PlanClock::time_point t0, PlanStats* st) {
  if (ctx.use_milp && !len.empty()) finish_milps(ctx, c, len, best, t0, st);
  finish_resize(ctx, c, len, best, t0, st);
  return candidate_plan(best);
}

}  // namespace flexsp

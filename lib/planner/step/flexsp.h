// flexsp's search in one space of group sizes (planner.h, steps 1-3), for plan_step: the
// first split, the local search, the alternatives, the last passes; and the choice between
// two such plans under one time limit. Internal to lib/planner/step/.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lib/planner/planner.h"
#include "lib/planner/step/candidate.h"

namespace flexsp {

// The flexsp plan of len in the space c allows (c may narrow ctx's, as --ring-groups
// needed does); uniform: the best uniform plan's, one split candidate (empty: none).
// ctx.time_limit_ms counts from t0; past the first split the limit is
// step_time_limit_ms of the first split's step (gates.h).
Plan plan_flexsp(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                 const Plan& uniform, PlanClock::time_point t0, PlanStats* st);

// Plans an alternative (plan_fn(context, stats)) with what is left of the time limit t0
// started (step_time_limit_ms of p's step) -- in full at limit 0, not at all when less
// than gates.alternatives_left of it is left -- and keeps it in p (and its stats in st)
// where it is faster.
void plan_keep_faster(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                      PlanClock::time_point t0, Plan& p, PlanStats* st,
                      const std::function<Plan(const PlannerContext&, PlanStats*)>& plan_fn);

}  // namespace flexsp

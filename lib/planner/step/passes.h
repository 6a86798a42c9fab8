// The passes of flexsp's search over a split (planner.h, steps 2-3). Internal to
// lib/planner/step/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/planner/planner.h"
#include "lib/planner/step/candidate.h"

namespace flexsp {

// The local search over a split: the pass table (passes.cpp) run in order, each pass kept
// where the step gets faster, within the local search's share of ctx.time_limit_ms counted
// from t0. st (optional) gets the passes' counters, seeded and greedy_ms.
Candidate local_search(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                       Candidate best, PlanClock::time_point t0, PlanStats* st);

// The local-search passes' names in the order local_search runs them (a pass may run more
// than once: exchange again after a pass that moved sequences).
std::vector<std::string> local_pass_names();

// The last passes on the winner of the local search, within what is left of the limit:
// per micro-batch the MILPs (mb_compose, and mb_milp when asked), then mb_resize.
Plan finish_passes(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                   Candidate best, PlanClock::time_point t0, PlanStats* st);

}  // namespace flexsp

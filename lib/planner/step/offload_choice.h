// The per-micro-batch choice between activation offload and a wider group
// (PlannerContext::offload_choice; offload_choice.cpp says how). Internal to
// lib/planner/step/.
#pragma once

#include <functional>
#include <vector>

#include "lib/planner/step/candidate.h"

namespace flexsp {

// Every micro-batch of p (planned, each flagged as it runs) takes the fastest of: its
// groups as they are, the same groups without offload where they fit, and each side's
// greedy re-plan of its sequences (regroup; otherwise only the flag changes). c: the
// prices with offload_costs. Returns the micro-batches that offload.
int mb_offload_choose(const PlanCosts& c, const std::vector<int64_t>& len, Plan& p, int resize_rounds,
                      bool regroup);

// A plan of len in the space the costs allow (plan_step's modes), its time limit counted
// from t0.
using PlanInSpace =
    std::function<Plan(const PlannerContext&, const PlanCosts&, PlanClock::time_point, PlanStats*)>;

// The step planned without offload (where every sequence fits) and with it, each
// micro-batch then choosing (mb_offload_choose), the faster plan kept.
Plan plan_offload_choice(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                         PlanClock::time_point t0, PlanStats* st, const PlanInSpace& plan_in);

}  // namespace flexsp

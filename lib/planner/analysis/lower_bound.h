// A memory-aware lower bound on a step's predicted time, beside the memory-blind
// plan_lower_bound_ms (lib/planner/cost/plan_costs.h).
//
// The memory-blind bound lets the work of long sequences spread over all ranks and counts
// micro-batches by tokens only (ceil(tokens / (world E))). Long sequences are rigid:
// a group of d devices holds at most floor(d E / L) sequences of L tokens or more, and the
// groups of a micro-batch add up to the world, so one micro-batch holds at most
// world x r(L) of them, r(L) = max over runnable d of floor(d E / L) / d. Hence, with N(L)
// the sequences of at least L tokens:
//   - at least M(L) = ceil(N(L) / (world r(L))) micro-batches hold one of them, so the
//     step has M* = max(token count bound, max over L of M(L)) micro-batches, each
//     paying the fixed cost;
//   - sorting the micro-batches by makespan, the k-th largest is at least
//     g(k) = max { tmin(L) : M(L) >= k } (tmin: the fastest a sequence of L tokens runs on
//     any group that holds it): the makespans add up to at least g(1) + ... + g(M*);
//   - they also add up to at least the memory-blind bound less its own fixed costs
//     (its work term: the least S with (least rank-time of every sequence within S) /
//     world <= S, or the longest sequence alone).
// T >= M* fixed + max(staircase, work). Every term holds for every plan the planner may
// produce (E per device, allowed sizes), so it is a valid bound; it equals the
// memory-blind bound when no sequence is long enough to bind.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/planner/planner.h"

namespace flexsp {

struct MemoryBound {
  double ms = 0;
  int micro_batches = 0;  // M*
  double staircase_ms = 0, work_ms = 0;  // the two makespan terms
};

MemoryBound plan_memory_lower_bound(const PlanCosts& c, const std::vector<int64_t>& lengths);

// The makespan no plan of these sequences as one micro-batch beats (fixed cost not
// included): the memory-blind bound on them, and a device count. With makespan C every
// sequence runs on a group whose size holds it and runs it within C; a sequence that
// takes more than C/2 on every such size shares its group with no other such sequence,
// so these sequences need disjoint groups of at least their smallest such size each,
// which must add up to at most the world. The least C for which they do is a bound: it
// is 17.15 s for three 192K pieces at E = 17114, which need 32-GPU groups to finish
// sooner (the memory-blind bound lets all three use them).
double plan_micro_batch_lower_bound_ms(const PlanCosts& c, const std::vector<int64_t>& lengths);

}  // namespace flexsp

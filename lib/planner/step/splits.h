// The split generators of flexsp's search (planner.h, step 1), each named as the rule that
// builds it. Internal to lib/planner/step/.
//
// flexsp_split, the first split of a step, tries in order:
//  - by count (split_by_count): for each micro-batch count m, the count rules -- dp
//    (contiguous chunks of the length-sorted batch minimizing the sum of per-chunk lower
//    bounds, partition.h), balanced (longest first onto the micro-batch with least work),
//    tiered (pieces wider than half or a quarter of a node stacked, the rest balanced on
//    the devices they leave: mb_split_tiered, under either token cap) -- the best by the
//    sum of fixed + makespan; counts from the fewest that fit memory, extra_micro_batches
//    more, and with a pipeline the counts around the closed form's best (cost/pipeline.h);
//  - uniform: the best uniform plan's split (batch_adaptive's: memory-feasible by
//    construction, where the token-count splits can strand memory in big groups), its
//    groups kept where the greedy plan is not better;
//  - stacked: the pieces that run best on a group of the whole stage in micro-batches of
//    their own, the rest split at its fewest count;
//  - seeded: PlannerContext::seed_split, an experiment's start, replacing all the others.
// The best by the step it makes wins; mb_fill then lets micro-batches with idle devices
// take sequences of the last one.
//
// Alternatives (step/flexsp.cpp) go through the local search too: the runners-up of
// flexsp_split, the levels splits (levels_split) and a sample's split (sample_split).
#pragma once

#include <cstdint>
#include <vector>

#include "lib/planner/planner.h"
#include "lib/planner/step/candidate.h"

namespace flexsp {

// The first split (see above); where the stacked split wins, runners_up (optional) gets
// the best of the others, for the local search to take further too. stack: try the
// stacked split (not for the rest of a stack). Its clock (from t0, under a time limit):
// the first count that fits is always split in full; past it, further counts, rules,
// the uniform and stacked splits and mb_fill's moves stop once gates.first_split_share
// of step_time_limit_ms (of the best candidate so far) is used.
Candidate flexsp_split(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                       const Plan& uniform, PlanClock::time_point t0, bool stack = true,
                       std::vector<Candidate>* runners_up = nullptr);

// The best levels split of m micro-batches (mb_seed_levels; its variants: a level past the
// first at its head's smallest group or twice it, alpha 0.3 or 0.5, beta 0.5 or 1; with
// widen_first every level at twice it), targets against the average micro-batch of the
// least work, pieces sharing groups within `share` of the target; not ok when none is
// built or fits.
Candidate levels_split(const PlanCosts& c, const std::vector<int64_t>& len, int m, double share, bool widen_first);

// A sample's split, for stages where the wide passes do not run (gate_sample): one sequence
// of each run of S by length (its middle; S = world / sample_devices), planned on world / S
// devices with every pass, then replicated as a seed -- each sampled sequence's
// micro-batch and group size given to every sequence of its run. The true fixed cost
// keeps the sample's trade between micro-batches and makespans the batch's.
Candidate sample_split(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                       PlanClock::time_point t0);

}  // namespace flexsp

// A candidate split of one step and what every part of flexsp's search does with one: plan
// its micro-batches greedily, price the step it makes, fill idle devices. Internal to
// lib/planner/step/.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "lib/planner/mb/mb_solver.h"
#include "lib/planner/planner.h"

namespace flexsp {

using PlanClock = std::chrono::steady_clock;
double ms_since(PlanClock::time_point t0);

// Least time and least rank-time of one sequence over the sizes that hold it.
struct SeqBounds {
  double tmin = 0, wmin = 0;
};
SeqBounds seq_bounds(const PlanCosts& c, int64_t l);

// One split of the batch into micro-batches (mbs: indices into the batch), greedily planned.
struct Candidate {
  bool ok = false;
  double total_ms = std::numeric_limits<double>::infinity();  // sum of fixed + makespan
  std::vector<std::vector<int32_t>> mbs;
  std::vector<MbPlan> plans;
  bool seeded = false;  // PlannerContext::seed_split's split
};

// mbs planned with mb_greedy. Stops (not ok) once the sum reaches `beat`, where the caller
// would reject it anyway: the planned micro-batches' sum plus the others' bounds (fixed +
// the longest sequence's least time or the least work over the devices; by_seq: each
// sequence's SeqBounds).
Candidate plan_split(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>> mbs,
                     double beat = std::numeric_limits<double>::infinity(),
                     const std::vector<SeqBounds>* by_seq = nullptr);

// k.total_ms from its plans (after a pass changed them).
void candidate_total(const PlanCosts& c, Candidate& k);

// A candidate's step: with a pipeline, the simulated one (plan_pipeline_ms), else the sum.
double candidate_step_ms(const PlanCosts& c, const Candidate& k, const std::vector<int64_t>& len, int64_t tokens);

// A seed's split (mb_split_seeded under either token cap, its micro-batches planned by
// mb_plan_seeded); not ok where it loses to beat (a sum) or nothing fits.
Candidate seeded_split(const PlanCosts& c, const std::vector<int64_t>& len,
                       const std::vector<std::vector<SeedPiece>>& seed, int64_t tokens, double beat);

// Micro-batches with idle devices take sequences of the last one (mb_fill, until out_of_time
// says so), kept where faster.
void fill_candidate(const PlanCosts& c, const std::vector<int64_t>& len, int64_t tokens, Candidate& k,
                    const std::function<bool()>& out_of_time = {});

Plan candidate_plan(const Candidate& k);

int64_t total_tokens(const std::vector<int64_t>& len);

}  // namespace flexsp

// The gates of flexsp's search: named predicates that decide where its costly parts run,
// their thresholds in PlannerContext::gates (context.h). Internal to lib/planner/step/.
#pragma once

#include <cstdint>
#include <vector>

#include "lib/planner/planner.h"
#include "lib/planner/step/candidate.h"

namespace flexsp {

// The step holds a wide piece: its longest piece's smallest group is wider than
// ranks_per_node / gates.wide_piece_divisor devices.
bool gate_wide_piece(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len);

// The wide passes (the levels splits, mb_resplit) run: a wide piece on a stage of at most
// gates.wide_passes_max_devices devices.
bool gate_wide_passes(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len);

// A sample's split runs instead (step/splits.h, sample_split): a wide piece on a wider
// stage that holds at least two samples of sample_devices, whose groups all fit a sample.
bool gate_sample(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len);

// An alternative may start: no limit, or less than 1 - gates.alternatives_left of it used
// since t0.
bool gate_time_left(const PlannerContext& ctx, PlanClock::time_point t0);

// The time limit of a step predicted at step_ms: time_limit_ms, at most time_step_share of
// step_ms (at least 1 ms, since 0 means no limit). Derived from a predicted time, never the
// clock, so the limit itself is the same in every run.
int step_time_limit_ms(const PlannerContext& ctx, double step_ms);

// ctx with its time limit set for a step predicted at step_ms (step_time_limit_ms).
PlannerContext step_limited(const PlannerContext& ctx, double step_ms);

}  // namespace flexsp

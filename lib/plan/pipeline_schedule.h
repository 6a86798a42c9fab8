// Pipeline schedules (docs/parallel.md): the order in which one stage runs the forwards and
// backwards of a step's pipeline units, and how layers are split over stages. Part of the
// plan's contract: the runtime runs these schedules and the planner prices them, so both
// read them from here (the costs the layer split weighs come from the model:
// lib/model/cut_costs.h).
//
// A unit is a micro-batch (1F1B) or one chunk of a micro-batch (Seq1F1B: micro-batch m,
// chunk j is unit m * chunks + j). Forwards run units in order. Backwards run micro-batches
// in order and, inside one, its chunks in reverse (a chunk's backward adds to the key and
// value gradients of the chunks before it). Each stage runs as Megatron's 1F1B: warm-up
// forwards, then one forward and one backward alternately, then the cool-down backwards.
// The warm-up of stage s of P is P - s - 1 units, plus chunks - 1 so that a micro-batch's
// last chunk has run forward before its first backward. The units a stage holds at once
// (forward done, backward not) are the warm-up plus one: what sizes its activation slots.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flexsp {

struct PipeStep {
  bool forward = true;
  int unit = 0;
};

// The steps of stage `stage` of `stages` for `micro_batches` micro-batches of `chunks`
// chunks each (chunks 1: plain 1F1B).
std::vector<PipeStep> pipeline_schedule(int stages, int stage, int micro_batches, int chunks);
// The most units stage `stage` holds at once over that schedule.
int pipeline_in_flight(int stages, int stage, int micro_batches, int chunks);

// Layers per stage: `given` (parallel.pp_layers, may be empty) or the contiguous split
// whose costliest stage costs least (ties: the earliest such cut), a layer costing 1, the
// embedding `first_cost` on the first stage and the head and loss `last_cost` on the last
// (pipeline_edge_costs, lib/model/cut_costs.h).
// Throws Error naming parallel.pp_size / pp_layers when a stage would get no layer or the
// list does not sum to `layers`.
std::vector<int> pipeline_layers(int layers, int stages, const std::vector<int>& given,
                                 double first_cost, double last_cost);

// One line: "stage 0: layers 0-3 (+embedding), stage 1: layers 4-7 (+head)".
std::string pipeline_describe(const std::vector<int>& stage_layers);

}  // namespace flexsp

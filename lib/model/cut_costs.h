// The model's costs that the plan's cut rules weigh: Seq1F1B's chunk cuts
// (lib/plan/seq_chunk_cuts.h) and the pipeline's layer split (lib/plan/pipeline_schedule.h).
// Counted from the shape alone (GEMM and attention work per layer), so the runtime that cuts
// and the planner that prices the cuts get the same numbers.
#pragma once

#include "lib/model/model_config.h"

namespace flexsp {

// The cost coefficients of model c per layer (this rank's shape): lin per token, att per
// (query, key) pair.
void seq_chunk_costs(const ModelConfig& c, double* lin, double* att);

// The embedding's and the head's (with the loss) cost in layers, by GEMM work: the
// embedding is a lookup (its share of a layer's GEMM work: none, counted as 0), the head
// vocab x hidden against a layer's weights.
void pipeline_edge_costs(const ModelConfig& mc, double* first, double* last);

}  // namespace flexsp

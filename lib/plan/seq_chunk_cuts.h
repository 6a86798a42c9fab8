// Seq1F1B's cut of a sequence into chunks (docs/parallel.md): part of the plan's contract,
// since the runtime cuts micro-batches by it (lib/runtime/seq_chunks.h) and the planner
// prices and sizes the chunks it makes.
//
// Chunk j of a micro-batch holds the j-th segment of every sequence. Segments are cut so
// that chunks cost about the same under causal attention: a prefix of t tokens costs
// lin * t + att * t^2 / 2 (the GEMMs, and each query's keys), and cut point j is where that
// reaches j / chunks of the sequence's cost. Short sequences leave some segments empty.
// The coefficients are the model's (seq_chunk_costs, lib/model/cut_costs.h).
#pragma once

#include <cstdint>
#include <vector>

namespace flexsp {

// Cut points 0 = b_0 <= ... <= b_chunks = n of one sequence of n tokens.
std::vector<int64_t> seq_chunk_bounds(int64_t n, int chunks, double lin, double att);

}  // namespace flexsp

// The compute terms of the cost model (lib/planner/cost/cost_model.h) fitted to timed probes:
// what `flexsp profile` measures and this module turns into fixed_ms, per_sequence_ms,
// a2_ms and a1_ms.
//
// A probe is one forward + backward of a packed micro-batch (k sequences of lengths s_i)
// on a group of d ranks, timed as training runs it, less its all-to-alls as the cost model
// prices them (comm_ms). The model is
//     ms - comm_ms = fixed + per_sequence k + a2 (sum s_i) / d + a1 (sum s_i^2) / d,
// fitted by least squares with every term >= 0 (the subsets of terms that keep a2, the
// best one with no negative term: clamping a negative term after an unconstrained fit
// fits badly). One-sequence probes alone cannot tell fixed from per_sequence (k = 1 in
// all of them): compute_probe_mixes adds packed micro-batches of equal tokens and growing
// k, which is what training runs (many short documents in one micro-batch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace flexsp {

struct ComputeProbe {
  std::vector<int64_t> lens;  // the packed sequences
  int d = 1;                  // ranks of the group
  double ms = 0;              // measured (slowest rank, median over repeats)
  double comm_ms = 0;         // its all-to-alls as the cost model prices them
};

struct ComputeFit {
  double fixed_ms = 0, per_sequence_ms = 0, a2_ms = 0, a1_ms = 0;
  double rms = 0;  // relative RMS error of the fit over the probes (of ms, comm included)
  double predict_ms(const ComputeProbe& p) const;
};

// The micro-batches a profile over lengths `lens` (ascending, >= 3 of them) times on each
// group size: every length alone, and for each shorter length s, floor(longest / s)
// sequences of s packed (at most `max_pack`, at least 2): equal tokens, growing k.
std::vector<std::vector<int64_t>> compute_probe_mixes(const std::vector<int64_t>& lens, int max_pack = 8);

// Throws Error when the probes cannot determine a2 (fewer than 2 distinct token counts).
ComputeFit fit_compute(const std::vector<ComputeProbe>& probes);

// Least squares of y on the columns of X with every coefficient >= 0 over the subsets of
// columns that keep column `keep` (0 for dropped columns). Throws Error when singular.
std::vector<double> nonneg_least_squares(const std::vector<std::vector<double>>& X,
                                         const std::vector<double>& y, size_t keep);

}  // namespace flexsp

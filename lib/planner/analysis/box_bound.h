// A lower bound on a step's time by branch and bound over the micro-batch makespans: the
// memory-aware bound (lower_bound.h) prices every sequence's least work as if any
// group could take it at any time; the strong bound (strong_bound.h) couples groups, memory
// and makespans in one MILP that CBC cannot close at 1024 GPUs. This one fixes what makes
// a plan hard -- the makespans -- by search, and relaxes the rest to an LP.
//
// A plan of M micro-batches has makespans T_1 >= ... >= T_M. In a box lo <= T <= hi the LP
// keeps, per micro-batch k and group size d (times in s, tokens in units of E):
//   groups:   n[k,d] >= 0 (continuous), sum_d d n[k,d] <= world
//   placement: x[c,k,d] sequences of length class c (classes of long_width / short_width
//             relative length, priced at their shortest member), only where t(c,d) <= hi_k
//             and d holds c; every class placed
//   memory:   sum_c L_c x <= d n                                        (each group holds d E)
//   time:     v[k,d], the d-groups' device-time: sum_c d t(c,d) x <= v; v = d n T_k, relaxed
//             to d n lo_k <= v <= d n hi_k and v <= d (T_k W/d + lo_k n - lo_k W/d)
//             (McCormick: n <= W/d); sum_d v[k,d] <= world T_k; and over all micro-batches
//             sum v >= every sequence's least work (exact lengths)
//   packing:  per (k,d), dual feasible functions of the pieces' memory (L / dE) and time
//             (t / hi_k, at most their share of T_k): pieces over half count 1, and for
//             lambda in {0.1 .. 0.4} those over 1 - lambda 1, between lambda and 1 - lambda
//             their share, the rest 0; each sum <= n[k,d]
//   order:    T_k >= T_k+1, sum_k T_k <= U_M (the given plan's makespans less M fixed)
// and minimizes sum_k T_k. Every plan of M micro-batches with makespans in the box is a
// solution (its groups, counts and sequences), so the LP's optimum bounds its sum; a box
// with no solution holds no plan faster than the given one. Boxes split at the LP's T_k
// of their widest side (at least a tenth in); children keep the order (T_j >= T_k, j < k).
// One best-first search over (M, box) for M = M* .. the largest count whose memory-aware
// floor (M fixed + the makespan terms) is below the given plan; past it the floor holds.
// The bound: min(the given plan, the least open box) -- valid whenever the time limit
// stops the search; the search ends early when no open box is below the given plan. An
// LP the limit stops gives its box the box's own floor (the sum of lo). Pipelines: the sum is priced as the other bounds (PlanCosts::step_ms).
#pragma once

#include <cstdint>
#include <vector>

#include "lib/planner/planner.h"

namespace flexsp {

struct BoxBoundOptions {
  double time_limit_ms = 10000;
  double long_width = 0.01;   // class width (relative length) of sequences over E tokens
  double short_width = 0.10;  // and of the others
};

struct BoxBoundCount {
  int micro_batches = 0;
  double bound_ms = 0;  // M fixed + the least open box's sum (the given plan's sum: none open)
  int boxes = 0;        // LPs solved
};

struct BoxBound {
  double ms = 0;         // the bound on the step time
  double sum_ms = 0;     // on the sum of micro-batch times (before the pipeline's price)
  double memory_ms = 0;  // the memory-aware bound, for comparison
  bool closed = false;   // no box below the given plan: no plan beats it
  int boxes = 0, classes = 0;
  double solve_ms = 0;
  std::vector<BoxBoundCount> counts;
};

// upper_sum_ms: a plan's sum of micro-batch times (plan_sum_ms); must be > 0.
BoxBound plan_box_lower_bound(const PlanCosts& c, const std::vector<int64_t>& lengths, double upper_sum_ms,
                              const BoxBoundOptions& opt = {});

}  // namespace flexsp

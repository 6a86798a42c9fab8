// A stronger lower bound on a step's time for memory-bound batches: a MILP over
// micro-batch makespans, solved on CBC, whose proven best bound (valid even when the time
// limit stops CBC) no plan of the planner beats.
//
// The memory-aware bound (lower_bound.h) lets every sequence use any part of the step's
// total; this one couples, per micro-batch k, its makespan T_k, the groups it has and the
// memory they hold. Sequences fall into length classes whose sizes that hold them are the
// same (classes never straddle d E or the ring rule). Long classes (least time at least
// long_fraction of an average micro-batch) get integer counts x[c,k,d] on groups of d
// devices, priced at the class's shortest length; short classes get continuous tokens,
// priced per token at the least rate d t(s,d)/s of their members (so splitting them
// fractionally only lowers the bound). Per micro-batch (times in s, tokens in units of E):
//   groups:   n[k,d] integer, sum_d d n[k,d] <= world
//   memory:   tokens on d-groups <= d n[k,d]                         (each holds d E)
//   work:     sum_d d (time on d-groups) <= world T_k
//   per size: time on d-groups <= n[k,d] T_k, exact through n = sum_j 2^j z_j, w_j <= T_k,
//             w_j <= U z_j (sizes a long class uses; U below)
//   per long: T_k >= t(c,d) when a class-c piece runs on d (a piece alone in its class:
//             T_k >= sum_d t(c,d) x[c,k,d], it runs on one size); more pieces of time >= tau on d
//             than d-groups put two in one group, so T_k >= 2 tau; a d-group holds at most
//             floor(d E / L) pieces of L tokens or more
//   memory packing: per d-group, pieces over 1 - lambda of d E count 1, those between
//             lambda and 1 - lambda their share (a dual feasible function): <= d-groups
//   patterns: per size, the sets of long pieces one group can hold (memory, and time
//             within U); y[k,d,p] groups use set p, sum_p y <= n[k,d], the long counts are
//             the sets' sums, and T_k >= the time of each set used (up to max_patterns
//             sets per size; past that the size keeps the rows above only)
//   symmetry: long pieces numbered longest first, micro-batches by the first piece they
//             hold (micro-batches are interchangeable): piece j sits in micro-batch <= j
// The micro-batches past the first K are pooled (the last run only): q >= 0 of them, q
// world devices, makespans summing to T_pool, q fixed costs; so one run covers every count
// from K on. Runs: K = M* .. M* + explicit_extra (M*: the memory-aware bound's least count),
// the last pooled; the bound is the least over runs of K fixed + the run's best bound.
// Restrictions that only drop plans no better than the given one (upper_sum_ms, a plan's
// sum of micro-batch times): the makespans sum to at most U = upper - K fixed (the big-M
// of the per-size rows). Also sum of makespans >= the memory-aware makespan term,
// so the bound never falls below the memory-aware one. With a pipeline the sum bound is
// priced like the other bounds (PlanCosts::step_ms at one micro-batch per sequence).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/plan/plan.h"
#include "lib/planner/planner.h"

namespace flexsp {

struct StrongBoundOptions {
  double time_limit_ms = 10000;  // all runs together (CBC's elapsed time), split evenly
  int explicit_extra = 0;        // runs K = M* .. M* + explicit_extra; the last pools the rest
  double long_fraction = 0.25;   // long: least time >= this x (memory-aware makespan / M*)
  double long_width = 0.02;      // class width (relative length), long classes
  double short_width = 0.15;     // and short ones
  int max_patterns = 300;        // per size: sets of long pieces a group holds; more: none
};

struct StrongBoundRun {
  int micro_batches = 0;      // K explicit micro-batches
  bool pooled = false;        // plus any number more, pooled
  double bound_ms = 0;        // K fixed + CBC's best bound (inf: infeasible)
  double incumbent_ms = 0;    // K fixed + CBC's best solution (inf: none)
  std::string status;         // optimal | time_limit | node_limit | infeasible | failed
  double solve_ms = 0;
  // The incumbent: each micro-batch's makespan (the pool last) and its groups ("d16x3" for
  // three 16-device groups) with the long classes on them ("196609x3": shortest length, count).
  std::vector<double> makespans_ms;
  std::vector<std::string> incumbent_groups;
  // The incumbent's split into micro-batches of real sequences (its long pieces as counted,
  // short ones dealt by its token shares within world E), each planned by mb_greedy and the
  // class MILP (mb_compose, 2 s): the sum of micro-batch
  // times of a real plan (inf: a micro-batch does not fit; 0: no incumbent).
  double split_plan_ms = 0;
  // The incumbent's long pieces as real sequences on their sizes, one entry per micro-batch
  // that holds anything (long or not) (the pool's dealt round robin over its micro-batches): a seed split
  // (PlannerContext::seed_split) that leaves the rest to the planner.
  std::vector<std::vector<SeedPiece>> long_pieces;
  // Aligned with long_pieces: the other sequences as the split above deals them.
  std::vector<std::vector<int32_t>> fluid_split;
};

struct StrongBound {
  double ms = 0;         // the bound on the step time
  double sum_ms = 0;     // on the sum of micro-batch times (before the pipeline's price)
  double memory_ms = 0;  // the memory-aware bound, for comparison
  bool proven = false;   // every run closed (bound = optimum of the relaxation)
  int long_classes = 0, short_classes = 0, long_sequences = 0;
  std::vector<StrongBoundRun> runs;
};

// upper_sum_ms: a plan's sum of micro-batch times (plan_sum_ms); must be > 0.
StrongBound plan_strong_lower_bound(const PlanCosts& c, const std::vector<int64_t>& lengths,
                                    double upper_sum_ms, const StrongBoundOptions& opt = {});

// A plan's sum of micro-batch times (fixed + makespan each): plan_predict_ms before the
// pipeline's price.
double plan_sum_ms(const PlanCosts& c, const Plan& p, const std::vector<int64_t>& lengths);

}  // namespace flexsp

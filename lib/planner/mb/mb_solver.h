// The micro-batch solvers and the passes over a split (lib/planner/mb/), each in the file
// named as it. A plan of one micro-batch: aligned power-of-two SP groups covering all
// devices, each sequence on one group, minimizing the makespan (the slowest group's summed
// seq_ms; the fixed per-micro-batch cost is the same for every plan and left out here).
//
// Solvers of one micro-batch:
//  - mb_greedy: bisection on a target makespan C; for a given C, sequences longest first
//    go onto an open group of the smallest size d that runs them within C (best fit), or
//    open a new one while ranks remain, or spill onto a larger open group. The smallest
//    feasible C fixes the group sizes; the sequences are then re-assigned longest-first
//    onto the least-loaded feasible group (finish-time LPT) and polished by moving
//    sequences off the critical group; the better of the two assignments wins.
//  - mb_resize: a plan's group sizes merged, split or widened, each re-assigned.
//  - mb_milp: the exact model over length buckets (partition.h) on CBC: slots of every
//    size d (binary "used"), integer bucket counts per slot, sum of d over used slots <=
//    world, per-slot memory and time rows, minimize C; symmetry broken by slot order. Warm
//    started with the greedy plan; one thread, fixed seed, elapsed-time limit.
//  - mb_compose: the group sizes from a MILP over size classes and buckets (counts, not
//    slots: small enough for CBC at any scale), bisected on the makespan; each composition
//    it finds is assigned by mb_assign on the real lengths.
//  - mb_place (mb_greedy.cpp): node-aware placement. Groups go largest first onto the
//    lowest aligned free block that does not span nodes (unless d > ranks per node); free
//    ranks become idle groups of 1. Largest-first makes small groups fill what large ones
//    leave of a node.
// Splits of a batch (mb_split.cpp): tiered, seeded and the levels seeds.
// Passes over a split (the step's local search, lib/planner/step/passes.cpp): mb_fill,
// mb_partner, mb_unload, mb_dissolve, mb_exchange (and its swap round), mb_resplit.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lib/plan/plan.h"
#include "lib/planner/context.h"
#include "lib/planner/cost/plan_costs.h"

namespace flexsp {

struct MbPlan {
  bool ok = false;
  std::vector<PlanGroup> groups;  // placed: sorted by first, covering [0, world)
  double makespan_ms = 0;         // max over groups of summed seq_ms
};

// seqs: indices into len. ok = false when no plan fits memory.
MbPlan mb_greedy(const PlanCosts& c, const std::vector<int64_t>& len,
                 const std::vector<int32_t>& seqs);

// mb_greedy, and for a micro-batch at least 90% full to the token also uniform groups of
// each size within a node (mb_assign), the fastest kept: uniform groups pool memory where
// the bisection, opening each sequence's smallest group, strands tokens
// (docs/planner.md). mb_dissolve, which fills micro-batches, uses it; the last re-sizing
// tries mb_pooled, the uniform plans alone (not ok below 90% full or where none fits).
MbPlan mb_greedy_pooled(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& seqs);
MbPlan mb_pooled(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& seqs);

// Assigns seqs longest first onto groups of the given sizes (least finish time, memory
// permitting), then polishes; sizes need not cover the world (mb_place adds idle ranks).
MbPlan mb_assign(const PlanCosts& c, const std::vector<int64_t>& len,
                 const std::vector<int32_t>& seqs, const std::vector<int>& sizes);

// Re-sizes the groups of p (a plan of seqs): two groups of d merged into one of 2d, one
// split into two of d/2, or one doubled into idle ranks; each such set of sizes is
// assigned as mb_greedy assigns (finish-time LPT, and best fit under a bisected
// makespan) and the best that lowers the makespan is kept, at most max_rounds times; not
// tried within 0.1% of the least work. mb_greedy's bisection opens each sequence's
// smallest size that meets the target, so it misses groups wider than any one sequence
// needs (docs/planner.md).
void mb_resize(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& seqs, MbPlan& p,
               int max_rounds);

// Moves sequences off the critical group while that lowers the makespan (memory kept).
void mb_improve(const PlanCosts& c, const std::vector<int64_t>& len, MbPlan& p);

// Places groups (their `first` is overwritten) and pads with idle groups of 1; sorts by
// first. False when they do not fit.
bool mb_place(const PlanCosts& c, std::vector<PlanGroup>& groups);

// Moves sequences of the last micro-batch (mbs and plans in step) into earlier micro-batches
// that have idle devices and whose greedy plan then is no slower (mb_fill.cpp), at most
// max_tries plans or until out_of_time (optional) says so; drops the
// last micro-batch when it empties. Returns whether anything moved; the caller compares
// the step times (the last micro-batch is re-planned, greedy plans are not monotone).
bool mb_fill(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
             std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time = {});

// Removes the empty micro-batches (and their plans) that the local-search passes leave,
// keeping at least one (mb_split.cpp).
void mb_drop_empty(std::vector<std::vector<int32_t>>& mbs, std::vector<MbPlan>& plans);
// The token caps a split of `tokens` into m micro-batches tries: memory (world E), and
// halfway between it and an even share, so that micro-batches keep room for small groups.
std::vector<int64_t> mb_token_caps(const PlanCosts& c, int64_t tokens, int m);
// Sequences longest first, equal lengths in their given order (stable): seqs, or the
// whole batch's indices 0 .. len.size() - 1 (mb_split.cpp).
std::vector<int32_t> mb_longest_first(const std::vector<int64_t>& len, std::vector<int32_t> seqs);
std::vector<int32_t> mb_longest_first(const std::vector<int64_t>& len);
// The micro-batches' indices, slowest first (stable): the order the local-search passes
// take sources in (mb_split.cpp).
std::vector<size_t> mb_slowest_first(const std::vector<MbPlan>& plans);

// Partners for the slack of every group (mb_partner.cpp): a group that finishes before its
// micro-batch's makespan (a wide piece alone on the group its memory needs, an idle rank)
// takes sequences of another micro-batch that fit its memory and finish within that
// makespan, so its micro-batch is no slower. Per source micro-batch (slowest first),
// everything of it that fits such slack moves at once (longest first, best fit), the
// source is re-planned with mb_greedy and the move is kept when its makespan drops (or it
// empties: it is dropped, its fixed cost saved). Repeats until no source gains, max_tries
// sources were re-planned, or out_of_time() (optional). Returns the moves kept.
int mb_partner(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
               std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time = {});

// Dissolves one micro-batch (mb_dissolve.cpp): the fastest ones first (at most max_tries),
// its sequences spread longest first over the others by estimated finish (token room
// permitting), those re-planned with mb_greedy; kept when the sum of makespans plus fixed
// costs drops. Returns 1 when one was dissolved, else 0.
int mb_dissolve(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
                std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time = {});

// The micro-batches whose bound is one sequence's time alone T (its least time, not below
// their least work over the devices) and whose makespan exceeds it (mb_unload.cpp): that
// sequence alone on its fastest group, beside it the longest prefix of the others (longest
// first) that runs within T, the rest spread over the other micro-batches (longest first
// onto the one that would finish earliest, token room permitting, those re-planned with
// mb_greedy) or into a micro-batch of its own, the cheaper; kept where the sum of fixed
// costs and makespans drops. Slowest first, at most max_tries micro-batches tried, or
// out_of_time(). Returns the micro-batches unloaded.
int mb_unload(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
              std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time = {});

// The split of a memory-bound batch into m micro-batches that stacks the pieces whose
// smallest group is wider than wide_from devices (a staircase) and balances the rest by
// estimated makespan on the devices they leave, at most token_cap tokens per micro-batch
// (mb_split.cpp); {} when it finds none.
std::vector<std::vector<int32_t>> mb_split_tiered(const PlanCosts& c, const std::vector<int64_t>& len, int m,
                                                  int64_t token_cap, int wide_from);

// The split whose micro-batch k holds seed[k] first (each piece on groups of its size;
// pieces of one size share a group while its memory holds them; size 0: on any group,
// after the sized ones) and then the rest,
// longest first, onto the micro-batch whose estimated makespan (its longest fixed group's
// time, or all its rank-time over the world) grows least within token_cap (mb_split.cpp);
// {} when the seed is invalid or something does not fit. sizes (optional): per
// micro-batch, the groups the seed opened.
std::vector<std::vector<int32_t>> mb_split_seeded(const PlanCosts& c, const std::vector<int64_t>& len,
                                                  const std::vector<std::vector<SeedPiece>>& seed,
                                                  int64_t token_cap, std::vector<std::vector<int>>* sizes = nullptr);
// Pairs of micro-batches pooled and split again (mb_resplit.cpp): the tiered splits, a
// balanced split by least work and the levels seeds at m = 2, and one micro-batch where the
// pool's tokens fit; each planned greedily, the best replacing the pair when the pair's
// fixed costs plus makespans drop. Slowest first, until a sweep finds nothing, max_tries
// pairs or out_of_time(). Returns the pairs replaced.
int mb_resplit(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
               std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time = {});

// Levels (mb_split.cpp): a seed of m micro-batches built longest first. Micro-batch k's
// longest remaining piece sets its target, its time on its smallest group (k > 0, or every
// k with widen_first: that size doubled `widen` times); pieces after it take the narrowest
// group that runs them within the target while devices last, until one would take under
// alpha x the target.
// Stops at a target under beta x avg_ms (the rest is filler); the remaining micro-batches
// are empty. share > 0: a piece with no devices left joins the level's first group of a
// size that holds it whose memory holds both and whose time stays within (1 + share) x
// the target (a long piece may pair with one about as long beside the widest pieces).
// widen_first: the first level too (a heavy tail's longest pieces on wider groups, the
// next ones in a level of their own rather than all of them beside the longest).
// {} when no level is built.
std::vector<std::vector<SeedPiece>> mb_seed_levels(const PlanCosts& c, const std::vector<int64_t>& len, int m,
                                                   double avg_ms, int widen, double alpha, double beta,
                                                   double share = 0, bool widen_first = false);
// A plan of a seeded micro-batch (its first `fixed` sequences the seed's sized pieces, on
// groups of `sizes`): those groups plus the greedy groups of the rest on the devices they leave,
// assigned by mb_assign, or mb_greedy's plan where faster (the seed's groups are the
// incumbent's; mb_greedy's bisection picks its own and may not fit them).
MbPlan mb_plan_seeded(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& seqs,
                      size_t fixed, const std::vector<int>& sizes);

// Local search over the split (mb_exchange.cpp): moves a sequence of the slowest
// micro-batch's critical group into a faster micro-batch, sending back shorter sequences
// of about the tokens it lacks, re-plans both with mb_greedy and keeps the exchange when
// their makespans' sum drops; repeats until no exchange helps, max_tries pairs were
// re-planned, or out_of_time() (optional) says so. Micro-batches that empty are dropped.
// any_dst: slower micro-batches are destinations too (after the faster ones), and besides
// the plain move up to two swaps are tried, one of dst's longest sequences shorter than
// the moved one (and at least half of it) going back: e.g. a 133K piece pairing with a
// 138K one beside 192K pieces, which makes that micro-batch slower and another faster.
// Returns the number of exchanges kept; every plan left is mb_greedy's or the caller's.
int mb_exchange(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
                std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time = {},
                bool any_dst = false);

enum class MilpStatus { optimal, node_limit, timed_out, too_large, failed };
const char* milp_status_name(MilpStatus s);

struct MilpOptions {
  int max_buckets = 16;
  double time_limit_ms = 1000;
  int64_t max_columns = 12000;
  int max_nodes = 1000;  // a deterministic bound next to the time limit
};

// plan: the MILP's plan (ok when CBC has a solution: optimal, or its best when the node
// or time limit stopped it). warm: the greedy plan it starts from (ignored unless ok).
MilpStatus mb_milp(const PlanCosts& c, const std::vector<int64_t>& len,
                   const std::vector<int32_t>& seqs, const MbPlan& warm,
                   const MilpOptions& opt, MbPlan* plan);

enum class ComposeStatus { improved, no_better, timed_out };

struct ComposeOptions {
  int max_buckets = 24;
  int max_probes = 10;        // bisection steps on the makespan
  double tolerance = 5e-3;    // stop when the bracket is this close (relative)
  int max_nodes = 100;       // per probe: deterministic
  double time_limit_ms = 1000;  // a guard only: on time-out nothing is proposed
};

// plan gets a plan better than warm (status improved), else stays empty.
ComposeStatus mb_compose(const PlanCosts& c, const std::vector<int64_t>& len,
                         const std::vector<int32_t>& seqs, const MbPlan& warm,
                         const ComposeOptions& opt, MbPlan* plan);

}  // namespace flexsp

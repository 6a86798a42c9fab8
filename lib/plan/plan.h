// A step's execution plan (docs/parallel.md): micro-batches; in each, the ranks cut into SP
// groups -- aligned blocks of d ranks, d a power of two -- and every sequence of the
// micro-batch assigned to exactly one group. Rank 0 decides a plan (the planner, or a
// fixed rule for sp_mode static), validates it, and broadcasts it as a flat int64 array,
// so every rank executes the same plan. Sequences are named by their index in the step's
// global batch (lib/data/sampler.h), so a plan says nothing about tokens and any plan
// over the same batch trains the same step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/plan/context_parallel.h"

namespace flexsp {

class Comm;

struct PlanGroup {
  int first = 0;             // first rank; a multiple of size
  int size = 1;              // d: a power of two
  std::vector<int32_t> seqs; // indices into the global batch, in packing order
};

struct PlanMicroBatch {
  std::vector<PlanGroup> groups;  // disjoint, covering ranks [0, world), sorted by first
  // Activation offload in this micro-batch (train.offload: every micro-batch with
  // `checkpoints`, the planner's choice per micro-batch with `auto`; docs/offload.md).
  bool offload = false;
};

struct Plan {
  std::vector<PlanMicroBatch> micro_batches;
  double predicted_ms = 0;  // the planner's estimate (0: none)
};

// What a plan must respect. A limit of 0 means "unchecked".
struct PlanLimits {
  int world = 1;
  int ranks_per_node = 1;
  int heads = 0;                   // per tp rank; 0: unchecked
  int kv_heads = 0;                // per tp rank; 0: unchecked
  int64_t max_tokens_per_rank = 0; // a group of d ranks holds at most d * this many tokens
  int64_t max_tokens_per_rank_offload = 0;  // the same in a micro-batch with offload; 0: the same
  // How a group runs (context_parallel.h): with ulysses, d must divide heads and d divide
  // kv_heads or kv_heads divide d; the other modes run any d (a ring for what Ulysses
  // cannot take).
  CpMode cp_mode = CpMode::ulysses;
};

// Whether Ulysses can run a group of d ranks: d divides the heads, and d divides the kv
// heads (each rank takes kv_heads/d) or kv_heads divides d (d/kv_heads ranks share one).
bool sp_group_runnable(int heads, int kv_heads, int d);

// Throws Error naming the first violation: a rank in no group or two, a misaligned or
// non-power-of-two group, a group spanning nodes although d <= ranks_per_node, d not
// dividing heads, a sequence assigned never or twice, a group over its memory bound.
void plan_validate(const Plan& p, const std::vector<int64_t>& seq_lengths,
                   const PlanLimits& limits);

// Flat form for broadcasting and storing; plan_decode(plan_encode(p)) == p.
std::vector<int64_t> plan_encode(const Plan& p);
Plan plan_decode(const std::vector<int64_t>& flat);

// Rank `root`'s plan on every rank of comm (collective).
void plan_broadcast(Plan& p, Comm& comm, int root);

// The group of `rank` in micro-batch mb.
const PlanGroup& plan_group_of(const PlanMicroBatch& mb, int rank);

// One line per micro-batch: "mb 0: [0-3] d=4 2 seqs 8190 tok | [4] d=1 ...".
std::string plan_describe(const Plan& p, const std::vector<int64_t>& seq_lengths);

// Every sequence on groups of the same size d, longest first onto the least-loaded group
// (by tokens), in one micro-batch or, with max_tokens_per_rank, as many as memory needs.
// sp_mode = static, and the simplest valid plan.
Plan plan_static(const std::vector<int64_t>& seq_lengths, int world, int d,
                 int64_t max_tokens_per_rank);

}  // namespace flexsp


// The context resolved into the numbers the search prices plans with (docs/planner.md).
//
// A group of d = u x r devices (cp_split): compute (a1 s^2 + a2 s) / d + per_sequence
// (every device of the group pays it, the cost model's per_sequence_ms); the Ulysses
// all-to-all over u at the bandwidth of a u-wide group (none for u = 1); for r > 1 the
// attention part a1 s^2 / d runs as r ring steps, each max(its block's attention, the
// transfer of a k/v block), the first without a transfer. Groups wider than the widest
// Ulysses group (ulysses_max) hold any sequence (the default), or with
// PlannerContext::ring_only_when_needed only sequences that a ulysses_max-wide group
// cannot (wide_from, holds()): the ring where memory requires it, not as a speed-up.
// The rule is costly at scale: pieces that fit a heads-wide group but take a minute
// there cannot spread wider, nor can shorter sequences share the wide groups.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "lib/plan/plan.h"
#include "lib/planner/context.h"
#include "lib/planner/cost/pipeline.h"

namespace flexsp {

struct PlanCosts {
  int world = 1, ranks_per_node = 1;  // devices (of one pipeline stage)
  int64_t tokens_per_rank = 0;  // E, per device
  double fixed_ms = 0, a1 = 0, a2 = 0, per_sequence_ms = 0;
  double model_state_gb = 0;
  bool offload = false;  // activation offload in every micro-batch (memory and a2 include it)
  // PlannerContext::offload_choice: the prices of a micro-batch with offload (this object's
  // are those without); null where every micro-batch runs as `offload` says.
  std::shared_ptr<const PlanCosts> offload_costs;
  std::vector<int> sizes;                  // allowed d, ascending: powers of two (cp_group_runnable)
  std::vector<double> comm_ms_per_token;   // by log2(d): Ulysses bytes per token / (d bw(u)), ms
  std::vector<int> ring_r;                 // by log2(d): ring length r (1: Ulysses only; empty: all 1)
  std::vector<double> ring_ms_per_token;   // by log2(d): one ring step's transfer per token of s
  int ulysses_max = 1 << 30;               // widest allowed d with r = 1
  int64_t wide_from = 0;                   // wider groups hold only sequences longer than this
  // Pipeline: the stage's share of a micro-batch's work and the boundary traffic per token.
  PipelineLayout pipeline;
  double stage_share = 1;
  double pp_ms_per_token = 0;  // per token of the stage's batch (spread over its devices), both ways
  // The simulated step (plan_pipeline_ms): each stage's share of a unit's attention and of
  // the rest (pp_stage_shares), the forward's share of a unit's time, Seq1F1B's cut.
  std::vector<double> stage_attn, stage_rest;
  double forward_share = 1.0 / 3;
  double chunk_lin = 0, chunk_att = 0;

  double seq_ms(int64_t s, int d) const {
    const double x = static_cast<double>(s);
    const unsigned k = __builtin_ctz(unsigned(d));
    const double attn = a1 * x * x / d, rest = a2 * x / d + per_sequence_ms + comm_ms_per_token[k] * x;
    const int r = k < ring_r.size() ? ring_r[k] : 1;
    if (r <= 1) return attn + rest;
    const double step = attn / r;
    return rest + step + (r - 1) * std::max(step, ring_ms_per_token[k] * x);
  }
  // Whether a group of d devices may hold a sequence of s tokens (memory, ring rule above).
  bool holds(int64_t s, int d) const {
    return s <= tokens_per_rank * d && (d <= ulysses_max || s > wide_from);
  }
  bool inter_node(int d) const { return d > ranks_per_node; }
  // The prices of micro-batch mb: offload_costs where it offloads.
  const PlanCosts& of(const PlanMicroBatch& mb) const {
    return mb.offload && offload_costs ? *offload_costs : *this;
  }
  int min_size(int64_t s) const;  // smallest allowed d that holds s; 0 if none
  double least_work(int64_t s) const;  // least d x seq_ms(s, d) over the d that hold s; inf if none
  double least_ms(int64_t s) const;    // least seq_ms(s, d) over the d that hold s; inf if none
  int max_size() const { return sizes.back(); }
  // The step time of micro-batch times summing to sum_ms over m micro-batches and
  // `tokens` tokens: sum_ms itself without a pipeline, else pipeline.h's price.
  double step_ms(double sum_ms, int m, int64_t tokens) const;
  // The same without the bubble: the stage's share of sum_ms plus the boundary traffic.
  double unpipelined_ms(double sum_ms, int64_t tokens) const;
  // No simulated step (plan_pipeline_ms) of micro-batch times summing to at least sum_ms is
  // shorter: some stage s runs every unit at min(its attention, its rest share) of the
  // unit's time or more, the last stage waits for the first unit's forwards and the
  // first for the last unit's backwards (each at least fixed x the stage's rest share).
  // Sends and the rest of the bubble are left out: a plan's units may be uneven.
  double step_lower_ms(double sum_ms) const;
};

// Throws Error when the memory holds no activations or no group size is allowed. With
// ctx.offload_choice: the prices without offload and, in offload_costs, with it where that
// holds more tokens per device; the offload side alone where nothing fits without it.
PlanCosts plan_costs(const PlannerContext& ctx);
PlanLimits plan_limits(const PlannerContext& ctx, const PlanCosts& c);
// With offload_costs: the prices without offload and the memory with it -- no plan of
// either layout, nor a mix, is faster under these (the costs of a lower bound).
PlanCosts plan_costs_relaxed(const PlanCosts& c);

// Makespan of placed groups: the slowest group's summed seq_ms (the fixed cost of the
// micro-batch not included).
double mb_makespan(const PlanCosts& c, const std::vector<int64_t>& len,
                   const std::vector<PlanGroup>& groups);

// Predicted step time of any plan under the cost model (the pipeline's price included:
// plan_pipeline_ms).
double plan_predict_ms(const PlanCosts& c, const Plan& p, const std::vector<int64_t>& lengths);
// The step of micro-batches (each its placed groups) as the pipeline runs it
// (cost/pipeline_price.cpp): each unit -- a micro-batch, or one of its Seq1F1B chunks cut
// as the runtime cuts it -- priced per stage from its own segments by seq_ms's formula
// (fixed and per-sequence costs paid per chunk; a segment's attention over its prefix),
// split forward / backward, and the makespan of pp_simulate_ms. No pipeline: the sum of
// fixed + makespan.
double plan_pipeline_ms(const PlanCosts& c, const std::vector<const std::vector<PlanGroup>*>& micro_batches,
                        const std::vector<int64_t>& lengths);
// Each pipeline unit's tokens on a device, the most over the micro-batch's groups: the
// group's tokens of the unit (its chunk under Seq1F1B, cut as the runtime cuts), padded to
// a multiple of d x tp where d x tp > 1, over its d devices. What a slot must hold
// (pp_slot_tokens); tp: ranks per device.
std::vector<int64_t> plan_unit_tokens(const PlanCosts& c, const Plan& p, const std::vector<int64_t>& lengths,
                                      int tp);
// No plan of the batch is faster (memory-blind: the sequences' least work spread over the
// devices; with a pipeline, PlanCosts::step_lower_ms of it). PlanStats::lower_bound_ms.
double plan_lower_bound_ms(const PlanCosts& c, const std::vector<int64_t>& lengths);
// The same bound on the sum of the micro-batch times (fixed + makespan), before the pipeline.
double plan_sum_lower_bound_ms(const PlanCosts& c, const std::vector<int64_t>& lengths);

}  // namespace flexsp

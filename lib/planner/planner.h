// The FlexSP planner (docs/planner.md): the sequence lengths of one step's global batch ->
// a Plan (lib/plan/plan.h): micro-batches, aligned power-of-two SP groups, sequences on
// the groups.
//
// Per step, for sp_mode flexsp:
//  1. how many micro-batches: the fewest M that fit memory (ceil(tokens / (world E)) and
//     up), then M+1 .. M+extra while that lowers the predicted step time (each extra
//     micro-batch pays the fixed cost again);
//  2. the split into M micro-batches: a DP over the length-sorted batch (contiguous
//     chunks minimizing the sum of per-chunk lower bounds), a balanced split (longest
//     first onto the micro-batch with least work), and the split of the best uniform plan
//     (batch_adaptive's, memory-feasible by construction; its groups are kept where the
//     greedy plan of a micro-batch is not better), and tiered splits for memory-bound
//     batches (pieces whose group is wider than half or a quarter of a node stacked, the
//     rest balanced on the devices they leave: mb_solver.h), and the stacked split
//     (pieces whose least rank-time is on a group of the whole stage in micro-batches of
//     their own, the rest split as above at its fewest count); the best after planning
//     wins, so a flexsp plan is never predicted slower than batch_adaptive's or
//     static's (unless their uniform size is a ring and ring_only_when_needed keeps
//     flexsp off it).
//     Then mb_fill (idle devices take the last micro-batch's sequences) and mb_exchange
//     (a sequence of the slowest micro-batch for shorter ones of a faster one, both
//     re-planned greedily, kept when the sum of makespans drops; capped, and within half
//     of the time limit counted from the local search's start, ending by 90% of it),
//     mb_partner (slack of groups filled) and mb_dissolve (a fast micro-batch spread
//     over the others); last, after step 3, mb_resize (a micro-batch's group sizes
//     merged, split or widened, each re-assigned; kept when faster). The local search
//     ends with mb_resplit (pairs of micro-batches pooled and split again). The levels
//     splits (mb_seed_levels: each micro-batch's long pieces on fixed sizes that finish
//     within its longest one's time) of the winner's count and one less and more go
//     through the local search too, while half of the limit is left; the fastest goes
//     on to step 3;
//  3. per micro-batch: a greedy plan (lib/planner/mb_solver.h); then the class MILP on
//     CBC (counts of groups per size and of bucketed sequences per size, bisected on the
//     makespan: ~200 columns at any scale), warm-started from the greedy makespan, whose
//     compositions are assigned on the real lengths; the better plan by the real makespan
//     is kept. The exact slot MILP (one column set per group) runs only when asked
//     (milp_max_columns > 0; CBC closes it on tiny instances only): it is the reference
//     of `flexsp plan --exact-milp`, and its best plan at the time limit is taken, so
//     that mode depends on the clock.
// Baselines in the same code: static (one d for every step) and batch_adaptive (one d per
// step, the best by predicted time). Every plan returned passes plan_validate.
//
// Ring/USP (cp_mode): groups of d = u x r devices are priced as PlanCosts says; groups
// wider than the widest Ulysses group hold only the sequences that need them. Pipeline
// (pipeline.h): the plan is one stage's, and candidates of different micro-batch counts
// compare by the pipeline's price (the bubble), not by the sum of micro-batch times.
//
// Deterministic: no clock or random number steers the search. CBC runs one thread with a
// fixed seed under node limits; the time limit is a guard: a MILP it stops proposes
// nothing and its micro-batch keeps the plan it had (counted in PlanStats::milp_timed_out),
// mb_exchange / mb_partner stop at their share of it (half, from their start), and the
// second plans (the rule's space under `--ring-groups any`, the split the stacked split
// beat) are made only while half of it is left: the only cases in which two runs can
// differ.
// time_limit_ms = 0 plans greedily (mb_exchange then stops at its cap only).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lib/model/model_config.h"
#include "lib/plan/plan.h"
#include "lib/plan/sp_mode.h"
#include "lib/planner/cost_model.h"
#include "lib/planner/pipeline.h"

namespace flexsp {

// Tensor parallelism: the planner's devices are tensor-parallel groups of tp ranks. The
// context gives ranks (world, ranks_per_node, ZeRO groups of data-parallel peers);
// PlanCosts, PlanLimits and the plans count devices (world / tp, ranks_per_node / tp),
// and their "per rank" token figures are per device. With tp = 1 a device is a rank.
// Pipeline (pipeline.h): the plan is one stage's, on world / pp ranks (world / (pp tp)
// devices); every stage runs it on its layers.
// A piece fixed in a micro-batch on groups of `size` devices (0: any group): a seed split
// (PlannerContext::seed_split).
struct SeedPiece {
  int32_t seq = 0;
  int size = 0;
  bool operator==(const SeedPiece&) const = default;
};

struct PlannerContext {
  SpMode mode = SpMode::flexsp;
  int world = 1;
  int ranks_per_node = 1;
  int tp = 1;               // ranks per device
  CpMode cp_mode = CpMode::ulysses;  // how groups run (lib/plan/context_parallel.h)
  PipelineLayout pipeline;  // pp stages, schedule, seq_chunks
  std::vector<int> pp_layers;  // layers per stage as given (parallel.pp_layers); empty: split by cost
  // Groups wider than the widest Ulysses group (a ring) hold any sequence the cost model
  // puts there (false, the default), or only the sequences that a Ulysses group cannot
  // hold (true: `--ring-groups needed`, for a user who does not trust the ring's price).
  bool ring_only_when_needed = false;
  ModelConfig model;
  CostModel cost;
  double mem_per_gpu_gb = 80;
  ZeroLayout zero;          // shard groups: data-parallel peers (ranks of one tp index)
  int static_sp_size = 0;   // static: this d; 0: the smallest d that fits max_seq_len
  int64_t max_seq_len = 0;  // longest sequence training can produce; 0: the step's longest
  int time_limit_ms = 1000; // per step, shared by its micro-batches' MILPs (a guard)
  int64_t max_tokens_per_rank = 0;  // caps E per rank (train.micro_batch_tokens); 0: none
  int extra_micro_batches = 2;  // tried past the fewest that fit
  int exchange_max_tries = 32;  // mb_exchange: micro-batch pairs re-planned per step; 0: off
  int swap_max_tries = 128;     // mb_exchange's last round (any destination, swaps); 0: off
  int partner_max_tries = 32;   // mb_partner: source micro-batches re-planned per step; 0: off
  int dissolve_max_tries = 4;   // mb_dissolve: micro-batches tried per step; 0: off
  int resplit_max_tries = 64;   // mb_resplit: pairs of micro-batches pooled and split again; 0: off
  int resize_max_rounds = 4;    // mb_resize: re-sizings kept per micro-batch; 0: off
  int levels_max_counts = 3;    // levels splits (mb_seed_levels, without and with sharing): counts
                                // tried per step, the best split's, one less, one more; and the
                                // best split's with the first level widened; 0: off
  int sample_devices = 64;      // stages past 256 devices: a sample of the batch planned on this
                                // many devices with every pass, its split replicated; 0: off
  bool use_milp = true;
  int max_buckets = 16;
  int64_t milp_max_columns = 0;  // the exact slot MILP up to this size; 0: not run
  int milp_max_nodes = 1000;     // the exact slot MILP's node limit
  // An experiment's start (issue 17; `flexsp plan --strong-bound-ms` passes the strong
  // bound's incumbent): when not empty, one micro-batch per entry holding these pieces, the
  // rest dealt by mb_split_seeded, replaces the best split candidate before the local search.
  std::vector<std::vector<SeedPiece>> seed_split;
};

// The context resolved into numbers the search uses.
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
struct PlanCosts {
  int world = 1, ranks_per_node = 1;  // devices (of one pipeline stage)
  int64_t tokens_per_rank = 0;  // E, per device
  double fixed_ms = 0, a1 = 0, a2 = 0, per_sequence_ms = 0;
  double model_state_gb = 0;
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

// Throws Error when the memory holds no activations or no group size is allowed.
PlanCosts plan_costs(const PlannerContext& ctx);
PlanLimits plan_limits(const PlannerContext& ctx, const PlanCosts& c);

struct PlanStats {
  double predicted_ms = 0;    // the plan's predicted step time
  double unpipelined_ms = 0;  // the same work without the pipeline's bubble: the stage's share
                              // of sum(fixed + makespan) + the boundary p2p (pp 1: predicted)
  double lower_bound_ms = 0;  // plan_lower_bound_ms: no plan of the batch is faster
  double solve_ms = 0;        // wall time of plan_step
  double greedy_ms = 0;       // predicted time of the greedy plan (flexsp mode)
  int micro_batches = 0;
  int milp_solved = 0;        // micro-batches whose class MILP search finished
  int milp_timed_out = 0;     // MILPs the time limit stopped (their micro-batch kept its plan)
  int milp_improved = 0;      // MILPs that beat the plan they started from
  int exchanges = 0;          // mb_exchange: exchanges between micro-batches kept
  int partners = 0;           // mb_partner: sequences moved into other groups' slack
  int dissolved = 0;          // mb_dissolve: micro-batches spread over the others
  int resplit = 0;            // mb_resplit: pairs of micro-batches split again
  int resized = 0;            // mb_resize: micro-batches whose group sizes changed
  bool seeded = false;        // PlannerContext::seed_split fit and started the local search
};

// The plan of one step. lengths[i] = tokens of sequence i of the global batch. Throws
// Error for an infeasible batch (a sequence longer than the largest runnable group holds).
Plan plan_step(const PlannerContext& ctx, const std::vector<int64_t>& lengths,
               PlanStats* stats = nullptr);

// Predicted step time of any plan under the cost model (the pipeline's price included:
// plan_pipeline_ms).
double plan_predict_ms(const PlanCosts& c, const Plan& p, const std::vector<int64_t>& lengths);
// The step of micro-batches (each its placed groups) as the pipeline runs it
// (lib/planner/pipeline_price.cpp): each unit -- a micro-batch, or one of its Seq1F1B
// chunks cut as the runtime cuts it -- priced per stage from its own segments by seq_ms's
// formula (fixed and per-sequence costs paid per chunk; a segment's attention over its
// prefix), split forward / backward, and the makespan of pp_simulate_ms. No pipeline: the
// sum of fixed + makespan.
double plan_pipeline_ms(const PlanCosts& c, const std::vector<const std::vector<PlanGroup>*>& micro_batches,
                        const std::vector<int64_t>& lengths);
// Each pipeline unit's tokens on a device, the most over the micro-batch's groups: the
// group's tokens of the unit (its chunk under Seq1F1B, cut as the runtime cuts), padded to
// a multiple of d x tp where d x tp > 1, over its d devices. What a slot must hold
// (pp_slot_tokens); tp: ranks per device.
std::vector<int64_t> plan_unit_tokens(const PlanCosts& c, const Plan& p, const std::vector<int64_t>& lengths,
                                      int tp);
double plan_lower_bound_ms(const PlanCosts& c, const std::vector<int64_t>& lengths);
// The same bound on the sum of the micro-batch times (fixed + makespan), before the pipeline.
double plan_sum_lower_bound_ms(const PlanCosts& c, const std::vector<int64_t>& lengths);

// The static baseline's d: ctx.static_sp_size, else the smallest allowed d that holds
// ctx.max_seq_len (or the longest of `lengths` when that is 0).
int plan_static_size(const PlannerContext& ctx, const PlanCosts& c,
                     const std::vector<int64_t>& lengths);

// Plans ahead: rank 0 submits step k+1's lengths while step k trains; a worker thread
// plans it. No MPI on the thread: wait() returns the plan on rank 0, which then calls
// plan_broadcast. Errors of the planning are rethrown by wait().
class PlanAhead {
 public:
  explicit PlanAhead(PlannerContext ctx);
  ~PlanAhead();  // drops steps not yet started, finishes the one running, joins
  PlanAhead(const PlanAhead&) = delete;
  PlanAhead& operator=(const PlanAhead&) = delete;

  void submit(int64_t step, std::vector<int64_t> lengths);
  // Blocks until step's plan is ready; wait_ms (optional) gets the time blocked here, the
  // "plan wait" of the timing report. Throws Error if step was never submitted.
  Plan wait(int64_t step, double* wait_ms = nullptr, PlanStats* stats = nullptr);

 private:
  struct Result {
    Plan plan;
    PlanStats stats;
    std::exception_ptr error;
  };
  void run();

  const PlannerContext ctx_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int64_t, std::vector<int64_t>>> queue_;
  std::map<int64_t, Result> done_;
  std::map<int64_t, bool> pending_;  // submitted, not yet collected
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace flexsp

namespace flexsp {

struct RunConfig;

// The planner context of a training run: sp_mode, the grid's shape, the model, the cost
// model (planner.cost_model, or the built-in GPT-7B figures), planner.mem_per_gpu_gb, the
// ZeRO layout, parallel.sp_size for static (when set), data.max_seq_len + 1, the time
// limit, and train.micro_batch_tokens as a cap on tokens per rank.
PlannerContext planner_context(const RunConfig& cfg, const ModelConfig& model, int world,
                               int ranks_per_node);

}  // namespace flexsp

// The planner's context (docs/planner.md): what planning one step needs to know about the
// run -- the mode, the grid's shape, the model and its cost model, memory, the ZeRO layout,
// the time limit -- and the knobs of the search: the budgets of its passes and the gates
// that decide where the costly ones run. Everything the planner reads comes from here, so
// two runs with equal contexts and batches plan alike (see planner.h on the time limit).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/model/model_config.h"
#include "lib/plan/plan.h"
#include "lib/plan/sp_mode.h"
#include "lib/planner/cost/cost_model.h"
#include "lib/planner/cost/pipeline.h"

namespace flexsp {

// A piece fixed in a micro-batch on groups of `size` devices (0: any group): a seed split
// (PlannerContext::seed_split).
struct SeedPiece {
  int32_t seq = 0;
  int size = 0;
  bool operator==(const SeedPiece&) const = default;
};

// The thresholds of the search's gates (lib/planner/step/gates.h): the costly passes run
// only where they pay, and each test is written once.
struct PlannerGates {
  // A piece is wide when its smallest group (by memory) is wider than ranks_per_node /
  // wide_piece_divisor devices: which wide pieces share a micro-batch is what the wide
  // passes change; a step without one gains nothing from them.
  int wide_piece_divisor = 2;
  // Stages of at most this many devices run the wide passes (the levels splits,
  // mb_resplit), where greedy plans are cheap; wider stages plan a sample with them
  // instead (PlannerContext::sample_devices).
  int wide_passes_max_devices = 256;
  // Stages past this many devices run unload and dissolve first, before the exchanges:
  // there one re-planned pair of micro-batches costs about 0.1 s, and the exchanges used up
  // the local search's time before the passes that save a micro-batch ran (a Pareto tail
  // at 1024 GPUs under 1000 ms: 1-3 exchanges, a micro-batch more than the bound's best).
  int front_passes_after_devices = 256;
  // The local search runs for this share of the time limit from its own start (slow
  // candidates must not use it all), and ends by local_search_end of it (the MILPs get
  // the rest).
  double local_search_share = 0.5;
  double local_search_end = 0.9;
  // Alternatives to the first split (runners-up, levels splits, the sample's split, the
  // second space of --ring-groups any) start only while this share of the limit is left.
  double alternatives_left = 0.5;
  // The first split stops trying more counts and rules (and mb_fill more moves) once it
  // has used this share of the step's planning time (step_time_limit_ms of its best
  // candidate so far): the rest is the local search's.
  double first_split_share = 0.5;
};

// Tensor parallelism: the planner's devices are tensor-parallel groups of tp ranks. The
// context gives ranks (world, ranks_per_node, ZeRO groups of data-parallel peers);
// PlanCosts, PlanLimits and the plans count devices (world / tp, ranks_per_node / tp),
// and their "per rank" token figures are per device. With tp = 1 a device is a rank.
// Pipeline (cost/pipeline.h): the plan is one stage's, on world / pp ranks (world / (pp tp)
// devices); every stage runs it on its layers.
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
  // train.offload = auto without a pipeline: per micro-batch, activation offload or not
  // (PlanMicroBatch::offload), whichever the cost model finds faster; model is then the
  // side without offload, planner_offload_side(ctx) the other.
  bool offload_choice = false;
  CostModel cost;
  double mem_per_gpu_gb = 80;
  ZeroLayout zero;          // shard groups: data-parallel peers (ranks of one tp index)
  int static_sp_size = 0;   // static: this d; 0: the smallest d that fits max_seq_len
  int64_t max_seq_len = 0;  // longest sequence training can produce; 0: the step's longest
  int time_limit_ms = 1000; // per step, shared by its micro-batches' MILPs (a guard)
  // Planning runs during the previous step: the limit a step plans under is at most this
  // share of the predicted step of its first split (step/gates.h: step_time_limit_ms);
  // 0: time_limit_ms alone.
  double time_step_share = 0;
  int64_t max_tokens_per_rank = 0;  // caps E per rank (train.micro_batch_tokens); 0: none
  int extra_micro_batches = 2;  // tried past the fewest that fit
  // The budgets of the local-search passes (step/passes.cpp); 0 turns a pass off.
  int exchange_max_tries = 32;  // mb_exchange: micro-batch pairs re-planned per step
  int swap_max_tries = 128;     // mb_exchange's last round (any destination, swaps)
  int partner_max_tries = 32;   // mb_partner: source micro-batches re-planned per step
  int unload_max_tries = 8;     // mb_unload: micro-batches tried per step
  int dissolve_max_tries = 4;   // mb_dissolve: micro-batches tried per step
  int resplit_max_tries = 64;   // mb_resplit: pairs of micro-batches pooled and split again
  int resize_max_rounds = 4;    // mb_resize: re-sizings kept per micro-batch
  int levels_max_counts = 3;    // levels splits (mb_seed_levels, without and with sharing): counts
                                // tried per step, the best split's, one less, one more; and the
                                // best split's with the first level widened; 0: off
  int sample_devices = 64;      // stages past gates.wide_passes_max_devices: a sample of the batch
                                // planned on this many devices with every pass, its split
                                // replicated; 0: off
  PlannerGates gates;
  bool use_milp = true;
  int max_buckets = 16;
  int64_t milp_max_columns = 0;  // the exact slot MILP up to this size; 0: not run
  int milp_max_nodes = 1000;     // the exact slot MILP's node limit
  // An experiment's start (`flexsp plan --strong-bound-ms` passes the strong bound's
  // incumbent): when not empty, one micro-batch per entry holding these pieces, the rest
  // dealt by mb_split_seeded, replaces the best split candidate before the local search.
  std::vector<std::vector<SeedPiece>> seed_split;
};

struct RunConfig;

// ctx with activation offload in every micro-batch (the offload side of offload_choice).
PlannerContext planner_offload_side(const PlannerContext& ctx);

// The one builder of the planner context, for `flexsp train` (its config) and for the
// commands that plan without training -- flexsp plan and simulate, whose flags stand for
// the config keys they name (app/plan_args.h), and the layout search, whose layouts are
// config fragments: what they price is what train would run with that config. It reads
// parallel.sp_mode, tp_size, cp_mode, pp_size, pp_schedule, seq_chunks, pp_layers, zero and
// the zero_*_group spans (ZeRO shards over the data-parallel peers of one tp index in one
// stage: all of them, or those of a node), sp_size for static (when set),
// planner.mem_per_gpu_gb and time_limit_ms, data.max_seq_len + 1 as the longest piece, and
// train.micro_batch_tokens as a cap on tokens per device; world and ranks_per_node are the
// grid's. Throws Error naming the key when the layout cannot be planned (planner_check).
PlannerContext planner_context(const RunConfig& cfg, const ModelConfig& model, const CostModel& cost, int world,
                               int ranks_per_node);
// The same with the cost model the config names (planner.cost_model, or the built-in
// GPT-7B figures).
PlannerContext planner_context(const RunConfig& cfg, const ModelConfig& model, int world,
                               int ranks_per_node);

// Throws Error naming the key when ctx's layout cannot be planned: the grid's shape,
// memory, tp against the node and the model, the pipeline against the model and the
// ranks, the ZeRO stage. plan_costs checks the same (contexts built by hand included).
void planner_check(const PlannerContext& ctx);

}  // namespace flexsp

// The layout search (`flexsp plan --search`, `flexsp simulate --search`): for a
// model, a cluster and a length distribution, every layout around the flexible-SP plan --
// tensor-parallel size, pipeline stages with their schedule (1F1B, Seq1F1B and its chunks),
// ZeRO stage and shard groups, activation checkpointing, a cap on micro-batch tokens, the
// context-parallel mode -- is checked against the memory model (lib/planner/cost/memory_model.h)
// and the ones that fit are ranked by the predicted tokens/s of the flexsp planner on the
// same sampled steps.
//
// What train runs: layout_runnable_now says which layouts `flexsp train` runs today (it
// mirrors the refusals of lib/train/session.cpp). The others are still priced, so the
// table can show what the planner thinks of them, but they are marked "priced only: the
// runtime does not run this yet", listed after every runnable one, never the best and
// never written to --search-ini. Today train runs every layout the search forms (ring and
// USP groups in 1F1B and Seq1F1B stages included), so nothing is priced only; the hook
// stays for what a future search dimension may add before the runtime runs it. cp_mode
// auto would run Ulysses groups where the runtime ran no ring (then it is the Ulysses
// layout again, not listed).
//
// Pruning (to keep 64 GPUs within a minute): a cp_mode other than ulysses is tried only
// where the ulysses layout cannot hold the longest piece (the planner uses groups wider
// than the heads only for such sequences, so elsewhere the plans would be the same), and
// the pipeline's layouts skip micro-batch caps (the pipeline sets its own count).
//
// How a layout is priced (the same arithmetic as flexsp simulate, lib/planner/cost/sim_price.h):
//   step = sum over micro-batches of (fixed + makespan) + sync
// with the planner's makespans (compute, Ulysses all-to-all, tp exchanges); fixed =
// residual + exposure x this layout's ZeRO traffic per micro-batch and sync = exposure x
// its traffic per step (sim_fixed_split: for the published figures the 629 ms measured
// with ZeRO-3 over 64 GPUs comes back exactly for that layout). The traffic follows the
// shard groups as lib/runtime/zero.h runs them: rings of the group's ranks, at the
// intra-node ring bandwidth when the group stays in a node, else the inter-node one;
// groups of a node add the per-step reduction (and, for a node parameter group with
// world optimizer states, the gather of the updated pieces) across nodes.
// Pipeline: the plan of one stage priced by pipeline.h (the runtime's schedules simulated
// over each unit's time on each stage, fixed cost included); the ZeRO groups are a stage's
// data-parallel ranks; the sync moves the stage's share of the gradients.
// Activation checkpointing repeats each layer's forward in backward: plan_costs scales
// the compute coefficients by 4/3 (a forward is a third of a step's FLOPs), and the third
// parameter gather and all-to-all pass are priced as simulate and the cost model do. Peak memory per GPU = the memory model's total
// for the most tokens any device holds in the planned steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/config/config.h"
#include "lib/data/sampler.h"
#include "lib/model/model_config.h"
#include "lib/plan/context_parallel.h"
#include "lib/planner/cost/pipeline.h"
#include "lib/planner/cost/cost_model.h"
#include "lib/planner/cost/sim_price.h"

namespace flexsp {

struct SearchLayout {
  int tp = 1;
  int zero = 3;
  // [parallel] zero_*_group values ("world" or "node"); stages below 3 ignore the ones
  // they do not shard.
  std::string param_group = "world", grad_group = "world", optim_group = "world";
  bool checkpoint = false;
  int64_t micro_batch_tokens = 0;  // train.micro_batch_tokens; 0: memory decides
  PipelineLayout pipeline;         // pp, schedule, seq_chunks
  CpMode cp_mode = CpMode::ulysses;
  std::string name() const;        // "tp2 pp4 seq1f1b x4 zero3(node,world,world) ckpt mbt 8192 auto"
};

struct SearchSetup {
  ModelConfig model;
  CostModel cost;        // fabric-scaled (sim_scale_fabric)
  int gpus = 8, gpus_per_node = 8;
  double mem_per_gpu_gb = 80;
  SimFabric fabric;
  SimFixedSplit fixed;
  int64_t max_seq_len = 0;  // the longest piece training makes
  SamplerOptions batch;
  int64_t steps = 3;
  double peak_tflops = 312;
  // The space; micro_batch_tokens 0 = no cap.
  std::vector<int> tp{1, 2, 4, 8};
  std::vector<int> zero{0, 1, 2, 3};
  std::vector<bool> checkpoint{false, true};
  std::vector<int64_t> micro_batch_tokens{0, 4096, 16384};
  std::vector<int> pp{1, 2, 4};
  std::vector<PpSchedule> pp_schedule{PpSchedule::one_f_one_b, PpSchedule::seq1f1b};
  std::vector<int> seq_chunks{4};  // for seq1f1b
  std::vector<CpMode> cp_mode{CpMode::ulysses, CpMode::automatic};
  unsigned threads = 2;  // layouts priced at once (at most the hardware's threads)
};

struct SearchResult {
  SearchLayout layout;
  std::string rejected;  // why the layout is not ranked (memory, the model's shape); "" if ranked
  // Why `flexsp train` does not run it yet (layout_runnable_now); "" when it does. Such a
  // layout is priced but never the best.
  std::string priced_only;
  double step_ms = 0;         // mean predicted flexsp step
  double static_step_ms = 0;  // mean predicted static-SP step (same layout); 0: static cannot run it
  double tokens_per_s = 0, static_tokens_per_s = 0, mfu = 0;
  double peak_gb = 0, states_gb = 0;  // per GPU: peak over the steps; states + ZeRO buffers
  double fixed_ms = 0, sync_ms = 0;   // per micro-batch, per step
  double micro_batches = 0;           // mean per step
  double bubble = 0;                  // pipeline bubble, fraction of the step (the simulated step's)
  int64_t tokens_per_rank = 0;        // E per device (the cap when it binds)
  // Not listed: a cap on micro-batch tokens above what memory allows, or a cp_mode other
  // than ulysses where the ulysses layout holds every piece or where train runs Ulysses
  // groups for it (layout_cp_mode_run): the same plans.
  bool redundant = false;
};

// Whether `flexsp train` runs l today, as lib/train/session.cpp decides (today: every
// layout of the space). why (optional) gets the reason when it does not. The one place to
// change when the search forms something the runtime does not run.
bool layout_runnable_now(const SearchLayout& l, std::string* why = nullptr);

// The cp mode train runs for l: auto falls back to Ulysses groups where no ring runs
// (layout_runnable_now refuses ring at l's pipeline), as the session does.
CpMode layout_cp_mode_run(const SearchLayout& l);

// Ranked (fits memory, priced) and runnable by train: a candidate for the best.
inline bool search_runnable_ranked(const SearchResult& r) { return r.rejected.empty() && r.priced_only.empty(); }

// Every layout of the space that the model and cluster can run (tp divides the GPUs per
// node and the model's heads and FFN; tp x pp divides the GPUs, pp <= layers; the shard
// groups zero_check accepts), in a fixed order.
std::vector<SearchLayout> search_space(const SearchSetup& s);

// FlexSP's paper layout: tp 1, ZeRO-3 over all GPUs, no checkpointing, no cap.
SearchLayout search_paper_layout();

// The run configuration a layout stands for (the keys of its INI fragment, search_ini), on
// which each layout's planner context is built by planner_context: what is priced is what
// train runs with that fragment.
RunConfig search_run_config(const SearchSetup& s, const SearchLayout& l);

// The sampled steps' sequence lengths (s.steps batches of s.batch over docs).
std::vector<std::vector<int64_t>> search_steps(const SearchSetup& s, const std::vector<int64_t>& docs);

// Prices one layout on the sampled steps (search_steps).
SearchResult search_evaluate(const SearchSetup& s, const SearchLayout& l, const std::vector<int64_t>& docs);
SearchResult search_evaluate_steps(const SearchSetup& s, const SearchLayout& l,
                                   const std::vector<std::vector<int64_t>>& steps);

// Prices every layout of the space but the redundant ones: the ranked ones train runs first,
// best tokens/s first, then the ranked ones priced only (the same order), then the rejected
// ones in space order.
std::vector<SearchResult> search_layouts(const SearchSetup& s, const std::vector<int64_t>& docs);

// Why the best wins, one or two sentences, against another result (the runner-up or a
// reference layout): which of fixed cost, micro-batches, sync and makespan differ.
std::string search_why(const SearchResult& best, const SearchResult& other);

// An INI fragment `flexsp train --config` accepts: [model] checkpoint_activations,
// [parallel] sp_mode, tp_size, zero and the groups, cp_mode, pp_size, pp_schedule,
// seq_chunks, [train] micro_batch_tokens, [planner]
// mem_per_gpu_gb (and cost_model when given), with a comment header of the prediction.
// Throws Error for a layout train does not run (search_runnable_ranked false).
std::string search_ini(const SearchSetup& s, const SearchResult& best, const std::string& cost_model_path);

}  // namespace flexsp

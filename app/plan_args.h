// What flexsp plan and flexsp simulate share: the options that say where the lengths come
// from (a dataset or a length file), the model, the cost model, memory, the layout (tp, cp
// mode, pipeline, ZeRO), the batch and the sampler, the solver time limit and --json; their
// checks; the loading of it all; and the planner context they stand for, built by the
// planner's one builder.
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "app/commands.h"

#include "lib/data/sampler.h"
#include "lib/model/model_config.h"
#include "lib/config/config.h"
#include "lib/planner/cost/cost_model.h"
#include "lib/planner/planner.h"

namespace flexsp {

struct PlanArgs {
  std::string data, lengths, model = "7b", cost_model;
  int gpus_per_node = 8, time_limit_ms = 1000;
  double time_step_share = 0;
  int tp = 1;  // ranks per device (parallel.tp_size)
  int kv_heads = 0;  // overrides the preset's kv heads (model.kv_heads); 0: the preset's
  std::string offload = "off";  // activation offload (train.offload): off, checkpoints, auto
  int offload_ahead = 2;
  // Context parallelism and the pipeline (parallel.cp_mode, pp_size, pp_schedule, seq_chunks).
  std::string cp_mode = "ulysses", pp_schedule = "1f1b";
  int pp = 1, seq_chunks = 1;
  std::string ring_groups = "any";  // any | needed (PlannerContext::ring_only_when_needed)
  int zero = 3;  // ZeRO stage (parallel.zero), shards over a stage's GPUs: FlexSP's setting
  int64_t micro_batch_tokens = 0;  // train.micro_batch_tokens; 0: memory decides
  double mem_gb = 80;
  int64_t max_seq_len = 4096, batch_seqs = 0, batch_tokens = 0, steps = 20;
  uint64_t seed = 1234;
  bool json = false;
};

// Adds the shared options, bound to `a`; its current values are the defaults shown;
// batch_default says what a step holds when neither batch option is given.
void add_plan_options(boost::program_options::options_description& o, PlanArgs& a,
                      const std::string& batch_default);

// Throws Error naming the option ("{verb}: give exactly one of --data FILE or ...").
void check_plan_args(const PlanArgs& a, const char* verb);

// Document lengths, the resolved model, the cost model (a note on stderr when it was
// measured with another model) and the longest piece training makes.
struct PlanInputs {
  std::vector<int64_t> docs;
  ModelConfig model;
  CostModel cost;
  Offload offload = Offload::off;  // --offload
  int64_t max_seq_len = 0;  // min(--max-seq-len + 1, longest document)
};
PlanInputs load_plan_inputs(const PlanArgs& a);

// The layout options checked against `gpus` GPUs and the model, naming the options.
void check_plan_layout(const PlanArgs& a, int gpus, const ModelConfig& model);

// The run configuration the options stand for: each is the config key its help names
// (--tp as parallel.tp_size, ...), ZeRO's shards over a stage's GPUs, and data.max_seq_len
// such that the longest piece is the one the documents make (in.max_seq_len).
RunConfig plan_run_config(const PlanArgs& a, const PlanInputs& in);

// The planner context of a plan on `gpus` GPUs: planner_context (lib/planner/context.h) on
// plan_run_config, with --ring-groups, which no config key holds.
PlannerContext plan_context(const PlanArgs& a, const PlanInputs& in, int gpus);

// The sampler options of the batch; neither batch option given: default_seqs sequences.
SamplerOptions plan_batch(const PlanArgs& a, int64_t default_seqs);

// The verb's body on one process: parses args into opts (every rank agrees), prints
// `usage` then the options for --help, else runs `run` on rank 0 inside agree() while
// the other ranks wait. Returns the exit code.
int run_on_rank0(const CommandContext& ctx, const Args& args, const char* verb,
                 const boost::program_options::options_description& opts, const std::string& usage,
                 const std::function<void()>& run);

}  // namespace flexsp

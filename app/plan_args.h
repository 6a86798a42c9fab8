// What flexsp plan and flexsp simulate share: the options that say where the lengths come
// from (a dataset or a length file), the model, the cost model, memory, the batch and the
// sampler, the solver time limit and --json; their checks; and the loading of it all.
#pragma once

#include <boost/program_options.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "app/commands.h"

#include "lib/data/sampler.h"
#include "lib/model/model_config.h"
#include "lib/planner/cost/cost_model.h"
#include "lib/planner/planner.h"

namespace flexsp {

struct PlanArgs {
  std::string data, lengths, model = "7b", cost_model;
  int gpus_per_node = 8, time_limit_ms = 1000;
  int tp = 1;  // ranks per device (parallel.tp_size)
  int kv_heads = 0;  // overrides the preset's kv heads (model.kv_heads); 0: the preset's
  // Context parallelism and the pipeline (parallel.cp_mode, pp_size, pp_schedule, seq_chunks).
  std::string cp_mode = "ulysses", pp_schedule = "1f1b";
  int pp = 1, seq_chunks = 1;
  std::string ring_groups = "any";  // any | needed (PlannerContext::ring_only_when_needed)
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
  int64_t max_seq_len = 0;  // min(--max-seq-len + 1, longest document)
};
PlanInputs load_plan_inputs(const PlanArgs& a);

// The layout options of a plan on `gpus` GPUs into ctx: tp, cp_mode, the pipeline, and
// ZeRO-3 over a stage's data-parallel GPUs (FlexSP's setting).
void plan_apply_layout(const PlanArgs& a, int gpus, PlannerContext& ctx);

// The sampler options of the batch; neither batch option given: default_seqs sequences.
SamplerOptions plan_batch(const PlanArgs& a, int64_t default_seqs);

// The verb's body on one process: parses args into opts (every rank agrees), prints
// `usage` then the options for --help, else runs `run` on rank 0 inside agree() while
// the other ranks wait. Returns the exit code.
int run_on_rank0(const CommandContext& ctx, const Args& args, const char* verb,
                 const boost::program_options::options_description& opts, const std::string& usage,
                 const std::function<void()>& run);

}  // namespace flexsp

// What a training run holds for its length, and its set-up and tear-down: the effective
// configuration, the model's shape, the backend and its communicators, the plan executor
// and the ZeRO optimizer, and where training starts (a checkpoint, weights or the seeded
// initialisation). The step loop (lib/train/trainer.cpp) only uses it.
//
// The ranks and their communicators are the parallel state's (lib/parallel/
// parallel_state.h), which the caller builds and owns; the session attaches its backend to
// it. Tensor parallelism: plans, Ulysses and ZeRO run on the data-parallel groups, the
// model's tp exchanges on the tp blocks. Weights files hold whole tensors: a rank loads the
// whole model and keeps its block, and the blocks are assembled to dump them. Pipeline
// parallelism: the session also holds its stage's part of the model (lib/train/
// pipeline_stage.h) and a PipelineExecutor runs the plan; weights files hold the whole
// model (each stage reads its units, the owners' units are summed across stages to dump).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "io/dataset/token_dataset.h"
#include "io/report/pipeline_report.h"
#include "lib/backend/backend.h"
#include "lib/config/config.h"
#include "lib/data/sampler.h"
#include "lib/model/model_config.h"
#include "lib/parallel/parallel_state.h"
#include "lib/planner/planner.h"
#include "lib/runtime/executor.h"
#include "lib/runtime/pipeline.h"
#include "lib/runtime/zero.h"
#include "lib/train/pipeline_stage.h"
#include "lib/train/train_checkpoints.h"

namespace flexsp {

struct TrainOptions {
  std::string load_weights;  // HDF5 weights (io/weights) to start from instead of init
  std::string dump_weights;  // write the final weights here
  std::string resume;        // "" (fresh), "auto" (checkpoint.dir/latest, if any) or a file
  bool print_plans = false;  // rank 0 prints each step's plan
};

class TrainSession {
 public:
  // Collective over the world: checks the configuration against the dataset and the
  // ranks, finds where training starts (opts: --resume, --load-weights) and takes that
  // file's RoPE for the [model] keys the config does not set (lib/model/rope.h: an imported
  // model keeps its own), builds the backend, attaches it to ps (its communicators), and
  // builds the executor and the optimizer. Throws Error (on every rank) naming the key of
  // a bad setting. ps must outlive the session.
  TrainSession(const RunConfig& config, ParallelState& ps, const TokenDataset& ds,
               const TrainOptions& opts);
  ~TrainSession();
  TrainSession(const TrainSession&) = delete;
  TrainSession& operator=(const TrainSession&) = delete;

  // Restores a checkpoint (--resume; moves the sampler to its cursor) or sets the weights
  // (--load-weights or the seeded initialisation). Refuses a checkpoint.dir that holds a
  // run past the starting step. Collective.
  void start(BatchSampler& sampler);

  // Writes the training state after `step`; `next`: the data cursor of the step after it.
  // With checkpoint.async it returns once the state is copied to host memory and the
  // write goes on in the background; `wait` (the run's last checkpoint) waits for it.
  // Returns the file's path. Collective.
  std::string save_checkpoint(int64_t step, const SamplerCursor& next, bool wait);
  // At a step boundary: publishes a finished background write; throws AgreedFailure (the
  // line printed) when it failed. Collective; free when nothing is being written.
  void poll_checkpoint();
  // The checkpoints published since the last call (TrainCheckpoints::take_saved).
  std::vector<CheckpointSaved> take_saved_checkpoints();
  // Writes the weights as one process would (rank 0 writes). Collective.
  void dump_weights(const std::string& path);
  // One line describing the run (rank 0 prints it).
  std::string describe() const;
  // With pipeline stages: per stage, the layers, forward / backward / receive time per
  // step, the bubble measured (receive waits / schedule time) and by the formula
  // (P - 1) / (units + P - 1), and the slots' activation bytes (io/report/pipeline_report.h);
  // filled on rank 0, stages == 0 elsewhere and without stages. Collective.
  ReportPipeline pipeline_summary();

  const RunConfig& cfg() const { return cfg_; }
  const ModelConfig& model() const { return mc_; }
  const PlannerContext& planner() const { return pctx_; }
  const PlanLimits& limits() const { return limits_; }
  int64_t max_local_tokens() const { return max_local_; }  // the model's workspace, tokens per rank
  Backend& backend() { return *be_; }
  // Forward and backward of the plan's micro-batches on this rank (the plan executor, or
  // with pipeline stages the pipeline's), gradients into the optimizer's provider.
  ExecStats run_plan(const Plan& plan, const std::vector<SeqRef>& batch, const TokenDataset& ds,
                     double loss_scale, PhaseTimes* timers);
  const ParamTable& table() const;  // this rank's parameter layout (its stage's)
  ZeroOptimizer& zero() { return *zero_; }
  ParallelState& parallel() { return ps_; }

  int64_t start_step() const { return start_; }  // the last step applied before this run
  int64_t consumed = 0;                           // tokens trained on, over the whole run

 private:
  // Set-up, in order: the model and where training starts; the layout's checks and the
  // planner's context; the executor and the optimizer (after the backend).
  void resolve_model(const TokenDataset& ds);
  void check_layout();
  void require_offload_host_memory() const;
  int64_t most_tokens_per_rank() const;
  int64_t local_tokens(int64_t E) const;
  void build_runtime();
  // start(): from a checkpoint, or from weights (a file or the seeded initialisation).
  void resume(BatchSampler& sampler);
  void init_weights();
  void read_weights(const std::string& path, float* block);  // this rank's block of a file
  // The whole model's table of this tp rank; with stages, whole <-> this rank's table.
  ParamTable full_table() const;
  void from_full(const ParamTable& full, const float* src, float* dst) const;
  void to_full(const float* src, const ParamTable& full, float* dst) const;

  // Members go in the reverse order of their declaration: everything that holds backend
  // memory, then the backend's communicators (attached_), then the backend.
  RunConfig cfg_;
  ParallelState& ps_;
  TrainOptions opts_;
  std::string resume_path_;  // the checkpoint --resume names ("": none)
  ModelConfig mc_;
  std::unique_ptr<PipelineStage> pipe_;  // pp > 1
  PlannerContext pctx_;
  PlanLimits limits_;
  int64_t max_local_ = 0;
  BackendOptions backend_opts_;  // the config's backend keys with the environment's overrides
  std::unique_ptr<Backend> be_;
  ParallelState::Attachment attached_;
  std::unique_ptr<PipelineExecutor> pexec_;
  std::unique_ptr<PlanExecutor> exec_;
  std::unique_ptr<ZeroOptimizer> zero_;
  std::unique_ptr<TrainCheckpoints> ckpt_;  // checkpoint.dir set
  int64_t start_ = 0;
};

}  // namespace flexsp

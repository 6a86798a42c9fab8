// The training loop: batches -> micro-batches -> forward/backward -> clip -> AdamW, with
// a progress line every report.every steps (docs/reports.md). Each step: rank 0 plans (SP
// groups per micro-batch, lib/plan), every rank executes its part (lib/runtime/executor),
// the gradients are reduced and the optimizer steps per ZeRO stage (lib/runtime/zero).
//
// The step is docs/batches.md's: loss = sum of cross-entropies over every prediction of the
// global batch / their count, so the count is known before any backward and each
// micro-batch's backward is scaled by 1/count; gradients accumulate over micro-batches.
// A step whose loss or gradient norm is not finite is not applied: the run stops with an
// Error naming the step, and the weights stay those of the previous step.
//
// Checkpoints (io/checkpoint, docs/checkpoints.md): with checkpoint.dir set, a checkpoint
// is written every checkpoint.every steps and after the last one; --resume restores
// weights, AdamW moments and step count, the data cursor, the step number and the token
// count, so the run continues as if it had not stopped. SIGTERM / SIGUSR1 and
// train.max_minutes stop the run at a step boundary: each rank notes the signal in a flag
// (async-signal-safe; the one process-wide global here, since a signal handler can reach
// nothing else), the ranks agree by an all-reduce after every step (rank 0's clock decides
// max_minutes), write a checkpoint and return normally.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/dataset/token_dataset.h"
#include "lib/comm/groups.h"
#include "lib/config/config.h"
#include "lib/data/sampler.h"
#include "lib/grid/grid.h"
#include "lib/util/timer.h"

namespace flexsp {

// Notes SIGTERM / SIGUSR1 from now on instead of dying of them. `flexsp train` calls it
// first thing, before MPI starts, so that a Slurm signal during start-up (MPI, data,
// model) does not kill a rank: the run then stops after its first step, checkpointed.
void catch_stop_signals();

struct TrainOptions {
  std::string load_weights;  // HDF5 weights (io/weights) to start from instead of init
  std::string dump_weights;  // write the final weights here
  std::string resume;        // "" (fresh), "auto" (checkpoint.dir/latest, if any) or a file
  bool print_plans = false;  // rank 0 prints each step's plan
};

struct StepRecord {
  int64_t step = 0;  // 1-based: the number of updates applied after this step
  double loss = 0, lr = 0, grad_norm = 0, ms = 0;
  double plan_wait_ms = 0;  // rank 0: time the step waited for its plan
  PhaseTimes phases;        // this rank's time per phase
  int64_t tokens = 0, predictions = 0, micro_batches = 0;
};

// Runs steps up to cfg.train.steps from the sampler's current cursor (or from a
// checkpoint). Collective over the grid. Returns the steps trained by this call.
std::vector<StepRecord> run_training(const RunConfig& cfg, const Grid& grid, Groups& groups,
                                     const TokenDataset& ds, BatchSampler& sampler,
                                     const TrainOptions& opts);

}  // namespace flexsp

// The training loop: batches -> micro-batches -> forward/backward -> clip -> AdamW. Each
// step: rank 0 plans (SP groups per micro-batch, lib/plan) a step ahead, every rank runs
// the plan's schedule of micro-batches (lib/runtime/executor), the gradients are reduced
// and the optimizer steps per ZeRO stage (lib/runtime/zero), then the step's checkpoint
// and report (lib/train/step_log). What the run holds is a TrainSession
// (lib/train/session.h): set-up, restart and tear-down live there, not in the loop.
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
#include "lib/config/config.h"
#include "lib/data/sampler.h"
#include "lib/parallel/parallel_state.h"
#include "lib/train/session.h"
#include "lib/train/step_log.h"

namespace flexsp {

// Notes SIGTERM / SIGUSR1 from now on instead of dying of them. `flexsp train` calls it
// first thing, before MPI starts, so that a Slurm signal during start-up (MPI, data,
// model) does not kill a rank: the run then stops after its first step, checkpointed.
void catch_stop_signals();

// Runs steps up to cfg.train.steps from the sampler's current cursor (or from a
// checkpoint). Collective over the world of ps. Returns the steps trained by this call.
std::vector<StepRecord> run_training(const RunConfig& cfg, ParallelState& ps,
                                     const TokenDataset& ds, BatchSampler& sampler,
                                     const TrainOptions& opts);

}  // namespace flexsp

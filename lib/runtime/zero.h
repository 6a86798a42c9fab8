// ZeRO over flat buffers (SPEC §8): who keeps which part of the optimizer states and
// which gradient reduction a step needs.
//
//   stage 0: gradients all-reduced over the world; every rank updates every parameter.
//   stage 1: AdamW states sharded over the optimizer shard group; gradients all-reduced;
//            each rank updates its shard; parameters all-gathered over the shard group.
//   stage 2: as 1, but gradients are reduce-scattered (each rank receives only the
//            reduced gradient of its shard): over the world directly, or for a node
//            group within the node, then all-reduced across nodes.
// The shard group is parallel.zero_optim_group: `world` (smallest shards) or `node` (shards
// within a node, replicated across nodes: InternEvo's choice to keep the parameter
// all-gather inside the node). Stage 2 reduces gradients over the same group, so
// zero_grad_group must equal zero_optim_group. Stage 3 (parameters sharded and gathered
// per layer) is not implemented yet.
//
// The flat buffers are padded to a multiple of the shard count so every shard has the
// same size (all-gather and reduce-scatter need equal blocks); padding stays zero.
#pragma once

#include <cstdint>
#include <memory>

#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/config/config.h"
#include "lib/grid/grid.h"
#include "lib/model/params.h"
#include "lib/optim/optim.h"
#include "lib/util/timer.h"

namespace flexsp {

// Throws Error naming the key when the [parallel] ZeRO settings are not supported.
void zero_check(const ParallelSection& p);

class ZeroOptimizer {
 public:
  ZeroOptimizer(Backend& be, const ParamTable& table, const ParallelSection& p, Groups& groups);

  // Full-length replicas the model reads and accumulates into (padded()).
  float* params() { return params_.get(); }
  float* grads() { return grads_.get(); }
  int64_t padded() const { return padded_; }
  int64_t shard_begin() const { return begin_; }
  int64_t shard_end() const { return end_; }

  void zero_grads();
  // Reduces the accumulated gradients, computes the global gradient norm, and -- when it
  // is finite -- applies AdamW (lr, clipped to o.grad_clip) and re-assembles the
  // parameters. Returns the norm (NaN or inf: nothing was changed). Collective.
  // timers (optional) receive grad_reduce and optimizer time.
  double step(const OptimSection& o, double lr, PhaseTimes* timers = nullptr);

  AdamW& adamw() { return *adamw_; }

 private:
  Backend& be_;
  const ParamTable& table_;
  int stage_ = 0;
  Groups& groups_;
  Comm* shard_comm_ = nullptr;  // the optimizer shard group (world or node)
  int64_t padded_ = 0, begin_ = 0, end_ = 0, block_ = 0;
  Buffer<float> params_, grads_, scratch_;  // scratch_: one block, for the collectives
  std::unique_ptr<AdamW> adamw_;
};

}  // namespace flexsp

// Measurements on a micro-batch, as training runs it: the timing and activation-memory
// probes behind `flexsp profile` (and the tests that hold the planner to them).
//
// A SequenceProbe is the model (and, for an SP group of d > 1 ranks, Ulysses attention)
// set up for a packed micro-batch of one or more sequences (lengths given), its tokens
// cut into d equal shards as training cuts a group's tokens (shard_offsets), this rank
// holding shard `group->rank()`: run() is one forward + backward with seeded weights.
// Packing several sequences is what lets the profile tell a cost paid once per
// micro-batch from one paid per sequence (app/cmd_profile.cpp). Everything it
// allocates after the weights goes through the backend's allocator, so the activation
// footprint of a step -- the model's workspace, its attention state and Ulysses' buffers
// -- is what the allocator sees between construction and the end of run().
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/comm/comm.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/model/llama.h"
#include "lib/model/model_config.h"
#include "lib/runtime/ulysses.h"

namespace flexsp {

// The model's weights and gradient buffers (model states, not activations), seeded.
class ProbeWeights {
 public:
  ProbeWeights(Backend& be, const ModelConfig& c);
  const float* params() const { return params_.get(); }
  float* grads() { return grads_.get(); }

 private:
  Buffer<float> params_, grads_;
};

class SequenceProbe {
 public:
  // group: the SP group's communicator for backend buffers (nullptr: d = 1, local attention).
  // lens: the packed sequences' lengths (each >= 1), in order.
  SequenceProbe(Backend& be, const ModelConfig& c, const std::vector<int64_t>& lens, Comm* group);
  SequenceProbe(Backend& be, const ModelConfig& c, int64_t s, Comm* group)
      : SequenceProbe(be, c, std::vector<int64_t>{s}, group) {}
  ~SequenceProbe();
  SequenceProbe(const SequenceProbe&) = delete;
  SequenceProbe& operator=(const SequenceProbe&) = delete;

  int64_t local_tokens() const { return local_.tokens; }
  // Forward + backward (gradients accumulate into w). Collective over the group.
  void run(ProbeWeights& w);

 private:
  Backend& be_;
  int64_t s_;  // tokens of the micro-batch
  std::vector<int32_t> ids_, pos_, tgt_, cu_;
  MicroBatch local_;
  std::unique_ptr<Llama> model_;
  std::unique_ptr<UlyssesAttention> ulysses_;
};

// Activation bytes per local token that a step holds on this rank for an SP group of
// group->size() ranks (nullptr: 1) with the model's checkpointing setting: the growth of
// the allocator's peak (from before the probe is built to the end of its run) between a
// sequence of s1 and one of s2 tokens, per local token. Weights and gradients are
// allocated before and not counted. Collective over the group.
double measure_activation_bytes_per_token(Backend& be, const ModelConfig& c, Comm* group,
                                          int64_t s1, int64_t s2);

// What `flexsp profile` records as the planner's activation figures: the bytes per local
// token of measure_activation_bytes_per_token with and without activation checkpointing,
// each the most over an SP group of 1 rank (rank 0) and the widest group the model can run
// on the grid (Ulysses' buffers grow with d once kv heads are replicated). Lengths s1 < s2.
// Collective over the grid; every rank gets the result.
struct ActivationProfile {
  double bytes_per_token = 0, bytes_per_token_ckpt = 0;
  int widest = 1;  // the widest group measured
};
ActivationProfile profile_activation_memory(const Grid& grid, const Groups& groups, Backend& be,
                                            const ModelConfig& c, int64_t s1, int64_t s2);

}  // namespace flexsp

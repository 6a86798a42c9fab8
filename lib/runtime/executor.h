// Executes a step's plan on this rank: for every micro-batch, the rank's SP group packs
// its sequences into one token stream (every member reads the same tokens), the member
// takes its share (lib/runtime/group_tokens.h), and runs the model's forward and backward
// -- with Ulysses attention, or ring attention (USP), when the group has more than one
// device. Gradients accumulate into the caller's buffer; the gradient reduction across
// ranks (ZeRO) is the caller's next step.
//
// Weights come from a ParamProvider (full buffers, or ZeRO-3's per-unit gathers). A group
// with no sequence in a micro-batch skips it as a whole (its members exchange nothing
// within the group); with a collective provider its members still run the model's idle
// pass, so that every rank takes part in every gather and gradient reduction. A member
// whose shard is empty (fewer tokens than ranks) still takes part in the group's
// all-to-alls with zero rows.
//
// Tensor parallelism: the plan's ranks are devices (tp groups; SP groups are blocks of
// the data-parallel groups, SpGroups::dp), and every tp rank of a device runs the same
// part of the plan on the device's tokens, which the model cuts over its tp ranks;
// Ulysses runs between the devices' ranks of equal tp index, on their heads.
//
// Context parallelism: a group of d devices runs as u x r (cp_split). With r = 1 it is
// Ulysses as above; with a ring the member's tokens are its zigzag share instead of a
// contiguous shard (lib/runtime/ring_attention.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "io/dataset/token_dataset.h"
#include "lib/comm/groups.h"
#include "lib/data/sampler.h"
#include "lib/model/llama.h"
#include "lib/parallel/parallel_state.h"
#include "lib/plan/context_parallel.h"
#include "lib/plan/plan.h"
#include "lib/runtime/ring_attention.h"
#include "lib/runtime/ulysses.h"
#include "lib/runtime/group_tokens.h"
#include "lib/runtime/micro_batch.h"
#include "lib/util/timer.h"

namespace flexsp {

struct ExecStats {
  double loss_sum = 0;       // this rank's share (its local targets)
  int64_t local_tokens = 0;  // tokens this rank ran through the model
  int64_t micro_batches = 0;
};

class PlanExecutor {
 public:
  // max_local_tokens sizes the model's workspace and, per group member, Ulysses' and the
  // ring's buffers (allocated once per group shape: their reserve), max_group_tokens bounds
  // a group's stream. (Tokens per device, padding included.) groups: what SP groups run
  // on (ParallelState::sp_groups).
  PlanExecutor(Backend& be, const ModelConfig& c, const SpGroups& groups,
               int64_t max_local_tokens, int64_t max_group_tokens);

  // Forward and backward of every micro-batch of plan for this rank (grads +=).
  // loss_scale = 1 / predictions of the whole global batch.
  // timers (optional) receive data, forward, backward, attention and all-to-all time.
  ExecStats run(const Plan& plan, const std::vector<SeqRef>& batch, const TokenDataset& ds,
                ParamProvider& pp, double loss_scale, PhaseTimes* timers = nullptr);
  // Full flat buffers.
  ExecStats run(const Plan& plan, const std::vector<SeqRef>& batch, const TokenDataset& ds,
                const float* params, float* grads, double loss_scale,
                PhaseTimes* timers = nullptr);

  Llama& model() { return model_; }

 private:
  // This member's share of group_mb_ in a group of d (Ulysses or, with a ring, its zigzag
  // share), with the attention op's layout set.
  MicroBatch member_view(int d, const CpSplit& cp);

  SpGroups groups_;
  int tp_ = 1;
  Llama model_;
  FlatParams flat_;
  UlyssesAttention ulysses_;
  RingAttention ring_;  // groups with a ring (r > 1): zigzag layout, USP
  std::vector<SeqRef> seqs_;  // the group's sequences
  HostMicroBatch group_mb_;   // the group's whole stream
  MemberTokens mine_;         // this rank's share of it (groups of several)
};

}  // namespace flexsp

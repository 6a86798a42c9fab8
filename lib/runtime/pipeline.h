// Pipeline parallelism, the runtime side (docs/parallel.md): one stage of a pipeline runs
// its share of a step's plan.
//
// Design:
//  - Every stage runs the same plan (planned for the ranks of one stage: its devices are
//    tp groups); the plan's micro-batches are the pipeline's micro-batches. A rank's
//    partner in the next and previous stage holds the same tp and SP position, so it
//    holds the same rows of the same micro-batch: activations and their gradients go
//    rank to rank over PipelineRole::p2p in schedule order (lib/runtime/stage_link.h:
//    an activation goes out in one group with the next gradient from the same stage, so
//    NCCL's in-order streams cannot deadlock).
//  - A stage holds several units at once (lib/plan/pipeline_schedule.h): each sits in
//    its own slot, a stage model (Llama built with the stage's layers) with its own
//    workspace and attention state; all slots read the same weights from the provider and
//    accumulate into the same gradients. Slot count = units held at once, so the
//    activation memory is what the schedule needs: a 1F1B slot is sized for the largest
//    micro-batch, a Seq1F1B slot starts at a chunk's share of it and grows (while free)
//    when a larger chunk comes.
//  - The first stage loads token ids, the last the targets; every stage loads the
//    micro-batch's layout (its group reads the same sequences). A group with no sequence
//    in a micro-batch skips it on every stage.
//  - Seq1F1B (chunks > 1): a micro-batch's chunks (lib/runtime/seq_chunks.h) are the
//    units; chunk j attends to the keys and values its micro-batch's earlier chunks keep
//    in their slots, and slots are taken from a free list (backwards free them out of
//    forward order). In an SP group of several devices the chunk is the group's stream and
//    the chunk attention runs as Ulysses' core, on the rank's heads. In a group with a
//    ring (r > 1) each chunk is zigzag-split over the ring on its own, and the ring carries
//    the earlier chunks' keys/values too (lib/runtime/ring_chunks.h).
//  - SP groups run as the plain executor's (set_context_parallel, cp_split): Ulysses, or
//    with a ring (r > 1) the member's zigzag share and the slot's RingAttention, built the
//    first time the slot meets a ring group. Ring traffic stays inside the stage's group
//    communicator, apart from the pipeline's p2p one.
//  - The provider: ZeRO 0-2's full buffers, or ZeRO 3's unit-by-unit gathers in the
//    schedule's order. A collective provider needs the same calls on every rank of the
//    stage: every rank runs the same schedule, and where its group has nothing in a
//    unit (no sequence, or an empty Seq1F1B chunk) it runs the model's idle_forward /
//    idle_backward at that unit's forward and backward steps. Each step first prefetches
//    the unit of weights its pass starts with, so that gather overlaps the receive.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "io/dataset/token_dataset.h"
#include "lib/comm/groups.h"
#include "lib/data/sampler.h"
#include "lib/model/llama.h"
#include "lib/parallel/parallel_state.h"
#include "lib/plan/plan.h"
#include "lib/plan/context_parallel.h"
#include "lib/runtime/executor.h"
#include "lib/runtime/ring_attention.h"
#include "lib/runtime/seq_chunks.h"
#include "lib/runtime/ulysses.h"
#include "lib/runtime/micro_batch.h"
#include "lib/util/timer.h"

namespace flexsp {

class RingChunkAttention;

// What one stage did over the steps run so far (host wall clock: on a GPU the host's
// view, which waits at the receives).
struct PipelineStats {
  int64_t steps = 0, units = 0;  // units: micro-batches or chunks run through the stage
  double forward_ms = 0, backward_ms = 0;  // compute, receives excluded
  double p2p_ms = 0;   // blocked in receives from the neighbours: the bubble, as seen here
  double wall_ms = 0;  // the schedules, end to end
  size_t activation_bytes = 0;  // the slots' allocations (the allocator's count), at most
};

class PipelineExecutor {
 public:
  // c: the stage's model (its layers). groups: the stage's (ParallelState::sp_groups). Sizes
  // as PlanExecutor's.
  PipelineExecutor(Backend& be, const ModelConfig& c, const SpGroups& groups,
                   int64_t max_local_tokens, int64_t max_group_tokens, const PipelineRole& role);
  ~PipelineExecutor();

  // Forward and backward of every micro-batch of plan through this stage (grads +=).
  // loss_sum in the result is the last stage's (0 elsewhere).
  ExecStats run(const Plan& plan, const std::vector<SeqRef>& batch, const TokenDataset& ds,
                ParamProvider& pp, double loss_scale, PhaseTimes* timers = nullptr);

  const ParamTable& table() const { return table_; }  // the stage's layout (every slot's)
  const PipelineStats& stats() const { return stats_; }

 private:
  struct Slot;
  struct Run;
  Slot& slot(int i);
  // One step of the schedule: unit's forward (receive, compute, send) or backward.
  void forward_unit(Run& r, int unit);
  void backward_unit(Run& r, int unit);
  // (Re)builds a free slot's model and attention for units of up to `cap` tokens.
  void build(Slot& s, int64_t cap);
  // Grows a free slot to hold `tokens` (Seq1F1B's slots start at a chunk's share).
  void fit(Slot& s, int64_t tokens);
  // Adds what the backend allocated since `before` (slot building and layouts, nothing
  // else allocates during a run) to the slots' bytes.
  void account(size_t before);
  // Loads unit u's micro-batch for this rank into the slot; false: its group is empty.
  bool prepare(Slot& s, const PlanMicroBatch& mb, const std::vector<SeqRef>& batch,
               const TokenDataset& ds, PhaseTimes* timers);
  // This rank's share of s.group_mb (group_tokens.h) and its attention's layout: a
  // Ulysses shard, or (ring / USP) the zigzag share.
  void take_shard(Slot& s, const PlanGroup& g);
  void take_ring_share(Slot& s, const PlanGroup& g, const CpSplit& cp);
  CpSplit split(int d) const;
  // The same for chunk j of micro-batch mb (j = 0 loads and cuts the micro-batch).
  bool prepare_chunk(Slot& s, const PlanMicroBatch& mb, int j, const std::vector<SeqRef>& batch,
                     const TokenDataset& ds, PhaseTimes* timers);

  Backend& be_;
  ModelConfig cfg_;
  SpGroups groups_;
  int64_t max_local_ = 0, max_group_ = 0;
  TpGroup tp_;
  PipelineRole role_;
  ParamTable table_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::unique_ptr<SeqChunkScratch> scratch_;  // seq1f1b
  PhaseTimes* timers_ = nullptr;
  PipelineStats stats_;
  int64_t held_ = 0;  // bytes the slots (models, attention state) hold now
  std::vector<SeqRef> seqs_;
  // Seq1F1B: the current micro-batch's chunks, sequence count, and the attention of its
  // chunks so far.
  HostMicroBatch whole_;
  std::vector<HostMicroBatch> chunks_;
  int real_ = 0;
  std::vector<SeqChunkAttention*> chunk_ops_;
  std::vector<RingChunkAttention*> ring_ops_;  // the same in a group with a ring
};

}  // namespace flexsp

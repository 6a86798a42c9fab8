// The parallel state of a training run (docs/parallel.md): the mesh of its ranks and, for
// this rank, its coordinates, communicators, pipeline neighbours and ZeRO peers, and
// whether ZeRO's gradient all-reduce overlaps the backward. It is built once, from the
// [parallel] keys and the ranks; everything else asks it, and nothing outside this file
// derives one rank from another by arithmetic.
//
// The mesh, outermost first: pp pipeline stages x dp devices x tp tensor-parallel ranks
// (a device, the planner's unit, is a block of tp consecutive ranks inside a node). Grid
// rank = pp_rank * (dp * tp) + dp_rank * tp + tp_rank, the world renumbered node by node
// (lib/grid/grid.h). The grids and their communicators (lib/comm/groups.h):
//   world   every rank
//   stage   the ranks of my pipeline stage (the world without a pipeline): plans, tensor
//           parallelism, Ulysses and ZeRO see only these
//   dp      the ranks of my stage with my tp index, one per device (the stage's without
//           tensor parallelism): SP groups are its aligned blocks, ZeRO shards over it
//   tp      my block of tp consecutive ranks (a block of the stage's groups)
//   peers   my position in every stage, rank = stage (host: the gradient norm, weights)
//   tied    with tied embeddings, my positions in the first and last stage (the
//           embedding's gradient; null elsewhere)
// Pipeline partners hold the same dp and tp position in the neighbouring stages, so they
// hold the same rows of every micro-batch; activations go over the world's communicator
// for backend memory.
//
// Megatron-core's parallel_state is the model, as an explicit object: the caller owns it
// and hands it down; there are no globals. It is built in two steps because communicators
// for buffers in backend memory need the backend: the constructor builds the grids and the
// host communicators, attach_backend() the backend's (parallel.comm) and the overlap
// decision, for as long as the guard it returns lives.
#pragma once

#include <mpi.h>

#include <memory>

#include "lib/backend/backend.h"
#include "lib/comm/comm_choice.h"
#include "lib/comm/groups.h"
#include "lib/config/config.h"
#include "lib/grid/grid.h"
#include "lib/model/tensor_parallel.h"
#include "lib/plan/context_parallel.h"

namespace flexsp {

class BackendComms;

// What the plan executors run SP groups on (lib/runtime/executor.h): a group of d devices
// is an aligned block of d ranks of `dp` (backend memory for its all-to-alls and ring
// shifts), each device's ranks are the tensor-parallel group `tp`, and the group runs as
// cp_split(cp_mode, d, heads, kv heads, devices_per_node) Ulysses x ring.
struct SpGroups {
  Groups* dp = nullptr;
  TpGroup tp;
  CpMode cp_mode = CpMode::automatic;
  int devices_per_node = 0;  // 0: unbounded
};

// One stage's place in the pipeline (lib/runtime/pipeline.h).
struct PipelineRole {
  int stage = 0, stages = 1;
  Comm* p2p = nullptr;  // backend memory; prev / next: my partners' ranks in it (-1: none)
  int prev = -1, next = -1;
  int chunks = 1;       // Seq1F1B chunks per micro-batch (1: 1F1B)
};

// What ZeRO shards over and reduces with (lib/runtime/zero.h). Null comms: no such peer.
struct ZeroPeers {
  Groups* dp = nullptr;        // the data-parallel peers: shard groups are its node or world
  Groups* tp_blocks = nullptr; // groups whose blocks of `tp` ranks are the tp groups
  int tp = 1;
  Comm* tied = nullptr;        // backend memory: my copies of a tied embedding
  Comm* stages = nullptr;      // host memory: my position in every stage
  bool skip_embedding = false; // the last stage's tied copy: left out of the gradient norm
  bool overlap = true;         // ZeRO 0-1: each unit's all-reduce starts inside the backward
};

class ParallelState {
 public:
  // Collective over `world`: the grid of parallel.ranks_per_node, tp_size and pp_size,
  // the stage's and the data-parallel grids and every host communicator above. Throws
  // Error naming the key when the ranks cannot be laid out so.
  ParallelState(MPI_Comm world, const RunConfig& cfg);
  ~ParallelState();
  ParallelState(const ParallelState&) = delete;
  ParallelState& operator=(const ParallelState&) = delete;

  // While it lives, the communicators for buffers in backend memory exist (parallel.comm's
  // choice for this backend) and the overlap is decided. Keep it inside the backend's life.
  class Attachment {
   public:
    explicit Attachment(ParallelState* s = nullptr) : s_(s) {}
    Attachment(Attachment&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
    Attachment& operator=(Attachment&& o) noexcept;
    ~Attachment();

   private:
    ParallelState* s_;
  };
  // Collective over the world. Throws Error naming parallel.comm when it cannot be met.
  [[nodiscard]] Attachment attach_backend(Backend& be);

  // The mesh and my place in it.
  int size() const { return world_.size; }
  int pp() const { return world_.pp_size; }
  int dp() const { return world_.dp_size; }
  int tp() const { return world_.tp_size; }
  int rank() const { return world_.rank; }
  int pp_rank() const { return world_.pp_rank; }
  int dp_rank() const { return world_.dp_rank; }
  int tp_rank() const { return world_.tp_rank; }
  bool first_stage() const { return pp_rank() == 0; }
  bool last_stage() const { return pp_rank() == pp() - 1; }
  // Devices of my stage on one node, as the planner counts them.
  int devices_per_node() const;

  const Grid& world() const { return world_; }
  Groups& world_groups() { return *world_groups_; }
  const Grid& stage() const { return pp() > 1 ? stage_ : world_; }
  Groups& stage_groups() { return pp() > 1 ? *stage_groups_ : *world_groups_; }
  Groups& dp_groups() { return tp() > 1 ? *dp_groups_ : stage_groups(); }
  Comm& tp_host() { return world_groups_->block(tp()); }  // my tp group, host memory
  Comm* peers_host() { return peers_.get(); }             // null without a pipeline
  Comm* tied_host() { return tied_host_.get(); }          // null but on a tied end

  // After attach_backend():
  CommChoice comm_choice() const { return choice_; }
  bool overlap_reduce() const { return overlap_; }
  SpGroups sp_groups();
  PipelineRole pipeline_role();
  ZeroPeers zero_peers();

 private:
  void detach_backend();

  RunConfig cfg_;
  Grid world_, stage_, dp_;  // stage_ with a pipeline, dp_ with tensor parallelism
  std::unique_ptr<Groups> world_groups_, stage_groups_, dp_groups_;
  std::unique_ptr<Comm> peers_, tied_host_, tied_staged_;
  int prev_ = -1, next_ = -1;  // pipeline partners, world ranks
  std::unique_ptr<BackendComms> world_comms_, stage_comms_, dp_comms_;
  CommChoice choice_ = CommChoice::host;
  bool overlap_ = false;
  bool attached_ = false;
};

}  // namespace flexsp

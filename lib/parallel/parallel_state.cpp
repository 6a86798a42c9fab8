#include "lib/parallel/parallel_state.h"

#include <algorithm>
#include <string>
#include <thread>

#include "lib/comm/comm_staged.h"
#include "lib/platform/backend_comms.h"
#include "lib/platform/device_binding.h"
#include "lib/util/agree.h"

namespace flexsp {

ParallelState::ParallelState(MPI_Comm world, const RunConfig& cfg) : cfg_(cfg) {
  const ParallelSection& p = cfg.parallel;
  agree(world, [&] {
    world_ = grid_create(world, p.ranks_per_node, p.tp_size, p.pp_size);
    grid_bind_device(world_);
  });
  world_groups_ = std::make_unique<Groups>(groups_create(world_));
  if (pp() > 1) {
    stage_ = grid_stage(world_);
    stage_groups_ = std::make_unique<Groups>(groups_create(stage_));
    // My position in the stage names my partners in the others.
    const int per_stage = world_.ranks_per_stage(), position = rank() % per_stage;
    if (!first_stage()) prev_ = rank() - per_stage;
    if (!last_stage()) next_ = rank() + per_stage;
    MPI_Comm peers, tied;
    MPI_Comm_split(world_.comm, position, pp_rank(), &peers);
    peers_ = make_mpi_comm(peers, true, stage_groups_->progress);
    const bool tied_end = cfg.model.tie_embeddings && (first_stage() || last_stage());
    MPI_Comm_split(world_.comm, tied_end ? position : MPI_UNDEFINED, pp_rank(), &tied);
    if (tied != MPI_COMM_NULL) tied_host_ = make_mpi_comm(tied, true, stage_groups_->progress);
  }
  if (tp() > 1) {
    dp_ = grid_dp(stage());
    dp_groups_ = std::make_unique<Groups>(groups_create(dp_));
  }
}

ParallelState::~ParallelState() {
  detach_backend();
  tied_host_.reset();
  peers_.reset();
  dp_groups_.reset();
  if (dp_.comm != MPI_COMM_NULL) grid_destroy(dp_);
  stage_groups_.reset();
  if (stage_.comm != MPI_COMM_NULL) grid_destroy(stage_);
  world_groups_.reset();
  grid_destroy(world_);
}

int ParallelState::devices_per_node() const {
  return std::min(world_.ranks_per_node, stage().size) / tp();
}

ParallelState::Attachment ParallelState::attach_backend(Backend& be) {
  FLEXSP_ASSERT(!attached_);
  const bool own_gpus = ranks_have_own_gpus(world_, *world_groups_->world);
  agree(world_.comm, [&] {
    choice_ = choose_comm(cfg_.parallel.comm, be.name(), nccl_built(), own_gpus);
  });
  attached_ = true;
  Attachment guard(this);  // from here on a throw detaches
  world_comms_ = std::make_unique<BackendComms>(*world_groups_, world_, be, choice_);
  if (stage_groups_) stage_comms_ = std::make_unique<BackendComms>(*stage_groups_, stage_, be, choice_);
  // The tied embedding's gradient (backend memory) crosses over staged MPI on a device
  // backend, over the host communicator on the CPU backend.
  if (tied_host_ && choice_ != CommChoice::host)
    tied_staged_ = make_staged_comm(*tied_host_, make_staging_area(backend_mover(be)));
  if (dp_groups_) dp_comms_ = std::make_unique<BackendComms>(*dp_groups_, dp_, be, choice_);

  // parallel.reduce_overlap = auto overlaps the gradient all-reduce with the last backward
  // only where something can run beside it: not on CPU ranks that outnumber their host's
  // cores, where the progress engine's rounds only lengthen the backward (docs/parallel.md).
  // A pipeline's ZeRO 0-2 reduce after the schedule. Agreed over the world: every rank
  // must make the same collective calls.
  const ReduceOverlap ro = cfg_.parallel.reduce_overlap;
  const unsigned cores = std::thread::hardware_concurrency();
  const bool room = std::string(be.name()) != "cpu" || cores == 0 ||
                    world_.real_ranks_per_node <= static_cast<int>(cores);
  int64_t on = pp() == 1 && (ro == ReduceOverlap::on || (ro == ReduceOverlap::automatic && room));
  world_groups_->world->all_reduce(&on, &on, 1, DType::i64, ReduceOp::min);
  overlap_ = on != 0;
  return guard;
}

void ParallelState::detach_backend() {
  if (!attached_) return;
  dp_comms_.reset();
  tied_staged_.reset();
  stage_comms_.reset();
  world_comms_.reset();
  attached_ = false;
}

ParallelState::Attachment& ParallelState::Attachment::operator=(Attachment&& o) noexcept {
  if (this != &o) {
    if (s_ != nullptr) s_->detach_backend();
    s_ = o.s_;
    o.s_ = nullptr;
  }
  return *this;
}

ParallelState::Attachment::~Attachment() {
  if (s_ != nullptr) s_->detach_backend();
}

SpGroups ParallelState::sp_groups() {
  SpGroups g;
  g.dp = &dp_groups();
  if (tp() > 1) g.tp = {&stage_groups().for_backend(CommPurpose::all_to_all).block(tp()), tp(), tp_rank()};
  g.cp_mode = cfg_.parallel.cp_mode;
  g.devices_per_node = devices_per_node();
  return g;
}

PipelineRole ParallelState::pipeline_role() {
  FLEXSP_ASSERT(attached_);
  return {pp_rank(), pp(), world_groups_->for_backend(CommPurpose::all_to_all).world.get(), prev_,
          next_, pp_chunks(cfg_.parallel.pp_schedule, cfg_.parallel.seq_chunks)};
}

ZeroPeers ParallelState::zero_peers() {
  FLEXSP_ASSERT(attached_);
  ZeroPeers z;
  z.dp = &dp_groups();
  z.tp_blocks = &stage_groups();
  z.tp = tp();
  z.tied = tied_staged_ ? tied_staged_.get() : tied_host_.get();
  z.stages = peers_.get();
  z.skip_embedding = pp() > 1 && last_stage() && cfg_.model.tie_embeddings;
  z.overlap = overlap_;
  return z;
}

}  // namespace flexsp

// parallel.comm: the choice (a table in backend_comms.h) and building the backend set.
// CUDA and NCCL are reached only through kernels/cuda headers that name no CUDA type, so
// this file compiles the same in every build.
#include "lib/comm/backend_comms.h"

#include <cstring>
#include <vector>

#include "lib/util/error.h"

#ifdef FLEXSP_HAVE_CUDA
#include "kernels/cuda/device.h"
#endif
#ifdef FLEXSP_HAVE_NCCL
#include "kernels/cuda/comm_nccl.h"
#endif

namespace flexsp {

const char* comm_choice_name(CommChoice c) {
  switch (c) {
    case CommChoice::host: return "mpi";
    case CommChoice::staged: return "mpi-staged";
    case CommChoice::nccl: return "nccl";
  }
  return "?";
}

CommChoice choose_comm(const std::string& mode, const std::string& backend, bool nccl_built,
                       bool gpu_per_rank) {
  const bool cpu = backend == "cpu";
  if (mode == "mpi-staged") return CommChoice::staged;
  if (mode == "mpi") return cpu ? CommChoice::host : CommChoice::staged;
  if (mode == "auto") {
    if (cpu) return CommChoice::host;
    return nccl_built && gpu_per_rank ? CommChoice::nccl : CommChoice::staged;
  }
  FLEXSP_CHECK(mode == "nccl", "parallel.comm: '{}' is not one of auto, mpi, nccl, mpi-staged",
               mode);
  FLEXSP_CHECK(!cpu,
               "parallel.comm: 'nccl' needs train.backend = cuda (the {} backend's buffers are "
               "host memory; use mpi or auto)", backend);
  FLEXSP_CHECK(nccl_built,
               "parallel.comm: 'nccl' is not available in this build (NCCL was not found when "
               "flexsp was built); use mpi or auto");
  FLEXSP_CHECK(gpu_per_rank,
               "parallel.comm: 'nccl' needs a GPU of its own on every rank (NCCL refuses two "
               "ranks of one communicator on one GPU); use mpi or auto, which stage through host "
               "memory");
  return CommChoice::nccl;
}

bool nccl_built() {
#ifdef FLEXSP_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

bool ids_distinct(const uint8_t* ids, int n, size_t width) {
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if (std::memcmp(ids + i * width, ids + j * width, width) == 0) return false;
  return true;
}

bool ranks_have_own_gpus(const Grid& g, Comm& host_world) {
  constexpr size_t kId = 16;
  // A rank without a GPU sends all zeros: equal to any other such rank, and flagged.
  std::vector<uint8_t> mine(kId + 1, 0), all(static_cast<size_t>(host_world.size()) * (kId + 1));
#ifdef FLEXSP_HAVE_CUDA
  if (g.device >= 0) {
    cuda_device_uuid(g.device, mine.data());
    mine[kId] = 1;
  }
#else
  (void)g;
#endif
  host_world.all_gather(mine.data(), all.data(), kId + 1, DType::u8);
  for (int r = 0; r < host_world.size(); ++r)
    if (all[r * (kId + 1) + kId] == 0) return false;
  return ids_distinct(all.data(), host_world.size(), kId + 1);
}

namespace {

class BackendMover final : public HostMover {
 public:
  explicit BackendMover(Backend& be) : be_(be) {}
  void to_host(void* host_dst, const void* src, size_t bytes) override {
    be_.copy_to_host(host_dst, src, bytes);
  }
  void from_host(void* dst, const void* host_src, size_t bytes) override {
    be_.copy_from_host(dst, host_src, bytes);
  }
  void* alloc_host(size_t bytes) override { return be_.alloc_host(bytes); }
  void free_host(void* p) override { be_.free_host(p); }

 private:
  Backend& be_;
};

}  // namespace

std::shared_ptr<HostMover> backend_mover(Backend& be) {
  return std::make_shared<BackendMover>(be);
}

std::unique_ptr<CommSet> staged_comm_set(const CommSet& host, std::shared_ptr<HostMover> mover) {
  auto area = make_staging_area(std::move(mover));
  auto set = std::make_unique<CommSet>();
  set->world = make_staged_comm(*host.world, area);
  set->node = make_staged_comm(*host.node, area);
  set->cross_node = make_staged_comm(*host.cross_node, area);
  for (const auto& b : host.blocks) set->blocks.push_back(b ? make_staged_comm(*b, area) : nullptr);
  return set;
}

BackendComms::BackendComms(Groups& groups, const Grid& grid, Backend& be, CommChoice choice)
    : groups_(groups) {
  groups_.reset_device();
  switch (choice) {
    case CommChoice::host:
      break;
    case CommChoice::staged:  // the host orders staged operations: one set serves every purpose
      groups_.device[0] = staged_comm_set(groups_, backend_mover(be));
      break;
    case CommChoice::nccl:
#ifdef FLEXSP_HAVE_NCCL
      groups_.device = nccl_comm_sets(groups_, grid, be);
#else
      (void)grid;
      fail("parallel.comm: 'nccl' is not available in this build");
#endif
      break;
  }
}

BackendComms::~BackendComms() { groups_.reset_device(); }

}  // namespace flexsp

// Building the backend set for parallel.comm's choice (comm_choice.h).
// CUDA and NCCL are reached only through kernels/cuda headers that name no CUDA type, so
// this file compiles the same in every build.
#include "lib/platform/backend_comms.h"

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

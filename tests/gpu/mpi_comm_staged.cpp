// Multi-rank, CUDA backend: the staged communicators (device buffers copied through
// page-locked host memory around each MPI call) give plain MPI's results bit for bit on
// every group, and the staging settles (no host allocation once warm); send_recv (ring
// shifts, chains, zero counts) and the pipeline's stage links on device buffers. Registered for 1,
// 2 and 4 ranks: on a one-GPU machine the ranks share the GPU, as multi-rank training
// does there.
#include "mpi_gpu_fixture.h"

namespace flexsp::testing {
namespace {

using GpuMpiStaged = MpiGpuTest;

TEST_F(GpuMpiStaged, EveryGroupMatchesHostMpi) {
  BackendComms comms(groups_, grid_, *be_, CommChoice::staged);
  check_set_matches_host(groups_, *be_, "mpi-staged", false, 1, 2);
}

TEST_F(GpuMpiStaged, SendRecvOnEveryGroup) {
  BackendComms comms(groups_, grid_, *be_, CommChoice::staged);
  check_set_send_recv(groups_.for_backend(), *be_, "gpu");
}

TEST_F(GpuMpiStaged, PipelineStageLinks) {
  BackendComms comms(groups_, grid_, *be_, CommChoice::staged);
  check_stage_links(*groups_.for_backend(CommPurpose::all_to_all).world, *be_, "gpu", size_t(1) << 18);
}

TEST_F(GpuMpiStaged, OrderedWithTheComputeStream) {
  // The staging copies run on the backend's stream and synchronize it.
  BackendComms comms(groups_, grid_, *be_, CommChoice::staged);
  check_ordered_with_compute(*be_, *groups_.for_backend().world);
}

}  // namespace
}  // namespace flexsp::testing

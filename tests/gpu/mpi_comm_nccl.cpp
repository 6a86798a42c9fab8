// Multi-rank, CUDA backend: the NCCL communicators (world from a unique id broadcast over
// MPI, every other group split from it once) give the host MPI Comm's results on every
// group (integer-valued data, so sums in NCCL's order are exact) and are ordered with the
// backend's compute stream through events.
// NCCL needs a GPU per rank: with fewer GPUs than ranks the test skips (1 rank always runs).
#include "kernels/cuda/comm_nccl.h"
#include "mpi_gpu_fixture.h"

namespace flexsp::testing {
namespace {

class GpuMpiNccl : public MpiGpuTest {
 protected:
  void SetUp() override {
    MpiGpuTest::SetUp();
    if (IsSkipped()) return;
    if (!ranks_have_own_gpus(grid_, *groups_.world))  // collective: every rank skips alike
      GTEST_SKIP() << "NCCL needs a GPU per rank: " << grid_.size << " ranks, "
                   << grid_.gpus_visible << " GPU(s)";
  }
};

TEST_F(GpuMpiNccl, EveryGroupMatchesHostMpi) {
  BackendComms comms(groups_, grid_, *be_, CommChoice::nccl);
  if (grid_.rank == 0) std::printf("NCCL version %d, %d rank(s)\n", nccl_version(), grid_.size);
  check_set_matches_host(groups_, *be_, "nccl", true, 1, 2);
}

TEST_F(GpuMpiNccl, OrderedWithTheComputeStream) {
  // NCCL runs on its own stream: the events must order it against the compute stream.
  BackendComms comms(groups_, grid_, *be_, CommChoice::nccl);
  check_ordered_with_compute(*be_, *groups_.for_backend().world);
}

}  // namespace
}  // namespace flexsp::testing

// Multi-rank, CUDA backend: the NCCL communicators (world from a unique id broadcast over
// MPI, every other group split from it once, one set per purpose) give the host MPI
// Comm's results on every group of every purpose (integer-valued data, so sums in NCCL's
// order are exact), are ordered with the backend's compute stream through events, and
// the purposes' operations run side by side in ZeRO-3's order: a started gradient
// reduce-scatter, then a started parameter gather, then a blocking all-to-all and compute,
// completed last-started-first.
// send_recv (ring shifts, chains, zero counts) on every group of every purpose; the
// pipeline's stage links (activations paired with gradients in one group) on the world.
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

TEST_F(GpuMpiNccl, PurposesRunSideBySide) {
  BackendComms comms(groups_, grid_, *be_, CommChoice::nccl);
  Comm& grad = *groups_.for_backend(CommPurpose::grad_reduce).world;
  Comm& gather = *groups_.for_backend(CommPurpose::param_gather).world;
  Comm& a2a = *groups_.for_backend(CommPurpose::all_to_all).world;
  EXPECT_NE(&grad, &gather);
  EXPECT_NE(&gather, &a2a);
  Comm& host = *groups_.world;
  const int n = host.size(), me = host.rank();
  const size_t block = size_t(1) << 20;
  Rng r(77 + static_cast<uint64_t>(me));
  const std::vector<float> x = comm_values<float>(r, block * n, true);
  const std::vector<float> part = comm_values<float>(r, block, true);
  std::vector<float> want_rs(block), want_ag(block * n);
  host.reduce_scatter(x.data(), want_rs.data(), block, DType::f32, ReduceOp::sum);
  host.all_gather(part.data(), want_ag.data(), block, DType::f32);
  std::vector<size_t> counts(n, 1000), offsets(n);
  for (int p = 0; p < n; ++p) offsets[p] = static_cast<size_t>(p) * 1000;
  const std::vector<float> sx = comm_values<float>(r, 1000 * n, true);
  std::vector<float> want_a2a(1000 * n);
  host.all_to_all_v(sx.data(), counts.data(), offsets.data(), want_a2a.data(), counts.data(),
                    offsets.data(), DType::f32);
  Buffer<float> dx = upload(*be_, x), dpart = upload(*be_, part), dsx = upload(*be_, sx);
  Buffer<float> mine(*be_, block), all(*be_, block * n), got(*be_, 1000 * n);
  Buffer<float> busy = upload(*be_, std::vector<float>(size_t(1) << 24, 1.0f));
  for (int rep = 0; rep < 3; ++rep) {
    auto rs = grad.start_reduce_scatter(dx.get(), mine.get(), block, DType::f32, ReduceOp::sum);
    auto ag = gather.start_all_gather(dpart.get(), all.get(), block, DType::f32);
    a2a.all_to_all_v(dsx.get(), counts.data(), offsets.data(), got.get(), counts.data(),
                     offsets.data(), DType::f32);
    be_->scale(busy.get(), int64_t(1) << 24, 1.0f);  // compute beside them
    ag->wait();
    rs->wait();
    be_->synchronize();
    EXPECT_TRUE(ag->done() && rs->done());
    expect_bitwise(download(*be_, mine, block), want_rs, "reduce-scatter beside a gather");
    expect_bitwise(download(*be_, all, block * n), want_ag, "gather beside a reduce-scatter");
    expect_bitwise(download(*be_, got, 1000 * n), want_a2a, "all-to-all beside both");
  }
}

TEST_F(GpuMpiNccl, SendRecvOnEveryGroup) {
  BackendComms comms(groups_, grid_, *be_, CommChoice::nccl);
  for (size_t p = 0; p < kCommPurposes; ++p)
    check_set_send_recv(groups_.for_backend(static_cast<CommPurpose>(p)), *be_, "nccl");
}

TEST_F(GpuMpiNccl, PipelineStageLinks) {
  // Sends wait for their receives on NCCL's in-order stream: the link's pairing is what
  // keeps 1F1B's steady state from deadlocking (a hang here fails on the ctest timeout).
  BackendComms comms(groups_, grid_, *be_, CommChoice::nccl);
  check_stage_links(*groups_.for_backend(CommPurpose::all_to_all).world, *be_, "nccl", size_t(1) << 21);
}

TEST_F(GpuMpiNccl, OrderedWithTheComputeStream) {
  // NCCL runs on its own stream: the events must order it against the compute stream.
  BackendComms comms(groups_, grid_, *be_, CommChoice::nccl);
  check_ordered_with_compute(*be_, *groups_.for_backend().world);
}

}  // namespace
}  // namespace flexsp::testing

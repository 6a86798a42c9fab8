// Fixture for the multi-rank GPU tests (run under mpirun, several ranks possibly sharing
// the one GPU): skips without a device (every rank sees the same count on one machine),
// else builds the grid (which binds each rank's GPU), the host groups and a CUDA backend.
// The communicators for backend memory are the test's to attach (BackendComms).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>

#include "gpu_test_common.h"
#include "lib/platform/backend_comms.h"
#include "lib/platform/device_binding.h"
#include "lib/grid/grid.h"
#include "support/comm_check.h"
#include "support/send_recv_check.h"

namespace flexsp::testing {

class MpiGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FLEXSP_REQUIRE_GPU();
    int world = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    // Emulated nodes of 2 ranks where that leaves more than one node.
    grid_ = grid_create(MPI_COMM_WORLD, world % 2 == 0 && world > 2 ? 2 : 0);
    grid_bind_device(grid_);
    groups_ = groups_create(grid_);
    be_ = make_cuda_backend();
  }
  void TearDown() override {
    if (grid_.comm == MPI_COMM_NULL) return;  // skipped before the grid
    groups_.reset_device();
    be_.reset();
    groups_ = Groups{};
    grid_destroy(grid_);
  }

  Grid grid_;
  Groups groups_;
  std::unique_ptr<Backend> be_;
};

// A kernel enqueued just before a collective must be seen by it, and one enqueued just
// after must see its result: scale by 2, all-reduce (sum), scale by 1 / (2 W), three
// times over 16M floats (long enough that unordered work would overlap), all ones at the
// end. Exact for a power-of-two world size.
inline void check_ordered_with_compute(Backend& be, Comm& world) {
  const size_t n = size_t(1) << 24;
  auto d = upload(be, std::vector<float>(n, 1.0f));
  for (int rep = 0; rep < 3; ++rep) {
    be.scale(d.get(), static_cast<int64_t>(n), 2.0f);
    world.all_reduce(d.get(), d.get(), n, DType::f32, ReduceOp::sum);
    be.scale(d.get(), static_cast<int64_t>(n), 0.5f / static_cast<float>(world.size()));
  }
  const std::vector<float> got = download(be, d);
  size_t bad = 0;
  for (float x : got) bad += x != 1.0f;
  EXPECT_EQ(bad, 0u) << world.kind() << ": a kernel and a collective overlapped";
}

}  // namespace flexsp::testing

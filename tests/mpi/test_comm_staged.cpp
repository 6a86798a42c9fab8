// The staged communicator set (lib/platform/backend_comms.h, staged_comm_set) over the CPU
// backend: on every group (world, emulated node, cross-node, each aligned block) each
// operation gives the host MPI Comm's result bit for bit (tests/support/comm_check.h);
// the groups line up with the host set's; a steady state allocates no host memory;
// send_recv on every group (tests/support/send_recv_check.h).
#include <gtest/gtest.h>

#include "lib/platform/backend_comms.h"
#include "lib/grid/grid.h"
#include "support/comm_check.h"
#include "support/send_recv_check.h"

namespace flexsp::testing {
namespace {

// Counts host allocations on top of a backend's mover.
struct CountingMover final : HostMover {
  explicit CountingMover(std::shared_ptr<HostMover> m) : inner(std::move(m)) {}
  void to_host(void* h, const void* s, size_t n) override { inner->to_host(h, s, n); }
  void from_host(void* d, const void* h, size_t n) override { inner->from_host(d, h, n); }
  void* alloc_host(size_t n) override {
    ++allocs;
    return inner->alloc_host(n);
  }
  void free_host(void* p) override { inner->free_host(p); }
  std::shared_ptr<HostMover> inner;
  size_t allocs = 0;
};

TEST(CommStaged, EveryGroupMatchesHostMpi) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Grid grid = grid_create(MPI_COMM_WORLD, world % 2 == 0 && world > 2 ? 2 : 0);
  {
    Groups groups = groups_create(grid);
    auto be = make_cpu_backend();
    auto mover = std::make_shared<CountingMover>(backend_mover(*be));
    groups.device[0] = staged_comm_set(groups, mover);
    // One staged set serves every purpose.
    for (CommPurpose p : {CommPurpose::grad_reduce, CommPurpose::param_gather, CommPurpose::all_to_all})
      EXPECT_EQ(&groups.for_backend(p), groups.device[0].get());
    check_set_matches_host(groups, *be, "mpi-staged", false, 1);
    const size_t warm = mover->allocs;
    check_set_matches_host(groups, *be, "mpi-staged", false, 2);
    EXPECT_EQ(mover->allocs, warm) << "staging allocated host memory in a steady state";
    check_set_send_recv(groups.for_backend(), *be, "staged");
    EXPECT_EQ(&groups.for_backend().block(1), groups.device[0]->blocks[0].get());
    groups.reset_device();
    EXPECT_EQ(&groups.for_backend(), static_cast<const CommSet*>(&groups));
  }
  grid_destroy(grid);
}

TEST(CommStaged, BackendCommsScope) {
  Grid grid = grid_create(MPI_COMM_WORLD, 0);
  {
    Groups groups = groups_create(grid);
    auto be = make_cpu_backend();
    {
      BackendComms host(groups, grid, *be, CommChoice::host);
      EXPECT_FALSE(groups.has_device());
    }
    {
      BackendComms staged(groups, grid, *be, CommChoice::staged);
      ASSERT_TRUE(groups.has_device());
      check_comm_matches_host(*groups.for_backend().world, *groups.world, *be, 3, false);
    }
    EXPECT_FALSE(groups.has_device()) << "removed when the scope ends";
    const bool own = ranks_have_own_gpus(grid, *groups.world);  // collective
    if (grid.gpus_visible == 0) {
      EXPECT_FALSE(own) << "ranks without a GPU";
    }
  }
  grid_destroy(grid);
}

}  // namespace
}  // namespace flexsp::testing

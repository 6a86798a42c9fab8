// Started collectives progress while the caller computes (lib/comm/progress.h): a started
// all-gather and reduce-scatter complete -- done() turns true -- while the main thread
// runs arithmetic and makes no MPI call at all, and their results are right; the engine
// goes idle (no polling) once nothing is outstanding; waiting races with the engine
// without losing or double-completing a request; a started send_recv (ring shift) completes
// while computing too. Registered for 2 and 4 ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "support/grid_fixture.h"

namespace flexsp {
namespace {

using CommProgress = testing::GridFixture;

// Work with no MPI call in it: a few milliseconds of arithmetic.
double compute_a_while(double x) {
  for (int i = 0; i < 200000; ++i) x = std::sin(x) + 1.0;
  return x;
}

TEST_F(CommProgress, StartedGatherAndReduceScatterCompleteWhileComputing) {
  ASSERT_NE(groups.progress, nullptr);
  Comm& c = *groups.world;
  const int n = c.size(), r = c.rank();
  // 1 MiB per block: far over the shared-memory transport's eager limit, so each
  // collective needs several rounds of messages that only progress calls advance.
  const size_t block = size_t(1) << 18;
  std::vector<float> part(block), gathered(block * n, -1.f);
  for (size_t i = 0; i < block; ++i) part[i] = float(r * 1000 + int(i % 1000));
  std::vector<float> send(block * n), mine(block, -1.f);
  for (size_t i = 0; i < send.size(); ++i) send[i] = float(int(i % 97) + r);

  c.barrier();  // every rank starts together, so no one is still in an MPI call
  auto ag = c.start_all_gather(part.data(), gathered.data(), block, DType::f32);
  auto rs = c.start_reduce_scatter(send.data(), mine.data(), block, DType::f32, ReduceOp::sum);
  const auto t0 = std::chrono::steady_clock::now();
  double sink = 0.5;
  int rounds = 0;
  while (!(ag->done() && rs->done()) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30)) {
    sink = compute_a_while(sink);  // no MPI call: only the engine can complete them
    ++rounds;
  }
  const bool completed_while_computing = ag->done() && rs->done();
  EXPECT_TRUE(completed_while_computing)
      << "rank " << r << ": not complete after " << rounds << " rounds of compute (" << sink << ")";
  ag->wait();
  rs->wait();
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < block; i += 4099)
      ASSERT_EQ(gathered[p * block + i], float(p * 1000 + int(i % 1000))) << p << " " << i;
  for (size_t j = 0; j < block; j += 4099)
    ASSERT_EQ(mine[j], float(n * int((r * block + j) % 97) + n * (n - 1) / 2)) << j;
  c.barrier();
}

// A started ring shift (ring attention's k/v exchange) completes while the caller
// computes, in both directions at once.
TEST_F(CommProgress, StartedSendRecvCompletesWhileComputing) {
  Comm& c = *groups.world;
  const int n = c.size(), r = c.rank();
  const size_t count = size_t(1) << 18;  // 1 MiB: a rendezvous transfer
  std::vector<float> a(count), b(count), ra(count, -1.f), rb(count, -1.f);
  for (size_t i = 0; i < count; ++i) a[i] = float(r * 1000 + int(i % 1000)), b[i] = -a[i];
  c.barrier();
  auto right = c.start_send_recv(a.data(), count, (r + 1) % n, ra.data(), count, (r + n - 1) % n,
                                 DType::f32);
  auto left = c.start_send_recv(b.data(), count, (r + n - 1) % n, rb.data(), count, (r + 1) % n,
                                DType::f32);
  const auto t0 = std::chrono::steady_clock::now();
  double sink = 0.5;
  while (!(right->done() && left->done()) &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30))
    sink = compute_a_while(sink);
  EXPECT_TRUE(right->done() && left->done()) << "rank " << r << " (" << sink << ")";
  right->wait();
  left->wait();
  const int from_left = (r + n - 1) % n, from_right = (r + 1) % n;
  for (size_t i = 0; i < count; i += 4099) {
    ASSERT_EQ(ra[i], float(from_left * 1000 + int(i % 1000))) << i;
    ASSERT_EQ(rb[i], -float(from_right * 1000 + int(i % 1000))) << i;
  }
  c.barrier();
}

TEST_F(CommProgress, EngineIdlesWhenNothingIsOutstanding) {
  Comm& c = *groups.world;
  std::vector<double> x(1000, 1.0);
  c.start_all_reduce(x.data(), x.data(), x.size(), DType::f64, ReduceOp::sum)->wait();
  EXPECT_EQ(x[0], double(c.size()));
  EXPECT_EQ(groups.progress->outstanding(), 0u);
  const size_t polls = groups.progress->polls();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(groups.progress->polls(), polls) << "the engine polled with nothing outstanding";
}

TEST_F(CommProgress, WaitRacesTheEngine) {
  // Started and at once waited, on every group: the waiter and the engine contend for
  // each request; every result must still be right and nothing left behind.
  std::vector<Comm*> comms{groups.world.get(), groups.node.get()};
  for (const auto& b : groups.blocks)
    if (b) comms.push_back(b.get());
  for (int it = 0; it < 100; ++it)
    for (Comm* c : comms) {
      std::vector<int64_t> v(1 + it % 7 * 300, c->rank() + it);
      auto req = c->start_all_reduce(v.data(), v.data(), v.size(), DType::i64, ReduceOp::max);
      if (it % 3 == 0) std::this_thread::yield();
      req->wait();
      EXPECT_TRUE(req->done());
      ASSERT_EQ(v.back(), c->size() - 1 + it);
    }
  EXPECT_EQ(groups.progress->outstanding(), 0u);
}

}  // namespace
}  // namespace flexsp

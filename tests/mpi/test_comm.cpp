// MPI communicator: every collective against values computed locally, on the world
// and on every aligned power-of-two block (1, 2, 4, 8 ranks); point-to-point send_recv
// (ring shifts, pipeline chains, zero counts: tests/support/send_recv_check.h).
#include <gtest/gtest.h>

#include <numeric>

#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/util/error.h"
#include "support/grid_fixture.h"
#include "support/send_recv_check.h"

namespace flexsp {
namespace {

using testing::GridFixture;

// All communicators a rank can use: world and its complete blocks.
std::vector<Comm*> comms(const Groups& g) {
  std::vector<Comm*> out{g.world.get(), g.node.get(), g.cross_node.get()};
  for (const auto& b : g.blocks)
    if (b) out.push_back(b.get());
  return out;
}

using CommTest = GridFixture;

TEST_F(CommTest, AllReduceSumMaxMinInPlaceAndNot) {
  for (Comm* c : comms(groups)) {
    const int n = c->size(), r = c->rank();
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(r + 1) * float(i % 7);
    std::vector<float> y(x.size());
    c->all_reduce(x.data(), y.data(), x.size(), DType::f32, ReduceOp::sum);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], float(n * (n + 1) / 2) * float(i % 7));
    c->all_reduce(x.data(), x.data(), x.size(), DType::f32, ReduceOp::sum);
    EXPECT_EQ(x, y);
    int64_t v = r, mx = 0, mn = 0;
    c->all_reduce(&v, &mx, 1, DType::i64, ReduceOp::max);
    c->all_reduce(&v, &mn, 1, DType::i64, ReduceOp::min);
    EXPECT_EQ(mx, n - 1);
    EXPECT_EQ(mn, 0);
  }
}

TEST_F(CommTest, ReduceScatterAndAllGather) {
  for (Comm* c : comms(groups)) {
    const int n = c->size(), r = c->rank();
    const size_t block = 5;
    std::vector<double> send(block * n);
    for (size_t i = 0; i < send.size(); ++i) send[i] = double(i) + r;
    std::vector<double> mine(block);
    c->reduce_scatter(send.data(), mine.data(), block, DType::f64, ReduceOp::sum);
    for (size_t j = 0; j < block; ++j)
      EXPECT_EQ(mine[j], n * double(r * block + j) + n * (n - 1) / 2.0);
    std::vector<double> all(block * n);
    c->all_gather(mine.data(), all.data(), block, DType::f64);
    for (int p = 0; p < n; ++p)
      for (size_t j = 0; j < block; ++j)
        EXPECT_EQ(all[p * block + j], n * double(p * block + j) + n * (n - 1) / 2.0);
  }
}

// Started collectives (ZeRO's overlap) with blocking ones issued while they run, as the
// next unit's gather is: the same results as the blocking calls.
TEST_F(CommTest, StartedReduceScatterBesideBlockingCollectives) {
  for (Comm* c : comms(groups)) {
    const int n = c->size(), r = c->rank();
    const size_t block = 1000;
    std::vector<float> send(block * n), mine(block), other(block * n);
    for (size_t i = 0; i < send.size(); ++i) send[i] = float(i % 97) + r;
    std::unique_ptr<CommRequest> req =
        c->start_reduce_scatter(send.data(), mine.data(), block, DType::f32, ReduceOp::sum);
    std::vector<float> gathered(block * n), part(block, float(r));
    c->all_gather(part.data(), gathered.data(), block, DType::f32);
    req->wait();
    req->wait();  // a second wait is a no-op
    for (size_t j = 0; j < block; ++j)
      EXPECT_EQ(mine[j], n * float((r * block + j) % 97) + n * (n - 1) / 2.0f);
    for (int p = 0; p < n; ++p) EXPECT_EQ(gathered[p * block], float(p));
    // Destroyed without wait(): it waits.
    c->start_reduce_scatter(send.data(), other.data(), block, DType::f32, ReduceOp::sum);
    // A started all-reduce in place, two at once (ZeRO 0-1 start one per unit).
    std::vector<float> x(block, float(r + 1)), y(block, 2.0f);
    auto rx = c->start_all_reduce(x.data(), x.data(), block, DType::f32, ReduceOp::sum);
    auto ry = c->start_all_reduce(y.data(), y.data(), block, DType::f32, ReduceOp::max);
    ry->wait();
    rx->wait();
    EXPECT_EQ(x[block - 1], n * (n + 1) / 2.0f);
    EXPECT_EQ(y[0], 2.0f);
  }
}

TEST_F(CommTest, AllToAllWithPerPeerCounts) {
  for (Comm* c : comms(groups)) {
    const int n = c->size(), r = c->rank();
    // Rank r sends (r + p + 1) elements of value 100*r + p to peer p.
    std::vector<size_t> sc(n), so(n), rc(n), ro(n);
    size_t stot = 0, rtot = 0;
    for (int p = 0; p < n; ++p) {
      sc[p] = r + p + 1, so[p] = stot, stot += sc[p];
      rc[p] = p + r + 1, ro[p] = rtot, rtot += rc[p];
    }
    std::vector<int32_t> send(stot), recv(rtot, -1);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < sc[p]; ++i) send[so[p] + i] = 100 * r + p;
    c->all_to_all_v(send.data(), sc.data(), so.data(), recv.data(), rc.data(), ro.data(), DType::i32);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < rc[p]; ++i) EXPECT_EQ(recv[ro[p] + i], 100 * p + r);
  }
}

TEST_F(CommTest, AllToAllWithEmptyPeers) {
  // A rank with nothing to send still takes part (plans leave ranks idle).
  Comm& c = *groups.world;
  const int n = c.size(), r = c.rank();
  std::vector<size_t> sc(n, 0), so(n, 0), rc(n, 0), ro(n, 0);
  std::vector<float> send, recv(1, 0.f);
  if (r == 0 && n > 1) {  // rank 0 sends one value to rank n-1 only
    sc[n - 1] = 1;
    send = {42.f};
  }
  if (r == n - 1 && n > 1) rc[0] = 1;
  c.all_to_all_v(send.data(), sc.data(), so.data(), recv.data(), rc.data(), ro.data(), DType::f32);
  if (r == n - 1 && n > 1) {
    EXPECT_EQ(recv[0], 42.f);
  }
}

TEST_F(CommTest, BroadcastAndBf16Bits) {
  for (Comm* c : comms(groups)) {
    std::vector<uint16_t> bits(33, 0);
    if (c->rank() == c->size() - 1) std::iota(bits.begin(), bits.end(), uint16_t{7});
    c->broadcast(bits.data(), bits.size(), DType::bf16, c->size() - 1);
    for (size_t i = 0; i < bits.size(); ++i) EXPECT_EQ(bits[i], 7 + i);
    c->barrier();
  }
}

TEST_F(CommTest, SendRecvRingsAndChains) {
  auto be = make_cpu_backend();  // host memory: what a plain MPI Comm moves
  for (Comm* c : comms(groups)) testing::check_send_recv(*c, *be, "host");
}

TEST_F(CommTest, PipelineStageLinks) {
  auto be = make_cpu_backend();
  testing::check_stage_links(*groups.world, *be, "host", size_t(1) << 16);
}

TEST_F(CommTest, Bf16ReductionIsRefused) {
  uint16_t x = 1;
  EXPECT_THROW(groups.world->all_reduce(&x, &x, 1, DType::bf16, ReduceOp::sum), Error);
}

}  // namespace
}  // namespace flexsp

// Checks a Comm over backend memory against the host Comm of the same group: every
// operation (all-reduce in place and not, sum/max/min, reduce-scatter, all-reduce,
// reduce-scatter and all-gather started (several at once), all-gather,
// all-to-all-v with uneven and zero counts and gaps between blocks, broadcast from every
// root, barrier) on the same inputs, through the backend's copies, must give the host's
// results bit for bit, and leave the gaps of a receive buffer untouched. Shared by the
// staging tests (CPU and CUDA backends) and the NCCL tests; NCCL sums in another order, so
// those pass integer_values = true (small integers add exactly in any order).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/comm/comm.h"
#include "lib/comm/groups.h"
#include "support/backend_buffers.h"
#include "unit/test_kernels_common.h"

namespace flexsp::testing {

template <class T>
std::vector<T> comm_values(Rng& r, size_t n, bool integer_values) {
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(integer_values ? r.below(201) - 100 : r.uniform(-1, 1) * 1e3);
  return v;
}

template <class T>
void expect_bitwise(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": first difference at " << first << " of " << got.size();
}

template <class T>
void check_all_reduce(Comm& dev, Comm& host, Backend& be, Rng& r, size_t n, DType t, ReduceOp op,
                      bool in_place, bool ints, const std::string& what) {
  const std::vector<T> x = comm_values<T>(r, n, ints);
  std::vector<T> want(n);
  host.all_reduce(x.data(), want.data(), n, t, op);
  Buffer<T> d = upload(be, x);
  if (in_place) {
    dev.all_reduce(d.get(), d.get(), n, t, op);
    expect_bitwise(download(be, d, n), want, what + " all_reduce in place");
  } else {
    Buffer<T> out(be, n + 1);
    dev.all_reduce(d.get(), out.get(), n, t, op);
    expect_bitwise(download(be, out, n), want, what + " all_reduce");
    expect_bitwise(download(be, d, n), x, what + " all_reduce leaves its input");
  }
}

// One pass of every operation; `seed` differs per rank so ranks contribute differently.
inline void check_comm_matches_host(Comm& dev, Comm& host, Backend& be, uint64_t seed,
                                    bool integer_values) {
  ASSERT_EQ(dev.rank(), host.rank());
  ASSERT_EQ(dev.size(), host.size());
  const int n = host.size(), me = host.rank();
  const std::string what = std::string(dev.kind()) + " rank " + std::to_string(me) + "/" +
                           std::to_string(n);
  Rng r(seed * 1000003 + static_cast<uint64_t>(me));
  const bool ints = integer_values;
  for (size_t count : {size_t(0), size_t(1), size_t(1000), size_t(70001)}) {
    check_all_reduce<float>(dev, host, be, r, count, DType::f32, ReduceOp::sum, false, ints, what);
    check_all_reduce<float>(dev, host, be, r, count, DType::f32, ReduceOp::sum, true, ints, what);
  }
  check_all_reduce<double>(dev, host, be, r, 333, DType::f64, ReduceOp::max, true, ints, what);
  check_all_reduce<double>(dev, host, be, r, 333, DType::f64, ReduceOp::min, false, ints, what);
  check_all_reduce<int64_t>(dev, host, be, r, 17, DType::i64, ReduceOp::sum, true, true, what);
  check_all_reduce<int32_t>(dev, host, be, r, 17, DType::i32, ReduceOp::max, false, true, what);

  for (size_t block : {size_t(0), size_t(3), size_t(4099)}) {
    const std::vector<float> x = comm_values<float>(r, block * n, ints);
    std::vector<float> want(block), want_all(block * n);
    host.reduce_scatter(x.data(), want.data(), block, DType::f32, ReduceOp::sum);
    host.all_gather(want.data(), want_all.data(), block, DType::f32);
    Buffer<float> d = upload(be, x), mine(be, block + 1), all(be, block * n + 1);
    dev.reduce_scatter(d.get(), mine.get(), block, DType::f32, ReduceOp::sum);
    expect_bitwise(download(be, mine, block), want, what + " reduce_scatter");
    dev.all_gather(mine.get(), all.get(), block, DType::f32);
    expect_bitwise(download(be, all, block * n), want_all, what + " all_gather");
    // Started, with a blocking gather queued while it runs (ZeRO-3's order). Against the
    // host's started form: MPI's nonblocking reductions may sum in another order than the
    // blocking ones.
    std::vector<float> want_s(block);
    host.start_reduce_scatter(x.data(), want_s.data(), block, DType::f32, ReduceOp::sum)->wait();
    Buffer<float> mine2(be, block + 1), all2(be, block * n + 1);
    std::unique_ptr<CommRequest> req =
        dev.start_reduce_scatter(d.get(), mine2.get(), block, DType::f32, ReduceOp::sum);
    dev.all_gather(mine.get(), all2.get(), block, DType::f32);
    req->wait();
    expect_bitwise(download(be, mine2, block), want_s, what + " start_reduce_scatter");
    expect_bitwise(download(be, all2, block * n), want_all, what + " all_gather beside it");
    Buffer<float> d2 = upload(be, x), d3(be, block * n + 1);
    std::vector<float> want_ar(block * n), want_ar_in(x);
    host.start_all_reduce(x.data(), want_ar.data(), block * n, DType::f32, ReduceOp::sum)->wait();
    host.start_all_reduce(want_ar_in.data(), want_ar_in.data(), block * n, DType::f32,
                          ReduceOp::sum)->wait();
    dev.start_all_reduce(d2.get(), d2.get(), block * n, DType::f32, ReduceOp::sum)->wait();
    expect_bitwise(download(be, d2, block * n), want_ar_in, what + " start_all_reduce in place");
    dev.start_all_reduce(d.get(), d3.get(), block * n, DType::f32, ReduceOp::sum)->wait();
    expect_bitwise(download(be, d3, block * n), want_ar, what + " start_all_reduce");
    // Started gathers (ZeRO-3's prefetch): two at once beside a started reduce-scatter,
    // completed out of order.
    Buffer<float> all3(be, block * n + 1), all4(be, block * n + 1), mine3(be, block + 1);
    auto g1 = dev.start_all_gather(mine.get(), all3.get(), block, DType::f32);
    auto rs = dev.start_reduce_scatter(d.get(), mine3.get(), block, DType::f32, ReduceOp::sum);
    auto g2 = dev.start_all_gather(mine.get(), all4.get(), block, DType::f32);
    g2->wait();
    rs->wait();
    g1->wait();
    EXPECT_TRUE(g1->done() && g2->done() && rs->done()) << what;
    expect_bitwise(download(be, all3, block * n), want_all, what + " start_all_gather");
    expect_bitwise(download(be, all4, block * n), want_all, what + " second start_all_gather");
    expect_bitwise(download(be, mine3, block), want_s, what + " start_reduce_scatter beside them");
  }

  // all_to_all_v: peer p gets (me + 2p) % 4 * k elements (zeros included), blocks laid
  // out with a gap of 5 elements between them and in reverse peer order on receive.
  for (size_t k : {size_t(1), size_t(257)}) {
    std::vector<size_t> sc(n), so(n), rc(n), ro(n);
    size_t stot = 0, rtot = 0;
    for (int p = 0; p < n; ++p) {
      sc[p] = static_cast<size_t>((me + 2 * p) % 4) * k;
      so[p] = stot;
      stot += sc[p] + 5;
    }
    for (int p = n - 1; p >= 0; --p) {
      rc[p] = static_cast<size_t>((p + 2 * me) % 4) * k;
      ro[p] = rtot;
      rtot += rc[p] + 5;
    }
    const std::vector<float> x = comm_values<float>(r, stot, ints);
    const std::vector<float> sentinel(rtot, -7.5f);
    std::vector<float> want = sentinel;
    host.all_to_all_v(x.data(), sc.data(), so.data(), want.data(), rc.data(), ro.data(), DType::f32);
    Buffer<float> ds = upload(be, x), dr = upload(be, sentinel);
    dev.all_to_all_v(ds.get(), sc.data(), so.data(), dr.get(), rc.data(), ro.data(), DType::f32);
    expect_bitwise(download(be, dr, rtot), want, what + " all_to_all_v (gaps untouched)");
  }

  for (int root = 0; root < n; ++root) {
    std::vector<uint8_t> b(100 + root);
    for (auto& v : b) v = static_cast<uint8_t>(r.below(256));
    std::vector<uint8_t> want = b;
    host.broadcast(want.data(), want.size(), DType::u8, root);
    Buffer<uint8_t> d = upload(be, b);
    dev.broadcast(d.get(), b.size(), DType::u8, root);
    expect_bitwise(download(be, d, b.size()), want, what + " broadcast");
  }
  dev.barrier();
}

// (backend Comm, host Comm) for every group both sets have: world, node, cross-node and
// every complete block; the two sets must have the same complete blocks.
inline std::vector<std::pair<Comm*, Comm*>> comm_pairs(const CommSet& dev, const CommSet& host) {
  std::vector<std::pair<Comm*, Comm*>> out{{dev.world.get(), host.world.get()},
                                           {dev.node.get(), host.node.get()},
                                           {dev.cross_node.get(), host.cross_node.get()}};
  EXPECT_EQ(dev.blocks.size(), host.blocks.size());
  for (size_t k = 0; k < host.blocks.size() && k < dev.blocks.size(); ++k) {
    EXPECT_EQ(dev.blocks[k] == nullptr, host.blocks[k] == nullptr) << "block " << k;
    if (host.blocks[k] && dev.blocks[k]) out.emplace_back(dev.blocks[k].get(), host.blocks[k].get());
  }
  return out;
}

// Every group of every purpose's backend set (whose Comms must be of `kind`) against its
// host twin, `passes` times with other data.
inline void check_set_matches_host(const Groups& g, Backend& be, const std::string& kind,
                                   bool integer_values, uint64_t first_pass = 1, int passes = 1) {
  ASSERT_TRUE(g.has_device());
  for (size_t p = 0; p < kCommPurposes; ++p) {
    const CommSet& set = g.for_backend(static_cast<CommPurpose>(p));
    EXPECT_EQ(set.world->kind(), kind);
    if (p > 0 && &set == &g.for_backend()) continue;  // one set serves several purposes
    for (uint64_t pass = first_pass; pass < first_pass + passes; ++pass)
      for (auto [dev, host] : comm_pairs(set, g))
        check_comm_matches_host(*dev, *host, be, pass, integer_values);
  }
}

}  // namespace flexsp::testing

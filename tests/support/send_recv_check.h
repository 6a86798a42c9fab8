// Checks a Comm's point-to-point exchange (start_send_recv / send_recv) on buffers of a
// backend (the CPU backend for host Comms, a GPU's for staged and NCCL ones) against the
// values each rank knows its peers sent: ring shifts in both directions (counts that
// differ per sender, one over the eager limit), both directions in flight at once and
// completed in reverse order (ring attention's k and v), pipeline chains whose ends pass
// -1 (forward and backward), zero counts (receive buffer untouched), bf16 bits and int32;
// the pipeline's stage link (lib/runtime/stage_link.h) over whole 1F1B and Seq1F1B
// schedules, every rank a stage. Shared by tests/mpi/test_comm*.cpp and the GPU MPI fixtures (tests/gpu/mpi_comm_*.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/comm/comm.h"
#include "lib/comm/groups.h"
#include "lib/plan/pipeline_schedule.h"
#include "lib/runtime/stage_link.h"
#include "lib/util/error.h"
#include "support/backend_buffers.h"

namespace flexsp::testing {

// What rank `from` sends in exchange `tag`: n values of T derived from both.
template <class T>
std::vector<T> p2p_values(int from, int tag, size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(from * 100000 + int(i % 50000) + 7 * tag);
  return v;
}

// Count rank r sends in exchange `tag` (receivers compute the sender's count).
inline size_t p2p_count(int r, int tag, size_t base) {
  return base == 0 ? 0 : base + static_cast<size_t>((r * 3 + tag) % 5);
}

// One exchange: every rank sends to dest(me) and receives from src(me) (-1: none), T in
// DType t; the received values and the untouched tail of the receive buffer are checked.
template <class T, class Dest, class Src>
void check_exchange(Comm& c, Backend& be, DType t, int tag, size_t base, Dest dest, Src src,
                    const std::string& what) {
  const int me = c.rank(), to = dest(me), from = src(me);
  const size_t sn = to >= 0 ? p2p_count(me, tag, base) : 0;
  const size_t rn = from >= 0 ? p2p_count(from, tag, base) : 0;
  const T sentinel = static_cast<T>(-3);
  Buffer<T> s = upload(be, p2p_values<T>(me, tag, sn + 1));
  Buffer<T> r = upload(be, std::vector<T>(rn + 1, sentinel));
  c.send_recv(s.get(), sn, to, r.get(), rn, from, t);
  std::vector<T> want = from >= 0 ? p2p_values<T>(from, tag, rn) : std::vector<T>{};
  want.push_back(sentinel);
  EXPECT_EQ(download(be, r), want) << what << " exchange " << tag << ": rank " << me
                                   << " from " << from << " to " << to;
}

inline void check_send_recv(Comm& c, Backend& be, const std::string& what_in) {
  const int n = c.size(), me = c.rank();
  const std::string what = what_in + " " + c.kind() + " rank " + std::to_string(me) + "/" +
                            std::to_string(n);
  auto right = [n](int r) { return (r + 1) % n; };
  auto left = [n](int r) { return (r + n - 1) % n; };
  auto next = [n](int r) { return r + 1 < n ? r + 1 : -1; };
  auto prev = [](int r) { return r > 0 ? r - 1 : -1; };
  int tag = 0;
  for (size_t base : {size_t(1), size_t(70001)}) {  // 280 KB: over the eager limit
    check_exchange<float>(c, be, DType::f32, ++tag, base, right, left, what + " ring right");
    check_exchange<float>(c, be, DType::f32, ++tag, base, left, right, what + " ring left");
    check_exchange<float>(c, be, DType::f32, ++tag, base, next, prev, what + " chain forward");
    check_exchange<float>(c, be, DType::f32, ++tag, base, prev, next, what + " chain backward");
  }
  check_exchange<float>(c, be, DType::f32, ++tag, 0, right, left, what + " zero counts");
  check_exchange<uint16_t>(c, be, DType::bf16, ++tag, 333, right, left, what + " bf16 bits");
  check_exchange<int32_t>(c, be, DType::i32, ++tag, 17, next, prev, what + " int32 chain");
  // No peer at all: nothing happens, the request is done.
  auto none = c.start_send_recv(nullptr, 0, -1, nullptr, 0, -1, DType::f32);
  none->wait();
  EXPECT_TRUE(none->done()) << what;

  // Both directions in flight at once, waited in reverse order.
  const size_t k = 4099;
  Buffer<float> sa = upload(be, p2p_values<float>(me, 100, k));
  Buffer<float> sb = upload(be, p2p_values<float>(me, 101, k));
  Buffer<float> ra(be, k), rb(be, k);
  auto a = c.start_send_recv(sa.get(), k, right(me), ra.get(), k, left(me), DType::f32);
  auto b = c.start_send_recv(sb.get(), k, left(me), rb.get(), k, right(me), DType::f32);
  b->wait();
  a->wait();
  EXPECT_TRUE(a->done() && b->done()) << what;
  EXPECT_EQ(download(be, ra), p2p_values<float>(left(me), 100, k)) << what << " started right";
  EXPECT_EQ(download(be, rb), p2p_values<float>(right(me), 101, k)) << what << " started left";
  EXPECT_THROW(c.send_recv(sa.get(), 1, n, ra.get(), 1, -1, DType::f32), Error)
      << what << ": a peer outside the communicator";
}

// Every rank of c a pipeline stage: the calls PipelineExecutor::run makes on its link over
// the schedule of `mbs` micro-batches of `chunks` chunks, with unit-tagged payloads of
// about `base` floats (over NCCL's buffers for large base: sends wait for their receive).
// Each received activation and gradient is the one its unit's sender sent.
inline void check_stage_link(Comm& c, Backend& be, int mbs, int chunks, size_t base,
                             const std::string& what) {
  const int n = c.size(), me = c.rank();
  StageLink link(&c, me > 0 ? me - 1 : -1, me < n - 1 ? me + 1 : -1, DType::f32);
  const int units = mbs * chunks;
  // Unit u's activation out of stage s carries tag 2u, its gradient into stage s tag 2u+1.
  auto count = [&](int u) { return base + static_cast<size_t>(u % 3); };
  std::vector<Buffer<float>> out, in, gout, gin;  // per unit: what the stage holds
  for (int u = 0; u < units; ++u) {
    out.push_back(upload(be, p2p_values<float>(me, 2 * u, count(u))));
    gout.push_back(upload(be, p2p_values<float>(me, 2 * u + 1, count(u))));
    in.emplace_back(be, count(u));
    gin.emplace_back(be, count(u));
  }
  std::vector<CommRequests> sends(static_cast<size_t>(units));
  for (const PipeStep& st : pipeline_schedule(n, me, mbs, chunks)) {
    const size_t u = static_cast<size_t>(st.unit), k = count(st.unit);
    if (st.forward) {
      link.forward_in(in[u].get(), k);
      link.forward_out(out[u].get(), k, &sends[u]);
    } else {
      link.backward_in(gin[u].get(), k);
      link.flush();
      link.backward_out(gout[u].get(), k, &sends[u]);
    }
  }
  link.flush();
  for (auto& s : sends)
    for (auto& r : s) r->wait();
  for (int u = 0; u < units; ++u) {
    const size_t k = count(u);
    if (me > 0) {
      EXPECT_EQ(download(be, in[u]), p2p_values<float>(me - 1, 2 * u, k))
          << what << ": stage " << me << " unit " << u << " activation";
    }
    if (me < n - 1) {
      EXPECT_EQ(download(be, gin[u]), p2p_values<float>(me + 1, 2 * u + 1, k))
          << what << ": stage " << me << " unit " << u << " gradient";
    }
  }
}

// Small payloads and `large` floats (on NCCL: past its p2p buffers, 4 MB by default).
inline void check_stage_links(Comm& c, Backend& be, const std::string& what, size_t large) {
  for (int chunks : {1, 2, 3})
    for (int mbs : {1, 2, 5})
      for (size_t base : {size_t(3), large})
        check_stage_link(c, be, mbs, chunks, base,
                         what + " " + c.kind() + " " + std::to_string(mbs) + " mb x " +
                             std::to_string(chunks) + " chunks, " + std::to_string(base));
}

// Every group of a set (world, node, cross-node, each complete block).
inline void check_set_send_recv(const CommSet& set, Backend& be, const std::string& what) {
  std::vector<Comm*> comms{set.world.get(), set.node.get(), set.cross_node.get()};
  for (const auto& b : set.blocks)
    if (b) comms.push_back(b.get());
  for (Comm* c : comms) check_send_recv(*c, be, what);
}

}  // namespace flexsp::testing

// The pipeline's stage link (lib/runtime/stage_link.h) under NCCL's rule, replayed on the
// host: every stage's p2p calls over a whole schedule are recorded as groups, then run
// with rendezvous semantics (a group runs after the one before it on its stage; each of
// its operations completes once the partner's matching operation is posted, i.e. in the
// group the partner runs now; the group completes when all of them have). No deadlock,
// and every message is received by the operation meant for it, for many schedules; the
// same calls without the pairing do deadlock (why the link pairs).
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "lib/plan/pipeline_schedule.h"
#include "lib/runtime/stage_link.h"

namespace flexsp {
namespace {

struct Op {
  bool send;
  int peer;
  size_t tag;  // the unit and direction it carries (the count, in the recording)
};
using Group = std::vector<Op>;

// A Comm that records start_send_recv calls as groups; completes them at once.
class RecordingComm final : public Comm {
 public:
  RecordingComm(int rank, int size, std::vector<Group>* out) : rank_(rank), size_(size), out_(out) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* kind() const override { return "recording"; }
  void all_reduce(const void*, void*, size_t, DType, ReduceOp) override {}
  void reduce_scatter(const void*, void*, size_t, DType, ReduceOp) override {}
  void all_gather(const void*, void*, size_t, DType) override {}
  void all_to_all_v(const void*, const size_t*, const size_t*, void*, const size_t*,
                    const size_t*, DType) override {}
  void broadcast(void*, size_t, DType, int) override {}
  void barrier() override {}
  std::unique_ptr<CommRequest> start_send_recv(const void*, size_t send_count, int dest, void*,
                                               size_t recv_count, int src, DType) override {
    Group g;
    if (dest >= 0) g.push_back({true, dest, send_count});
    if (src >= 0) g.push_back({false, src, recv_count});
    out_->push_back(g);
    return done_request();
  }

 private:
  int rank_, size_;
  std::vector<Group>* out_;
};

// Stage `me`'s groups over the schedule, making the calls PipelineExecutor::run makes.
// Counts carry unit * 2 + (0: activation, 1: gradient) + 1 so a mismatch shows.
std::vector<Group> record(int stages, int me, int mbs, int chunks, bool paired) {
  std::vector<Group> groups;
  RecordingComm comm(me, stages, &groups);
  StageLink link(&comm, me > 0 ? me - 1 : -1, me < stages - 1 ? me + 1 : -1, DType::f32);
  CommRequests sends;
  char buf[1];
  for (const PipeStep& st : pipeline_schedule(stages, me, mbs, chunks)) {
    const size_t act = static_cast<size_t>(st.unit) * 2 + 1, grad = act + 1;
    if (st.forward) {
      link.forward_in(buf, act);
      link.forward_out(buf, act, &sends);
      if (!paired) link.flush();
    } else {
      link.backward_in(buf, grad);
      link.flush();
      link.backward_out(buf, grad, &sends);
    }
  }
  link.flush();
  return groups;
}

// Runs the stages' groups under the rendezvous rule; false on a deadlock or a message
// received by an operation not meant for it.
bool rendezvous(const std::vector<std::vector<Group>>& s, std::string* why) {
  const int n = static_cast<int>(s.size());
  // The k-th message from a to b, as (a, b, k), is posted by a's send and b's receive.
  std::vector<std::vector<std::vector<int>>> seq(n);  // per stage, group, op: its k
  std::map<std::tuple<int, int, bool>, int> counter;
  for (int r = 0; r < n; ++r)
    for (const Group& g : s[r]) {
      seq[r].emplace_back();
      for (const Op& o : g) seq[r].back().push_back(counter[{r, o.peer, o.send}]++);
    }
  std::vector<size_t> at(n, 0);
  std::vector<std::vector<bool>> done(n);
  auto current = [&](int r) -> std::vector<bool>& {
    if (done[r].empty() && at[r] < s[r].size()) done[r].assign(s[r][at[r]].size(), false);
    return done[r];
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < n; ++r) {
      if (at[r] == s[r].size()) continue;
      const Group& g = s[r][at[r]];
      for (size_t i = 0; i < g.size(); ++i) {
        if (current(r)[i]) continue;
        const int p = g[i].peer;  // its match: p's op on r, the other direction, same k
        if (at[p] == s[p].size()) continue;
        const Group& h = s[p][at[p]];
        for (size_t j = 0; j < h.size(); ++j) {
          if (h[j].peer != r || h[j].send == g[i].send || seq[p][at[p]][j] != seq[r][at[r]][i]) continue;
          if (h[j].tag != g[i].tag) {
            *why = "stage " + std::to_string(r) + ": a message for another unit";
            return false;
          }
          current(r)[i] = current(p)[j] = true;
          moved = true;
        }
      }
    }
    for (int r = 0; r < n; ++r) {
      if (at[r] == s[r].size()) continue;
      bool all = true;
      for (bool d : current(r)) all = all && d;
      if (all) ++at[r], done[r].clear(), moved = true;
    }
  }
  for (int r = 0; r < n; ++r)
    if (at[r] != s[r].size()) {
      *why = "deadlock: stage " + std::to_string(r) + " waits at group " + std::to_string(at[r]);
      return false;
    }
  return true;
}

TEST(StageLink, NoDeadlockUnderRendezvous) {
  for (int stages : {2, 3, 4, 5, 8})
    for (int mbs : {1, 2, 3, 4, 7, 12})
      for (int chunks : {1, 2, 3, 4}) {
        std::vector<std::vector<Group>> s;
        for (int me = 0; me < stages; ++me) s.push_back(record(stages, me, mbs, chunks, true));
        std::string why;
        EXPECT_TRUE(rendezvous(s, &why)) << stages << " stages, " << mbs << " micro-batches, "
                                         << chunks << " chunks: " << why;
      }
}

TEST(StageLink, UnpairedSendsDeadlock) {
  // 1F1B's steady state: stage 0 sends an activation then waits for a gradient; stage 1
  // sends that gradient then waits for the activation.
  std::vector<std::vector<Group>> s;
  for (int me = 0; me < 2; ++me) s.push_back(record(2, me, 4, 1, false));
  std::string why;
  EXPECT_FALSE(rendezvous(s, &why));
  EXPECT_NE(why.find("deadlock"), std::string::npos) << why;
}

TEST(StageLink, PairsActivationWithGradient) {
  // Stage 0 of 2, 1F1B, 2 micro-batches: F0 F1 B0 B1. F1's activation goes with B0's
  // gradient in one group.
  const std::vector<Group> g = record(2, 0, 2, 1, true);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].size(), 1u);  // F0's activation, started alone at F1
  ASSERT_EQ(g[1].size(), 2u);
  EXPECT_TRUE(g[1][0].send && !g[1][1].send);
  EXPECT_EQ(g[1][0].tag, 3u);  // unit 1's activation
  EXPECT_EQ(g[1][1].tag, 2u);  // unit 0's gradient
  EXPECT_EQ(g[2].size(), 1u);  // B1's gradient in
}

}  // namespace
}  // namespace flexsp

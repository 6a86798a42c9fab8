#include "lib/plan/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "lib/comm/comm.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

bool pow2(int d) { return d >= 1 && (d & (d - 1)) == 0; }

}  // namespace

bool sp_group_runnable(int heads, int kv_heads, int d) {
  return pow2(d) && heads % d == 0 && (kv_heads % d == 0 || d % kv_heads == 0);
}

void plan_validate(const Plan& p, const std::vector<int64_t>& len, const PlanLimits& lim) {
  const int nseq = static_cast<int>(len.size());
  FLEXSP_CHECK(!p.micro_batches.empty(), "plan: no micro-batch");
  std::vector<int> seen(nseq, 0);
  for (size_t m = 0; m < p.micro_batches.size(); ++m) {
    const PlanMicroBatch& mb = p.micro_batches[m];
    const int64_t cap = mb.offload && lim.max_tokens_per_rank_offload > 0 ? lim.max_tokens_per_rank_offload
                                                                          : lim.max_tokens_per_rank;
    int next = 0;  // groups must tile [0, world) in order
    for (const PlanGroup& g : mb.groups) {
      const std::string where = fmt::format("plan: micro-batch {}, group at rank {}", m, g.first);
      FLEXSP_CHECK(pow2(g.size), "{}: size {} is not a power of two", where, g.size);
      FLEXSP_CHECK(g.first == next, "{}: expected a group starting at rank {}", where, next);
      FLEXSP_CHECK(g.first % g.size == 0, "{}: not aligned to its size {}", where, g.size);
      FLEXSP_CHECK(g.first + g.size <= lim.world, "{}: runs past the last rank {}", where, lim.world - 1);
      if (g.size <= lim.ranks_per_node)
        FLEXSP_CHECK(g.first / lim.ranks_per_node == (g.first + g.size - 1) / lim.ranks_per_node,
                     "{}: {} ranks span two nodes of {} ranks", where, g.size, lim.ranks_per_node);
      if (lim.cp_mode == CpMode::ulysses) {
        FLEXSP_CHECK(lim.heads == 0 || lim.heads % g.size == 0,
                     "{}: size {} does not divide the {} attention heads (parallel.cp_mode = "
                     "ulysses)", where, g.size, lim.heads);
        FLEXSP_CHECK(lim.kv_heads == 0 || lim.kv_heads % g.size == 0 || g.size % lim.kv_heads == 0,
                     "{}: size {} and the {} kv heads do not divide one another", where, g.size,
                     lim.kv_heads);
      }
      int64_t tokens = 0;
      for (int32_t s : g.seqs) {
        FLEXSP_CHECK(s >= 0 && s < nseq, "{}: sequence {} is not in the batch of {}", where, s, nseq);
        FLEXSP_CHECK(seen[s]++ == 0, "{}: sequence {} is assigned twice", where, s);
        tokens += len[s];
      }
      FLEXSP_CHECK(cap == 0 || tokens <= cap * g.size,
                   "{}: {} tokens exceed the memory of {} ranks ({} tokens each{})", where, tokens,
                   g.size, cap, mb.offload ? " with offload" : "");
      next = g.first + g.size;
    }
    FLEXSP_CHECK(next == lim.world, "plan: micro-batch {} covers ranks [0, {}) of {}", m, next, lim.world);
  }
  for (int s = 0; s < nseq; ++s)
    FLEXSP_CHECK(seen[s] == 1, "plan: sequence {} is not assigned", s);
}

// Layout: [n_mb, predicted_ms bits, then per mb: offload, n_groups, per group: first, size, n,
// seqs...]
std::vector<int64_t> plan_encode(const Plan& p) {
  std::vector<int64_t> f;
  f.push_back(static_cast<int64_t>(p.micro_batches.size()));
  int64_t bits;
  static_assert(sizeof(bits) == sizeof(p.predicted_ms));
  std::memcpy(&bits, &p.predicted_ms, sizeof(bits));
  f.push_back(bits);
  for (const PlanMicroBatch& mb : p.micro_batches) {
    f.push_back(mb.offload ? 1 : 0);
    f.push_back(static_cast<int64_t>(mb.groups.size()));
    for (const PlanGroup& g : mb.groups) {
      f.push_back(g.first);
      f.push_back(g.size);
      f.push_back(static_cast<int64_t>(g.seqs.size()));
      f.insert(f.end(), g.seqs.begin(), g.seqs.end());
    }
  }
  return f;
}

Plan plan_decode(const std::vector<int64_t>& f) {
  size_t at = 0;
  auto take = [&]() {
    FLEXSP_CHECK(at < f.size(), "plan: truncated encoding");
    return f[at++];
  };
  Plan p;
  p.micro_batches.resize(static_cast<size_t>(take()));
  const int64_t bits = take();
  std::memcpy(&p.predicted_ms, &bits, sizeof(bits));
  for (PlanMicroBatch& mb : p.micro_batches) {
    mb.offload = take() != 0;
    mb.groups.resize(static_cast<size_t>(take()));
    for (PlanGroup& g : mb.groups) {
      g.first = static_cast<int>(take());
      g.size = static_cast<int>(take());
      g.seqs.resize(static_cast<size_t>(take()));
      for (int32_t& s : g.seqs) s = static_cast<int32_t>(take());
    }
  }
  FLEXSP_CHECK(at == f.size(), "plan: trailing data in encoding");
  return p;
}

void plan_broadcast(Plan& p, Comm& comm, int root) {
  std::vector<int64_t> flat;
  if (comm.rank() == root) flat = plan_encode(p);
  int64_t n = static_cast<int64_t>(flat.size());
  comm.broadcast(&n, 1, DType::i64, root);
  flat.resize(static_cast<size_t>(n));
  comm.broadcast(flat.data(), flat.size(), DType::i64, root);
  if (comm.rank() != root) p = plan_decode(flat);
}

const PlanGroup& plan_group_of(const PlanMicroBatch& mb, int rank) {
  for (const PlanGroup& g : mb.groups)
    if (rank >= g.first && rank < g.first + g.size) return g;
  FLEXSP_ASSERT(false);
}

std::string plan_describe(const Plan& p, const std::vector<int64_t>& len) {
  std::string s;
  for (size_t m = 0; m < p.micro_batches.size(); ++m) {
    s += fmt::format("  mb {}:", m);
    const auto& groups = p.micro_batches[m].groups;
    for (size_t i = 0; i < groups.size(); ++i) {
      const PlanGroup& g = groups[i];
      int64_t tokens = 0;
      for (int32_t q : g.seqs) tokens += len[q];
      const std::string ranks = g.size == 1 ? fmt::format("{}", g.first)
                                            : fmt::format("{}-{}", g.first, g.first + g.size - 1);
      s += fmt::format("{} [{}] d={} {} seq {} tok", i ? " |" : "", ranks, g.size, g.seqs.size(), tokens);
    }
    s += "\n";
  }
  return s;
}

Plan plan_static(const std::vector<int64_t>& len, int world, int d, int64_t max_tokens_per_rank) {
  FLEXSP_CHECK(pow2(d) && world % d == 0,
               "parallel.sp_size: {} must be a power of two dividing the {} ranks", d, world);
  const int ngroups = world / d;
  const int64_t cap = max_tokens_per_rank > 0 ? max_tokens_per_rank * d : 0;
  std::vector<int32_t> order(len.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return len[a] > len[b]; });

  Plan p;
  std::vector<std::vector<int64_t>> load;  // per micro-batch, per group
  for (int32_t s : order) {
    FLEXSP_CHECK(cap == 0 || len[s] <= cap,
                 "a sequence of {} tokens does not fit a group of {} ranks ({} tokens each)",
                 len[s], d, max_tokens_per_rank);
    // Least-loaded group with room, in the earliest micro-batch that has one.
    int best_m = -1, best_g = -1;
    for (size_t m = 0; m < load.size() && best_m < 0; ++m) {
      for (int g = 0; g < ngroups; ++g) {
        if (cap > 0 && load[m][g] + len[s] > cap) continue;
        if (best_g < 0 || load[m][g] < load[m][best_g]) best_m = int(m), best_g = g;
      }
    }
    if (best_m < 0) {
      load.emplace_back(ngroups, 0);
      PlanMicroBatch mb;
      for (int g = 0; g < ngroups; ++g) mb.groups.push_back({g * d, d, {}});
      p.micro_batches.push_back(std::move(mb));
      best_m = int(load.size()) - 1;
      best_g = 0;
    }
    load[best_m][best_g] += len[s];
    p.micro_batches[best_m].groups[best_g].seqs.push_back(s);
  }
  if (p.micro_batches.empty()) {  // an empty batch still has one (idle) micro-batch
    PlanMicroBatch mb;
    for (int g = 0; g < ngroups; ++g) mb.groups.push_back({g * d, d, {}});
    p.micro_batches.push_back(std::move(mb));
  }
  return p;
}

}  // namespace flexsp


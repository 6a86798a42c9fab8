// mb_resplit (mb_solver.h): a larger neighbourhood for the local search over the split. The
// other passes move one sequence (or a sequence against one or two) between micro-batches;
// on memory-bound long-tail steps what is off is often which of several long pieces share
// a micro-batch and which short ones fill it, a choice no single move reaches. This pass
// takes two micro-batches at a time, pools their sequences and splits the pool again with
// the planner's own split rules at m = 2 -- the tiered splits, a balanced split by least
// work, the levels seeds -- and into one micro-batch where its tokens fit (one fixed cost
// saved); each is planned greedily and the best replaces the pair when the pair's time
// (fixed costs and makespans) drops. Pairs go slowest micro-batch first; first improvement
// per pair, repeated until a full sweep finds none, max_tries pairs or out_of_time().
#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>

#include "lib/planner/mb/mb_solver.h"

namespace flexsp {

namespace {

// 2-way splits of the pooled sequences (sub: their lengths), as index lists into sub.
std::vector<std::vector<std::vector<int32_t>>> pair_splits(const PlanCosts& c, const std::vector<int64_t>& sub) {
  std::vector<std::vector<std::vector<int32_t>>> out;
  int64_t tokens = 0;
  double work = 0;
  std::vector<double> wmin(sub.size());
  for (size_t i = 0; i < sub.size(); ++i) tokens += sub[i], work += wmin[i] = c.least_work(sub[i]);
  const int64_t cap = c.tokens_per_rank * c.world;
  const std::vector<int64_t> caps = mb_token_caps(c, tokens, 2);
  for (int w : {c.ranks_per_node / 2, c.ranks_per_node / 4})
    if (w >= 1) out.push_back(mb_split_tiered(c, sub, 2, cap, w));
  {  // balanced: longest first onto the half with less least work, memory permitting
    std::vector<std::vector<int32_t>> halves(2);
    double hw[2] = {0, 0};
    int64_t ht[2] = {0, 0};
    bool ok = true;
    for (int32_t s : mb_longest_first(sub)) {
      int k = hw[0] <= hw[1] ? 0 : 1;
      if (ht[k] + sub[s] > cap) k = 1 - k;
      if (ht[k] + sub[s] > cap) {
        ok = false;
        break;
      }
      halves[k].push_back(s), hw[k] += wmin[s], ht[k] += sub[s];
    }
    if (ok) out.push_back(std::move(halves));
  }
  const double avg_ms = work / c.world / 2 + c.fixed_ms;
  for (int widen : {0, 1})
    for (double alpha : {0.3}) {
      const auto seed = mb_seed_levels(c, sub, 2, avg_ms, widen, alpha, 0.5);
      if (seed.empty()) continue;
      for (int64_t tc : caps) out.push_back(mb_split_seeded(c, sub, seed, tc));
    }
  return out;
}

}  // namespace

int mb_resplit(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
               std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time) {
  const int64_t cap = c.tokens_per_rank * c.world;
  int kept = 0, tries = 0;
  for (bool again = true; again && tries < max_tries;) {
    again = false;
    const std::vector<size_t> order = mb_slowest_first(plans);
    for (size_t a = 0; a < order.size() && !again && tries < max_tries; ++a)
      for (size_t b = a + 1; b < order.size() && !again && tries < max_tries; ++b) {
        if (out_of_time && out_of_time()) return kept;
        ++tries;
        const size_t i = order[a], j = order[b];
        std::vector<int32_t> pool = mbs[i];
        pool.insert(pool.end(), mbs[j].begin(), mbs[j].end());
        std::vector<int64_t> sub(pool.size());
        int64_t tokens = 0;
        for (size_t q = 0; q < pool.size(); ++q) sub[q] = len[pool[q]], tokens += sub[q];
        const double before = 2 * c.fixed_ms + plans[i].makespan_ms + plans[j].makespan_ms;
        double best = before - 1e-6 * before;
        std::vector<std::vector<int32_t>> best_mbs;
        std::vector<MbPlan> best_plans;
        auto to_batch = [&](const std::vector<int32_t>& part) {
          std::vector<int32_t> seqs(part.size());
          for (size_t q = 0; q < part.size(); ++q) seqs[q] = pool[part[q]];
          return seqs;
        };
        if (tokens <= cap) {  // all in one: a fixed cost less
          MbPlan p = mb_greedy(c, len, pool);
          if (p.ok && c.fixed_ms + p.makespan_ms < best) {
            best = c.fixed_ms + p.makespan_ms;
            best_mbs = {pool};
            best_plans = {std::move(p)};
          }
        }
        for (const auto& split : pair_splits(c, sub)) {
          if (split.size() != 2 || split[0].empty() || split[1].empty()) continue;
          std::vector<std::vector<int32_t>> two = {to_batch(split[0]), to_batch(split[1])};
          MbPlan p0 = mb_greedy(c, len, two[0]);
          if (!p0.ok || 2 * c.fixed_ms + p0.makespan_ms >= best) continue;
          MbPlan p1 = mb_greedy(c, len, two[1]);
          if (!p1.ok || 2 * c.fixed_ms + p0.makespan_ms + p1.makespan_ms >= best) continue;
          best = 2 * c.fixed_ms + p0.makespan_ms + p1.makespan_ms;
          best_mbs = std::move(two);
          best_plans = {std::move(p0), std::move(p1)};
        }
        if (best_mbs.empty()) continue;
        mbs[i] = std::move(best_mbs[0]), plans[i] = std::move(best_plans[0]);
        if (best_mbs.size() == 2) {
          mbs[j] = std::move(best_mbs[1]), plans[j] = std::move(best_plans[1]);
        } else {
          mbs[j].clear(), plans[j] = MbPlan{};
          mb_drop_empty(mbs, plans);
        }
        ++kept;
        again = true;
      }
  }
  return kept;
}

}  // namespace flexsp

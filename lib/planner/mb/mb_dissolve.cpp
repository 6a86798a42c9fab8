// mb_dissolve (mb_solver.h): the other way round from mb_fill and mb_partner. A split of
// memory-bound batches often holds one micro-batch more than the token count needs;
// spreading a fast one over the others (by estimated finish, token room permitting) saves
// its fixed cost, and its makespan when the others, re-planned, grow by less.
#include <algorithm>
#include <functional>
#include <numeric>

#include "lib/planner/mb/mb_solver.h"

namespace flexsp {

int mb_dissolve(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
                std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time) {
  const int64_t cap = c.tokens_per_rank * c.world;
  const int m = static_cast<int>(mbs.size());
  if (m < 2 || max_tries <= 0) return 0;
  std::vector<int> by_makespan(m);
  std::iota(by_makespan.begin(), by_makespan.end(), 0);
  std::stable_sort(by_makespan.begin(), by_makespan.end(),
                   [&](int a, int b) { return plans[a].makespan_ms < plans[b].makespan_ms; });
  for (int t = 0; t < std::min(m, max_tries); ++t) {
    if (out_of_time && out_of_time()) return 0;
    const int v = by_makespan[t];
    // The victim's sequences, longest first, each onto the micro-batch that would finish
    // earliest by an even spread of its least work (token room permitting).
    std::vector<int64_t> tok(m, 0);
    std::vector<double> est(m, 0);
    for (int k = 0; k < m; ++k) {
      for (int32_t s : mbs[k]) tok[k] += len[s];
      est[k] = plans[k].makespan_ms;
    }
    const std::vector<int32_t> seqs = mb_longest_first(len, mbs[v]);
    std::vector<std::vector<int32_t>> next = mbs;
    bool ok = true;
    for (int32_t s : seqs) {
      const double wmin = c.least_work(len[s]);
      int best = -1;
      for (int k = 0; k < m; ++k)
        if (k != v && tok[k] + len[s] <= cap && (best < 0 || est[k] < est[best])) best = k;
      if (best < 0) {
        ok = false;
        break;
      }
      next[best].push_back(s);
      tok[best] += len[s];
      est[best] += wmin / c.world;
    }
    if (!ok) continue;
    double before = 0, after = 0;
    std::vector<MbPlan> replanned(m);
    for (int k = 0; k < m && ok; ++k) {
      before += c.fixed_ms + plans[k].makespan_ms;
      if (k == v) continue;
      if (next[k].size() == mbs[k].size()) {
        replanned[k] = plans[k];
      } else {
        replanned[k] = mb_greedy_pooled(c, len, next[k]);
        ok = replanned[k].ok;
      }
      after += c.fixed_ms + replanned[k].makespan_ms;
    }
    if (!ok || after >= before - 1e-9) continue;
    next.erase(next.begin() + v);
    replanned.erase(replanned.begin() + v);
    mbs = std::move(next);
    plans = std::move(replanned);
    return 1;
  }
  return 0;
}

}  // namespace flexsp

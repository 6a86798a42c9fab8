// mb_fill (mb_solver.h): sequences of the last micro-batch move into earlier micro-batches
// whose plans have room for them at no longer makespan. Splits chosen by token counts or by
// a lower-bound DP can leave a micro-batch whose long piece sets the makespan with devices
// idle beside it (a 300K piece on 32 of 64 devices, 32 empty); every sequence such a
// micro-batch absorbs is work the last micro-batch no longer does, and a last micro-batch
// that empties no longer pays the fixed cost.
#include <algorithm>

#include "lib/planner/mb/mb_solver.h"

namespace flexsp {

bool mb_fill(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
             std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time) {
  bool moved = false;
  const int64_t cap = c.tokens_per_rank * c.world;
  auto tokens = [&](const std::vector<int32_t>& seqs) {
    int64_t t = 0;
    for (int32_t s : seqs) t += len[static_cast<size_t>(s)];
    return t;
  };
  int tries = 0;
  auto stop = [&] { return tries >= max_tries || (out_of_time && out_of_time()); };
  while (mbs.size() > 1 && !stop()) {
    std::vector<int32_t>& last = mbs.back();
    last = mb_longest_first(len, std::move(last));
    bool any = false;
    for (size_t k = 0; k + 1 < mbs.size() && !stop(); ++k) {
      // Only micro-batches with idle devices (empty groups) are tried: the cheap test that
      // keeps this pass off the many plans it cannot help.
      const bool idle = std::any_of(plans[k].groups.begin(), plans[k].groups.end(),
                                    [](const PlanGroup& g) { return g.seqs.empty(); });
      if (!idle) continue;
      int64_t tok = tokens(mbs[k]);
      for (size_t i = 0; i < last.size() && !stop();) {
        const int32_t s = last[i];
        if (tok + len[s] > cap) {
          ++i;
          continue;
        }
        ++tries;
        std::vector<int32_t> grown = mbs[k];
        grown.push_back(s);
        MbPlan p = mb_greedy(c, len, grown);
        if (!p.ok || p.makespan_ms > plans[k].makespan_ms * (1 + 1e-9)) {
          ++i;
          continue;
        }
        mbs[k] = std::move(grown);
        plans[k] = std::move(p);
        tok += len[s];
        last.erase(last.begin() + static_cast<std::ptrdiff_t>(i));
        any = moved = true;
      }
    }
    if (last.empty()) {
      mbs.pop_back();
      plans.pop_back();
      continue;
    }
    if (!any) break;
    plans.back() = mb_greedy(c, len, last);
    if (!plans.back().ok) return moved;  // cannot happen: a subset of a plannable batch
    break;
  }
  return moved;
}

}  // namespace flexsp

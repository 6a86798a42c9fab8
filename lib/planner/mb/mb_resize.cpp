// mb_resize (mb_solver.h): a micro-batch's group sizes changed one step at a time -- two
// groups merged, one split, one doubled into idle ranks -- each composition re-assigned as
// mb_greedy assigns, the best kept while it lowers the makespan. mb_greedy's bisection
// opens each sequence's smallest size that meets its target, so it misses groups wider than
// any one sequence needs.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "lib/planner/mb/mb_solver.h"
#include "lib/planner/mb/open_groups.h"

namespace flexsp {

using namespace open_groups;

namespace {

// As mb_greedy packs (pack_under, mb_greedy.cpp), on groups of the given sizes, none opened: each sequence on the best fit
// of the smallest size that runs it within C, else the least loaded, else a larger size.
bool pack_sizes(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& order,
                const std::vector<int>& sizes, double C, std::vector<OpenGroup>* out) {
  Classes cl(c);
  for (int d : sizes) cl.open(d);
  for (int32_t s : order) {
    const int64_t l = len[s];
    int g = -1;
    for (auto it = cl.by_d.begin(); g < 0 && it != cl.by_d.end(); ++it) {
      const int d = it->first;
      if (!c.holds(l, d) || c.seq_ms(l, d) > C) continue;
      g = cl.best_fit(d, l, c.seq_ms(l, d), C);
      const int h = g < 0 ? cl.least_loaded(d, l) : -1;
      if (h >= 0 && cl.groups[h].load + c.seq_ms(l, d) <= C) g = h;
    }
    if (g < 0) return false;
    cl.add(g, s, l, c.seq_ms(l, cl.groups[g].d));
  }
  *out = std::move(cl.groups);
  return true;
}

// The least C (bisected) under which pack_sizes places seqs on these sizes, below `below`;
// !ok when it finds none.
MbPlan pack_sizes_bisect(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& order,
                         const std::vector<int>& sizes, double below) {
  std::vector<OpenGroup> best;
  std::vector<int> distinct = sizes;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  double hi = below, lo = floor_ms(c, len, order, distinct, std::accumulate(sizes.begin(), sizes.end(), 0));
  if (lo >= hi || !pack_sizes(c, len, order, sizes, hi, &best)) return {};
  for (int it = 0; it < 40 && hi - lo > 1e-4 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    std::vector<OpenGroup> trial;
    if (pack_sizes(c, len, order, sizes, mid, &trial)) hi = mid, best = std::move(trial);
    else lo = mid;
  }
  MbPlan p = to_plan(c, len, best);
  if (p.ok) mb_improve(c, len, p);
  return p;
}

}  // namespace

void mb_resize(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& seqs, MbPlan& p,
               int max_rounds) {
  auto allowed = [&](int d) { return std::find(c.sizes.begin(), c.sizes.end(), d) != c.sizes.end(); };
  // Nothing to gain within 0.1% of the floor: the many-sequence micro-batches of short
  // documents sit there, and they are the costly ones to re-assign.
  if (!p.ok || p.makespan_ms <= floor_ms(c, len, seqs, c.sizes, c.world) * (1 + 1e-3)) return;
  for (int round = 0; round < max_rounds && p.ok; ++round) {
    std::map<int, int> count;  // groups that hold sequences, by size
    int used = 0;
    for (const PlanGroup& g : p.groups)
      if (!g.seqs.empty()) count[g.size]++, used += g.size;
    // Each composition: the sizes with one change (a merge, a split, a doubling into idle
    // ranks), assigned longest first onto the least finish (mb_assign) and by best fit under
    // a bisected makespan (pack_sizes), as mb_greedy assigns.
    std::set<std::vector<int>> tried;
    const std::vector<int32_t> order = longest_first(len, seqs);
    MbPlan best;
    auto keep = [&](MbPlan& q) {
      const double bar = best.ok ? best.makespan_ms : p.makespan_ms * (1 - 1e-9);
      if (q.ok && q.makespan_ms < bar) best = std::move(q);
    };
    auto consider = [&](int d, int delta, int d2, int delta2) {
      std::map<int, int> next = count;
      next[d] += delta, next[d2] += delta2;
      std::vector<int> sizes;
      for (const auto& [sz, k] : next)
        for (int i = 0; i < k; ++i) sizes.push_back(sz);
      if (!tried.insert(sizes).second) return;
      MbPlan q = mb_assign(c, len, seqs, sizes);
      keep(q);
      q = pack_sizes_bisect(c, len, order, sizes, best.ok ? best.makespan_ms : p.makespan_ms);
      keep(q);
    };
    for (const auto& [d, k] : count) {
      if (k >= 2 && allowed(2 * d)) consider(d, -2, 2 * d, 1);
      if (d >= 2 && allowed(d / 2)) consider(d, -1, d / 2, 2);
      if (c.world - used >= d && allowed(2 * d)) consider(d, -1, 2 * d, 1);
    }
    if (!best.ok) return;
    p = std::move(best);
  }
}

}  // namespace flexsp

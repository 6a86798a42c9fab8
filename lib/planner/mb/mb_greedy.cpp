// Greedy micro-batch planning and node-aware placement (see mb_solver.h), on the open
// groups of open_groups.h.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <limits>
#include <numeric>
#include <set>

#include "lib/planner/mb/mb_solver.h"
#include "lib/planner/mb/open_groups.h"
#include "lib/util/error.h"

namespace flexsp {

namespace open_groups {

std::vector<int32_t> longest_first(const std::vector<int64_t>& len, std::vector<int32_t> seqs) {
  std::stable_sort(seqs.begin(), seqs.end(), [&](int32_t a, int32_t b) {
    return len[a] != len[b] ? len[a] > len[b] : a < b;
  });
  return seqs;
}

// No plan of seqs on groups of these sizes (ascending, distinct), devices in all, has a
// shorter makespan: the longest sequence on its fastest size, the least rank-time spread
// over the devices. Infinite when a sequence fits no size.
double floor_ms(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& seqs,
                const std::vector<int>& sizes, int devices) {
  double lo = 0, work = 0;
  for (int32_t s : seqs) {
    double tmin = std::numeric_limits<double>::infinity(), wmin = tmin;
    for (int d : sizes)
      if (c.holds(len[s], d)) {
        tmin = std::min(tmin, c.seq_ms(len[s], d));
        wmin = std::min(wmin, d * c.seq_ms(len[s], d));
      }
    if (!std::isfinite(tmin)) return tmin;
    lo = std::max(lo, tmin);
    work += wmin;
  }
  return std::max(lo, work / devices);
}

MbPlan to_plan(const PlanCosts& c, const std::vector<int64_t>& len,
               const std::vector<OpenGroup>& open) {
  MbPlan p;
  for (const OpenGroup& g : open) p.groups.push_back({-1, g.d, g.seqs});
  p.ok = mb_place(c, p.groups);
  if (p.ok) p.makespan_ms = mb_makespan(c, len, p.groups);
  return p;
}

}  // namespace open_groups

using namespace open_groups;

namespace {

// Packs sorted seqs under target makespan C; empty vector when infeasible.
bool pack_under(const PlanCosts& c, const std::vector<int64_t>& len,
                const std::vector<int32_t>& order, double C, std::vector<OpenGroup>* out) {
  Classes cl(c);
  int ranks_left = c.world;
  for (int32_t s : order) {
    const int64_t l = len[s];
    int dnew = 0;
    for (int d : c.sizes)
      if (c.holds(l, d) && c.seq_ms(l, d) <= C) {
        dnew = d;
        break;
      }
    if (dnew == 0) return false;
    int g = cl.best_fit(dnew, l, c.seq_ms(l, dnew), C);
    if (g < 0) {  // the fullest groups may lack memory: the least loaded has the most room
      g = cl.least_loaded(dnew, l);
      if (g >= 0 && cl.groups[g].load + c.seq_ms(l, dnew) > C) g = -1;
    }
    if (g < 0 && ranks_left >= dnew) {
      g = cl.open(dnew);
      ranks_left -= dnew;
    }
    for (auto it = c.sizes.begin(); g < 0 && it != c.sizes.end(); ++it)
      if (*it > dnew) {
        g = cl.best_fit(*it, l, c.seq_ms(l, *it), C);
        const int h = g < 0 ? cl.least_loaded(*it, l) : -1;
        if (h >= 0 && cl.groups[h].load + c.seq_ms(l, *it) <= C) g = h;
      }
    if (g < 0) return false;
    cl.add(g, s, l, c.seq_ms(l, cl.groups[g].d));
  }
  // Node-aware placement must succeed too (it always does when ranks_per_node is a power
  // of two; other node sizes can strand ranks).
  std::vector<PlanGroup> trial;
  for (const OpenGroup& g : cl.groups) trial.push_back({-1, g.d, {}});
  if (!mb_place(c, trial)) return false;
  *out = std::move(cl.groups);
  return true;
}

}  // namespace

bool mb_place(const PlanCosts& c, std::vector<PlanGroup>& groups) {
  std::vector<size_t> order(groups.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return groups[a].size > groups[b].size; });
  std::vector<char> used(static_cast<size_t>(c.world), 0);
  const int rpn = c.ranks_per_node;
  // Ranks only get used, so a block rejected for one group stays rejected for the next of
  // its size: the scan of a size resumes where its previous group went (O(world) per size,
  // not per group: 1024 ranks hold hundreds of groups).
  int from = 0, from_d = 0;
  for (size_t gi : order) {
    PlanGroup& g = groups[gi];
    const int d = g.size;
    g.first = -1;
    if (d != from_d) from = 0, from_d = d;
    for (int f = from; f + d <= c.world && g.first < 0; f += d) {
      if (d <= rpn && f / rpn != (f + d - 1) / rpn) continue;
      bool free = true;
      for (int r = f; r < f + d && free; ++r) free = !used[r];
      if (!free) continue;
      g.first = f;
      from = f + d;
      for (int r = f; r < f + d; ++r) used[r] = 1;
    }
    if (g.first < 0) return false;
  }
  for (int r = 0; r < c.world; ++r)
    if (!used[r]) groups.push_back({r, 1, {}});
  std::sort(groups.begin(), groups.end(),
            [](const PlanGroup& a, const PlanGroup& b) { return a.first < b.first; });
  return true;
}

MbPlan mb_assign(const PlanCosts& c, const std::vector<int64_t>& len,
                 const std::vector<int32_t>& seqs, const std::vector<int>& sizes) {
  Classes cl(c);
  for (int d : sizes) cl.open(d);
  for (int32_t s : longest_first(len, seqs)) {
    const int64_t l = len[s];
    int best = -1;
    double finish = std::numeric_limits<double>::infinity();
    for (const auto& [d, set] : cl.by_d) {
      const int g = cl.least_loaded(d, l);
      if (g < 0) continue;
      const double f = cl.groups[g].load + c.seq_ms(l, d);
      if (f < finish) finish = f, best = g;
    }
    if (best < 0) return {};
    cl.add(best, s, l, c.seq_ms(l, cl.groups[best].d));
  }
  MbPlan p = to_plan(c, len, cl.groups);
  if (p.ok) mb_improve(c, len, p);
  return p;
}

void mb_improve(const PlanCosts& c, const std::vector<int64_t>& len, MbPlan& p) {
  Classes cl(c);
  for (size_t i = 0; i < p.groups.size(); ++i) {
    const int g = cl.open(p.groups[i].size);  // g == i
    for (int32_t s : p.groups[i].seqs) cl.add(g, s, len[s], c.seq_ms(len[s], p.groups[i].size));
  }
  auto critical = [&]() {
    int best = -1;
    for (const auto& [d, set] : cl.by_d)
      if (!set.empty() && (best < 0 || set.rbegin()->first > cl.groups[best].load))
        best = set.rbegin()->second;
    return best;
  };
  const int max_moves = 4 * static_cast<int>(len.size()) + 16;
  for (int moves = 0; moves < max_moves; ++moves) {
    const int g = critical();
    if (g < 0) break;
    const double top = cl.groups[g].load;
    // The move that leaves the lowest max(new load of g, new load of the target).
    double best_val = top - 1e-9 * std::max(1.0, top);
    int best_pos = -1, best_to = -1;
    const OpenGroup& src = cl.groups[g];
    for (size_t k = 0; k < src.seqs.size(); ++k) {
      const int64_t l = len[src.seqs[k]];
      const double after = top - c.seq_ms(l, src.d);
      for (const auto& [d, set] : cl.by_d) {
        const int h = cl.least_loaded(d, l);
        if (h < 0 || h == g) continue;
        const double v = std::max(after, cl.groups[h].load + c.seq_ms(l, d));
        if (v < best_val) best_val = v, best_pos = static_cast<int>(k), best_to = h;
      }
    }
    if (best_pos < 0) break;
    const int32_t s = src.seqs[best_pos];
    cl.remove(g, static_cast<size_t>(best_pos), len[s], c.seq_ms(len[s], cl.groups[g].d));
    cl.add(best_to, s, len[s], c.seq_ms(len[s], cl.groups[best_to].d));
  }
  for (size_t i = 0; i < p.groups.size(); ++i) p.groups[i].seqs = cl.groups[i].seqs;
  p.makespan_ms = mb_makespan(c, len, p.groups);
}

MbPlan mb_greedy(const PlanCosts& c, const std::vector<int64_t>& len,
                 const std::vector<int32_t>& seqs) {
  const std::vector<int32_t> order = longest_first(len, seqs);
  double lo = floor_ms(c, len, order, c.sizes, c.world);
  if (!std::isfinite(lo)) return {};
  std::vector<OpenGroup> best;
  if (seqs.empty()) return to_plan(c, len, best);
  double hi = std::max(lo, 1e-9) * 1.25;
  int grow = 0;
  while (!pack_under(c, len, order, hi, &best)) {
    if (++grow > 60) {
      // Memory-tight: the packing strands tokens. Last resort: the largest groups only.
      std::vector<int> big(static_cast<size_t>(c.world / c.max_size()), c.max_size());
      return mb_assign(c, len, seqs, big);
    }
    hi *= 2;
  }
  lo = grow == 0 ? lo : hi / 2;
  for (int it = 0; it < 40 && hi - lo > 1e-4 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    std::vector<OpenGroup> trial;
    if (pack_under(c, len, order, mid, &trial)) hi = mid, best = std::move(trial);
    else lo = mid;
  }
  MbPlan packed = to_plan(c, len, best);
  if (!packed.ok) return packed;
  mb_improve(c, len, packed);
  std::vector<int> sizes;
  for (const OpenGroup& g : best) sizes.push_back(g.d);
  MbPlan lpt = mb_assign(c, len, seqs, sizes);
  return lpt.ok && lpt.makespan_ms < packed.makespan_ms ? lpt : packed;
}

MbPlan mb_pooled(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& seqs) {
  int64_t tokens = 0;
  for (int32_t s : seqs) tokens += len[s];
  MbPlan out;
  if (10 * tokens < 9 * c.tokens_per_rank * c.world) return out;
  for (int d : c.sizes) {
    if (d == 1 || c.inter_node(d)) continue;
    MbPlan u = mb_assign(c, len, seqs, std::vector<int>(static_cast<size_t>(c.world / d), d));
    if (u.ok && (!out.ok || u.makespan_ms < out.makespan_ms)) out = std::move(u);
  }
  return out;
}

MbPlan mb_greedy_pooled(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& seqs) {
  MbPlan out = mb_greedy(c, len, seqs);
  MbPlan u = mb_pooled(c, len, seqs);
  return u.ok && (!out.ok || u.makespan_ms < out.makespan_ms) ? u : out;
}

}  // namespace flexsp

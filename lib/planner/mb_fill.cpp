// mb_fill (mb_solver.h): sequences of the last micro-batch move into earlier micro-batches
// whose plans have room for them at no longer makespan. Splits chosen by token counts or by
// a lower-bound DP can leave a micro-batch whose long piece sets the makespan with devices
// idle beside it (a 300K piece on 32 of 64 devices, 32 empty); every sequence such a
// micro-batch absorbs is work the last micro-batch no longer does, and a last micro-batch
// that empties no longer pays the fixed cost.
//
// mb_partner generalizes the idea to every group with slack: a 151K piece alone on the
// 16-GPU group its memory needs, in a micro-batch whose 192K pieces set the makespan, can
// take a 101K partner that finishes within it; the micro-batch it came from (where such
// 80-140K sequences set the makespan of otherwise short work) gets faster. Moves only
// ever fill slack, so the destination's makespan never grows and only the source is
// re-planned; all that fits moves at once, since one move alone rarely lowers the
// source's makespan (two such sequences often share its critical path).
//
// mb_dissolve takes the other direction: a split of memory-bound batches often holds one
// micro-batch more than the token count needs; spreading a fast one over the others (by
// estimated finish, token room permitting) saves its fixed cost and its makespan when the
// others, re-planned, grow by less.
#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "lib/planner/mb_solver.h"

namespace flexsp {

bool mb_fill(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
             std::vector<MbPlan>& plans, int max_tries) {
  bool moved = false;
  const int64_t cap = c.tokens_per_rank * c.world;
  auto tokens = [&](const std::vector<int32_t>& seqs) {
    int64_t t = 0;
    for (int32_t s : seqs) t += len[static_cast<size_t>(s)];
    return t;
  };
  int tries = 0;
  while (mbs.size() > 1 && tries < max_tries) {
    std::vector<int32_t>& last = mbs.back();
    last = mb_longest_first(len, std::move(last));
    bool any = false;
    for (size_t k = 0; k + 1 < mbs.size() && tries < max_tries; ++k) {
      // Only micro-batches with idle devices (empty groups) are tried: the cheap test that
      // keeps this pass off the many plans it cannot help.
      const bool idle = std::any_of(plans[k].groups.begin(), plans[k].groups.end(),
                                    [](const PlanGroup& g) { return g.seqs.empty(); });
      if (!idle) continue;
      int64_t tok = tokens(mbs[k]);
      for (size_t i = 0; i < last.size() && tries < max_tries;) {
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

namespace {

// The groups with slack outside one micro-batch, per size ordered by (slack, index), so the
// best fit (least slack that still holds a sequence's time) is a lookup: at 1024 devices a
// micro-batch has hundreds of groups, idle ranks among them.
struct Slack {
  struct Slot {
    size_t k, g;
    double slack;
    int64_t tok;
  };
  std::vector<Slot> slots;
  std::map<int, std::set<std::pair<double, size_t>>> by_d;

  Slack(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<MbPlan>& plans, size_t skip) {
    for (size_t k = 0; k < plans.size(); ++k) {
      if (k == skip) continue;
      for (size_t g = 0; g < plans[k].groups.size(); ++g) {
        const PlanGroup& pg = plans[k].groups[g];
        Slot sl{k, g, plans[k].makespan_ms, 0};
        for (int32_t s : pg.seqs) sl.slack -= c.seq_ms(len[s], pg.size), sl.tok += len[s];
        if (sl.slack <= 0) continue;
        by_d[pg.size].insert({sl.slack, slots.size()});
        slots.push_back(sl);
      }
    }
  }
  // The slot of size d with the least slack >= t and memory for l more tokens; -1 if none.
  int64_t best_fit(const PlanCosts& c, int d, int64_t l, double t) const {
    auto it = by_d.find(d);
    if (it == by_d.end()) return -1;
    int tries = 0;
    for (auto pos = it->second.lower_bound({t, 0}); pos != it->second.end() && tries < 16; ++pos, ++tries)
      if (slots[pos->second].tok + l <= c.tokens_per_rank * d) return static_cast<int64_t>(pos->second);
    return -1;
  }
  void take(size_t i, int d, int64_t l, double t) {
    by_d[d].erase({slots[i].slack, i});
    slots[i].slack -= t, slots[i].tok += l;
    if (slots[i].slack > 0) by_d[d].insert({slots[i].slack, i});
  }
};

}  // namespace

int mb_partner(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
               std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time) {
  int tries = 0, kept = 0;
  auto stop = [&] { return tries >= max_tries || (out_of_time && out_of_time()); };
  while (mbs.size() > 1 && !stop()) {
    const size_t m = mbs.size();
    const std::vector<size_t> desc = mb_slowest_first(plans);
    bool improved = false;
    for (size_t si = 0; si < m && !improved && !stop(); ++si) {
      const size_t src = desc[si];
      Slack slack(c, len, plans, src);
      if (slack.slots.empty()) continue;
      const std::vector<int32_t> order = mb_longest_first(len, mbs[src]);
      std::vector<std::pair<int32_t, size_t>> moves;  // sequence, slot
      for (int32_t s : order) {
        const int64_t l = len[s];
        int64_t best = -1;
        int best_d = 0;
        double best_left = 0;
        for (int d : c.sizes) {
          if (!c.holds(l, d)) continue;
          const double t = c.seq_ms(l, d);
          const int64_t i = slack.best_fit(c, d, l, t);
          if (i >= 0 && (best < 0 || slack.slots[i].slack - t < best_left))
            best = i, best_d = d, best_left = slack.slots[i].slack - t;
        }
        if (best < 0) continue;
        slack.take(static_cast<size_t>(best), best_d, l, c.seq_ms(l, best_d));
        moves.emplace_back(s, static_cast<size_t>(best));
      }
      if (moves.empty()) continue;
      ++tries;
      std::vector<int32_t> rest;
      std::set<int32_t> moved;
      for (const auto& mv : moves) moved.insert(mv.first);
      for (int32_t s : mbs[src])
        if (!moved.count(s)) rest.push_back(s);
      MbPlan ps = mb_greedy(c, len, rest);
      if (!ps.ok) continue;
      // An emptied micro-batch is dropped below: its fixed cost is saved too.
      const double gain = plans[src].makespan_ms - ps.makespan_ms + (rest.empty() ? c.fixed_ms : 0);
      if (gain <= 1e-9 * plans[src].makespan_ms) continue;
      for (const auto& [s, i] : moves) {
        plans[slack.slots[i].k].groups[slack.slots[i].g].seqs.push_back(s);
        mbs[slack.slots[i].k].push_back(s);
      }
      for (size_t k = 0; k < m; ++k)
        if (k != src) plans[k].makespan_ms = mb_makespan(c, len, plans[k].groups);
      mbs[src] = std::move(rest), plans[src] = std::move(ps);
      kept += static_cast<int>(moves.size());
      improved = true;
    }
    mb_drop_empty(mbs, plans);
    if (!improved) break;
  }
  return kept;
}

}  // namespace flexsp

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

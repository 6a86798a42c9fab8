// mb_partner (mb_solver.h): the slack of every group filled, as mb_fill fills idle
// devices. A group that finishes before its micro-batch's makespan -- a wide piece alone
// on the group its memory needs, beside longer pieces that set the makespan -- can take a
// partner from another micro-batch that finishes within that makespan, and the
// micro-batch the partner came from gets faster. Moves only ever fill slack, so the
// destination's makespan never grows and only the source is re-planned; all that fits
// moves at once, since one move alone rarely lowers the source's makespan (two such
// sequences often share its critical path).
#include <functional>
#include <map>
#include <set>

#include "lib/planner/mb/mb_solver.h"

namespace flexsp {

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

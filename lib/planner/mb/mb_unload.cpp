// mb_unload (mb_solver.h): the micro-batch whose bound is one sequence's time alone. When
// a micro-batch's longest piece, alone on its fastest group, takes longer than all its
// work spread over the devices, no plan of it beats that time T; yet a micro-batch full to
// the token makes the greedy plan put short sequences beside that piece (the other groups
// lack the memory) and lengthen it past T. The pass plans the piece alone on its fastest
// group and, beside it, the longest prefix of the others (longest first: the most time
// per token, which the piece's long makespan hides best) that the other devices run
// within T; the rest moves to the other micro-batches (longest first onto the one that
// would finish earliest by its least work, token room permitting) or into a micro-batch
// of its own, whichever makes the sum of fixed costs and makespans smaller; kept only
// where that sum drops, so the piece's group is lengthened only where the step is
// shorter for it.
#include <algorithm>
#include <limits>

#include "lib/planner/mb/mb_solver.h"

namespace flexsp {

namespace {

struct Anchor {
  int32_t seq = -1;
  int d = 0;
  double t = std::numeric_limits<double>::infinity();
};

// The micro-batch's longest sequence on its fastest group, where its time alone is the
// micro-batch's bound (not below its least work over the devices); seq -1 where not.
Anchor anchor_of(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& seqs) {
  Anchor a;
  double work = 0;
  for (int32_t s : seqs) {
    work += c.least_work(len[s]);
    if (a.seq < 0 || len[s] > len[a.seq]) a.seq = s;
  }
  if (a.seq < 0) return a;
  for (int d : c.sizes)
    if (c.holds(len[a.seq], d) && c.seq_ms(len[a.seq], d) < a.t) a.t = c.seq_ms(len[a.seq], d), a.d = d;
  if (a.d == 0 || work / c.world > a.t * (1 + 1e-9)) a.seq = -1;
  return a;
}

// The anchor alone on its group and `rest` on the other devices; not ok where they do not
// fit.
MbPlan anchored_plan(const PlanCosts& c, const std::vector<int64_t>& len, const Anchor& a,
                     const std::vector<int32_t>& rest) {
  PlanCosts left = c;
  left.world = c.world - a.d;
  MbPlan p = left.world > 0 || rest.empty() ? mb_greedy(left, len, rest) : MbPlan{};
  if (!p.ok) return {};
  p.groups.push_back({-1, a.d, {a.seq}});
  p.ok = mb_place(c, p.groups);
  if (p.ok) p.makespan_ms = mb_makespan(c, len, p.groups);
  return p;
}

int64_t tokens_of(const std::vector<int64_t>& len, const std::vector<int32_t>& seqs) {
  int64_t t = 0;
  for (int32_t s : seqs) t += len[s];
  return t;
}

// `moved` spread over the micro-batches other than k (see above), those re-planned; the
// change in their sum of makespans, infinite where something does not fit.
double spread(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
              std::vector<MbPlan>& plans, size_t k, const std::vector<int32_t>& moved) {
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t cap = c.tokens_per_rank * c.world;
  std::vector<double> finish(mbs.size());
  std::vector<int64_t> tok(mbs.size());
  for (size_t j = 0; j < mbs.size(); ++j) finish[j] = plans[j].makespan_ms, tok[j] = tokens_of(len, mbs[j]);
  std::vector<char> touched(mbs.size(), 0);
  for (int32_t s : moved) {
    size_t best = mbs.size();
    for (size_t j = 0; j < mbs.size(); ++j)
      if (j != k && tok[j] + len[s] <= cap && (best == mbs.size() || finish[j] < finish[best])) best = j;
    if (best == mbs.size()) return inf;
    mbs[best].push_back(s), tok[best] += len[s], finish[best] += c.least_work(len[s]) / c.world;
    touched[best] = 1;
  }
  double delta = 0;
  for (size_t j = 0; j < mbs.size(); ++j) {
    if (!touched[j]) continue;
    MbPlan p = mb_greedy(c, len, mbs[j]);
    if (!p.ok) return inf;
    delta += p.makespan_ms - plans[j].makespan_ms;
    plans[j] = std::move(p);
  }
  return delta;
}

}  // namespace

int mb_unload(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
              std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time) {
  int tries = 0, kept = 0;
  const std::vector<size_t> order = mb_slowest_first(plans);
  for (size_t k : order) {
    if (tries >= max_tries || (out_of_time && out_of_time())) break;
    const Anchor a = anchor_of(c, len, mbs[k]);
    if (a.seq < 0 || mbs[k].size() < 2 || plans[k].makespan_ms <= a.t * (1 + 1e-9)) continue;
    ++tries;
    std::vector<int32_t> others;
    for (int32_t s : mb_longest_first(len, mbs[k]))
      if (s != a.seq) others.push_back(s);
    // The longest prefix of the others that runs within the anchor's time (bisection on
    // its length: a longer prefix rarely fits where a shorter one does not).
    size_t lo = 0, hi = others.size();
    MbPlan best = anchored_plan(c, len, a, {});
    while (lo < hi) {
      const size_t mid = (lo + hi + 1) / 2;
      MbPlan p = anchored_plan(c, len, a, std::vector<int32_t>(others.begin(), others.begin() + mid));
      if (p.ok && p.makespan_ms <= a.t * (1 + 1e-9)) lo = mid, best = std::move(p);
      else hi = mid - 1;
    }
    if (!best.ok) continue;
    const std::vector<int32_t> kept_seqs(others.begin(), others.begin() + lo), moved(others.begin() + lo, others.end());
    const double gain = plans[k].makespan_ms - best.makespan_ms;
    // Either the moved sequences spread over the other micro-batches, or a micro-batch of
    // their own (its fixed cost paid): the cheaper, where the sum drops.
    std::vector<std::vector<int32_t>> s_mbs = mbs;
    std::vector<MbPlan> s_plans = plans;
    const double spread_cost = spread(c, len, s_mbs, s_plans, k, moved);
    const MbPlan own = mb_greedy(c, len, moved);
    const double own_cost = own.ok ? c.fixed_ms + own.makespan_ms : std::numeric_limits<double>::infinity();
    if (std::min(spread_cost, own_cost) >= gain * (1 - 1e-9)) continue;
    std::vector<int32_t> anchored = {a.seq};
    anchored.insert(anchored.end(), kept_seqs.begin(), kept_seqs.end());
    if (spread_cost <= own_cost) {
      mbs = std::move(s_mbs), plans = std::move(s_plans);
    } else {
      mbs.push_back(moved), plans.push_back(own);
    }
    mbs[k] = std::move(anchored), plans[k] = std::move(best);
    ++kept;
  }
  return kept;
}

}  // namespace flexsp

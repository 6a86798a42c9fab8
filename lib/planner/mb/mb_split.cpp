// Splits of a step into micro-batches for memory-bound batches (mb_solver.h), and the
// helpers the passes over a split share.
//
// mb_split_tiered: the "wide" pieces, those whose smallest group (by memory) is wider than
// wide_from devices, go first, longest first, onto the first micro-batch with devices left
// for that group: they make a staircase (four 192K pieces on 16-GPU groups in one
// micro-batch, then the next), since every micro-batch that holds one runs at least as
// long as it, and a piece alone on its group runs long (quadratic work) and fixes the
// group. The planner tries half and a quarter of a node for wide_from. The rest go
// longest first onto the micro-batch whose estimated makespan (max of its longest wide
// piece's time and the rest's rank-time over the devices the wide groups leave) grows
// least, within those devices' memory and a token cap: a micro-batch whose wide groups
// leave devices free takes work for free, one whose devices are all in wide groups takes
// none. The caller also passes a cap below memory so that micro-batches keep room for
// small groups (a micro-batch full to the token leaves mb_greedy only the widest groups).
//
// mb_seed_levels: a seed for mb_split_seeded, built without an incumbent. The tiered split
// stacks wide pieces at their smallest group and lets mb_greedy size the groups, which then
// can pair the longest pieces with shorter long ones on one wide group, a slow micro-batch
// (docs/planner.md). Levels fix
// the sizes instead: micro-batch k's longest piece sets a target makespan (its time on its
// smallest group, for k > 0 optionally a wider one), and the next pieces take the narrowest
// group that runs them within it while devices last, so a level's pieces finish together
// and the shorter long pieces wait for a level of their own.
//
// mb_split_seeded: an experiment's start (PlannerContext::seed_split, the strong bound's
// incumbent): given pieces stay, the rest is dealt as the tiered split deals what is not
// wide, but counting the fixed groups' slack time and spare memory.
#include <algorithm>
#include <limits>
#include <numeric>

#include "lib/planner/mb/mb_solver.h"

namespace flexsp {

namespace {

// A split under construction: per micro-batch the devices in fixed groups (wide or seeded
// pieces), the longest time stacked on one of them, and the rest's rank-time and tokens,
// which run on the devices the fixed groups leave.
struct Tiers {
  const PlanCosts& c;
  int64_t token_cap;
  std::vector<std::vector<int32_t>> mbs;
  std::vector<int> dev;
  std::vector<double> floor_ms, work;
  std::vector<int64_t> tok, rest_tok;
  // shared: the rest may also use the fixed groups' memory and time (seeded splits, whose
  // pieces may leave their groups slack); else only the devices those groups leave.
  bool shared = false;
  std::vector<double> fixed_work;    // rank-time of the fixed groups (shared)
  std::vector<int64_t> fixed_room;   // memory the fixed groups leave (shared)
  Tiers(const PlanCosts& costs, int m, int64_t cap, bool share_fixed = false)
      : c(costs), token_cap(cap), mbs(m), dev(m, 0), floor_ms(m, 0), work(m, 0), tok(m, 0), rest_tok(m, 0),
        shared(share_fixed), fixed_work(m, 0), fixed_room(m, 0) {}
  double est(int k, double w) const {
    if (shared) return std::max(floor_ms[k], (fixed_work[k] + work[k] + w) / c.world);
    return std::max(floor_ms[k], (work[k] + w) / (c.world - dev[k]));
  }
  int64_t rest_room(int k, int more) const {
    return int64_t{c.world - dev[k] - more} * c.tokens_per_rank + (shared ? fixed_room[k] : 0);
  }
  // A piece on a fixed group of d devices (0: a group opened before) in micro-batch k,
  // the group now running for ms, the piece adding w of rank-time.
  void fix(int k, int32_t s, int64_t l, int d, double ms, double w = 0) {
    dev[k] += d, floor_ms[k] = std::max(floor_ms[k], ms), tok[k] += l, fixed_work[k] += w;
    fixed_room[k] += int64_t{d} * c.tokens_per_rank - l;
    mbs[k].push_back(s);
  }
  // The rest: onto the micro-batch whose estimated makespan grows least; false when none
  // has the memory.
  void put_rest(int k, int32_t s, int64_t l, double w) {
    work[k] += w, rest_tok[k] += l, tok[k] += l;
    mbs[k].push_back(s);
  }
  bool add_rest(int32_t s, int64_t l) {
    const double w = c.least_work(l);
    int best = -1;
    double best_up = 0;
    for (int k = 0; k < static_cast<int>(mbs.size()); ++k) {
      if (tok[k] + l > token_cap || rest_tok[k] + l > rest_room(k, 0)) continue;
      const double up = est(k, w) - est(k, 0);
      if (best < 0 || up < best_up - 1e-9 || (up <= best_up + 1e-9 && est(k, 0) < est(best, 0)))
        best = k, best_up = up;
    }
    if (best < 0) return false;
    put_rest(best, s, l, w);
    return true;
  }
};

}  // namespace

std::vector<std::vector<int32_t>> mb_split_tiered(const PlanCosts& c, const std::vector<int64_t>& len, int m,
                                                  int64_t token_cap, int wide_from) {
  Tiers t(c, m, token_cap);
  for (int32_t s : mb_longest_first(len)) {
    const int64_t l = len[s];
    const int d = c.min_size(l);
    if (d == 0) return {};
    if (d <= wide_from) {
      if (!t.add_rest(s, l)) return {};
      continue;
    }
    int best = -1;  // wide: the first micro-batch with the devices for its group
    for (int k = 0; k < m && best < 0; ++k)
      if (t.dev[k] + d <= c.world && t.tok[k] + l <= token_cap && t.rest_tok[k] <= t.rest_room(k, d)) best = k;
    if (best < 0) return {};
    t.fix(best, s, l, d, c.seq_ms(l, d));
  }
  return t.mbs;
}

std::vector<std::vector<int32_t>> mb_split_seeded(const PlanCosts& c, const std::vector<int64_t>& len,
                                                  const std::vector<std::vector<SeedPiece>>& seed,
                                                  int64_t token_cap, std::vector<std::vector<int>>* sizes) {
  const int m = static_cast<int>(seed.size());
  Tiers t(c, m, token_cap, true);
  if (sizes) sizes->assign(static_cast<size_t>(m), {});
  std::vector<char> seeded(len.size(), 0);
  for (int k = 0; k < m; ++k) {
    // Per size, longest first, first fit by memory into the groups opened so far.
    std::vector<SeedPiece> ps = seed[static_cast<size_t>(k)];
    std::stable_sort(ps.begin(), ps.end(), [&](const SeedPiece& a, const SeedPiece& b) {
      return a.size != b.size ? a.size > b.size : len[a.seq] > len[b.seq];
    });
    std::vector<std::pair<int, int64_t>> open_tok;  // (size, tokens)
    std::vector<double> open_ms;
    for (const SeedPiece& p : ps) {
      if (p.seq < 0 || static_cast<size_t>(p.seq) >= len.size() || seeded[p.seq]) return {};
      const int64_t l = len[p.seq];
      if (p.size != 0 && !c.holds(l, p.size)) return {};
      seeded[p.seq] = 1;
      if (p.size == 0) {  // in this micro-batch, on any group: with the rest (sorted last)
        t.put_rest(k, p.seq, l, c.least_work(l));
        continue;
      }
      size_t g = 0;
      while (g < open_tok.size() && (open_tok[g].first != p.size || open_tok[g].second + l > p.size * c.tokens_per_rank))
        ++g;
      const double ms = c.seq_ms(l, p.size);
      if (g == open_tok.size()) {
        if (t.dev[k] + p.size > c.world) return {};
        open_tok.push_back({p.size, l}), open_ms.push_back(ms);
        if (sizes) (*sizes)[static_cast<size_t>(k)].push_back(p.size);
        t.fix(k, p.seq, l, p.size, ms, p.size * ms);
      } else {  // shares an open group: no more devices, the group runs longer
        open_tok[g].second += l, open_ms[g] += ms;
        t.fix(k, p.seq, l, 0, open_ms[g], p.size * ms);
      }
    }
  }
  for (int32_t s : mb_longest_first(len))
    if (!seeded[s] && !t.add_rest(s, len[s])) return {};
  return t.mbs;
}

std::vector<std::vector<SeedPiece>> mb_seed_levels(const PlanCosts& c, const std::vector<int64_t>& len, int m,
                                                   double avg_ms, int widen, double alpha, double beta,
                                                   double share, bool widen_first) {
  const std::vector<int32_t> order = mb_longest_first(len);
  std::vector<char> used(len.size(), 0);
  std::vector<std::vector<SeedPiece>> seed;
  size_t head = 0;  // the longest piece not placed yet
  for (int k = 0; k < m; ++k) {
    while (head < order.size() && used[order[head]]) ++head;
    if (head == order.size()) break;
    int d0 = c.min_size(len[order[head]]);
    for (int w = 0; (k > 0 || widen_first) && w < widen && d0 < c.max_size(); ++w) d0 *= 2;
    const double target = c.seq_ms(len[order[head]], d0);
    if (target < beta * avg_ms) break;  // the rest is filler for any micro-batch
    std::vector<SeedPiece> level;
    struct Open {
      int size;
      int64_t tokens;
      double ms;
    };
    std::vector<Open> open;  // the level's groups, in mb_split_seeded's first-fit order
    int devices = c.world;
    for (size_t i = head; i < order.size() && (devices > 0 || share > 0); ++i) {
      const int32_t s = order[i];
      if (used[s]) continue;
      int d = 0;  // the narrowest group that runs it within the target
      for (int size : c.sizes)
        if (c.holds(len[s], size) && c.seq_ms(len[s], size) <= target * (1 + 1e-4)) {
          d = size;
          break;
        }
      if (d == 0) continue;
      if (c.seq_ms(len[s], d) < alpha * target) break;  // short beside this level
      if (d <= devices) {
        level.push_back({s, d});
        used[s] = 1;
        devices -= d;
        open.push_back({d, len[s], c.seq_ms(len[s], d)});
        continue;
      }
      // No devices left: the first group (of any size that holds it) whose memory holds it
      // too, if that group stays within (1 + share) x the target, as mb_split_seeded
      // shares groups of one size by first fit.
      if (share <= 0) continue;
      for (int size : c.sizes) {
        if (size < d) continue;
        Open* g = nullptr;
        for (Open& o : open)
          if (o.size == size && o.tokens + len[s] <= size * c.tokens_per_rank) {
            g = &o;
            break;
          }
        if (g == nullptr || g->ms + c.seq_ms(len[s], size) > (1 + share) * target) continue;
        level.push_back({s, size});
        used[s] = 1;
        g->tokens += len[s], g->ms += c.seq_ms(len[s], size);
        break;
      }
    }
    seed.push_back(std::move(level));
  }
  if (seed.empty()) return {};
  seed.resize(static_cast<size_t>(m));
  return seed;
}

MbPlan mb_plan_seeded(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<int32_t>& seqs,
                      size_t fixed, const std::vector<int>& sizes) {
  MbPlan best = mb_greedy(c, len, seqs);
  int used = 0;
  for (int d : sizes) used += d;
  std::vector<int> all = sizes;
  const std::vector<int32_t> rest(seqs.begin() + static_cast<std::ptrdiff_t>(std::min(fixed, seqs.size())), seqs.end());
  if (!rest.empty() && used < c.world) {  // the rest's own groups on the devices left
    PlanCosts left = c;
    left.world = c.world - used;
    const MbPlan r = mb_greedy(left, len, rest);
    if (r.ok)
      for (const PlanGroup& g : r.groups)
        if (!g.seqs.empty()) all.push_back(g.size);
  }
  MbPlan a = mb_assign(c, len, seqs, all);
  if (a.ok && (!best.ok || a.makespan_ms < best.makespan_ms)) best = std::move(a);
  return best;
}

std::vector<int64_t> mb_token_caps(const PlanCosts& c, int64_t tokens, int m) {
  const int64_t cap = c.tokens_per_rank * c.world;
  return {cap, std::min(cap, (tokens / std::max(1, m) + cap) / 2)};
}

std::vector<int32_t> mb_longest_first(const std::vector<int64_t>& len, std::vector<int32_t> seqs) {
  std::stable_sort(seqs.begin(), seqs.end(), [&](int32_t a, int32_t b) { return len[a] > len[b]; });
  return seqs;
}

std::vector<int32_t> mb_longest_first(const std::vector<int64_t>& len) {
  std::vector<int32_t> all(len.size());
  std::iota(all.begin(), all.end(), 0);
  return mb_longest_first(len, std::move(all));
}

std::vector<size_t> mb_slowest_first(const std::vector<MbPlan>& plans) {
  std::vector<size_t> desc(plans.size());
  std::iota(desc.begin(), desc.end(), size_t{0});
  std::stable_sort(desc.begin(), desc.end(),
                   [&](size_t a, size_t b) { return plans[a].makespan_ms > plans[b].makespan_ms; });
  return desc;
}

void mb_drop_empty(std::vector<std::vector<int32_t>>& mbs, std::vector<MbPlan>& plans) {
  for (size_t k = mbs.size(); k-- > 0;)
    if (mbs[k].empty() && mbs.size() > 1) {
      mbs.erase(mbs.begin() + static_cast<std::ptrdiff_t>(k));
      plans.erase(plans.begin() + static_cast<std::ptrdiff_t>(k));
    }
}

}  // namespace flexsp

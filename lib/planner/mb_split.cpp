// Splits of a step into micro-batches for memory-bound batches (mb_solver.h).
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
// mb_exchange: local search after planning. The splits the planner builds fill memory-bound
// micro-batches to the token; a long piece can sit beside filler that runs on its wide
// group. The pass moves one sequence of the slowest micro-batch's critical group into a
// faster micro-batch; where that one lacks memory, a set of its sequences shorter than the
// moved one, shortest first and just enough tokens, goes back the other way. Both
// micro-batches are re-planned with mb_greedy and the exchange is kept when their
// makespans' sum drops (first improvement). Every accepted plan comes from mb_greedy, so
// it fits memory and is placed; the number of re-planned pairs is capped (deterministic),
// the clock only guards.
#include <algorithm>
#include <limits>
#include <numeric>

#include "lib/planner/mb_solver.h"

namespace flexsp {

namespace {

int64_t tokens_of(const std::vector<int64_t>& len, const std::vector<int32_t>& seqs) {
  int64_t t = 0;
  for (int32_t s : seqs) t += len[static_cast<size_t>(s)];
  return t;
}

// The sequences of p's slowest group, longest first.
std::vector<int32_t> critical_seqs(const PlanCosts& c, const std::vector<int64_t>& len, const MbPlan& p) {
  const PlanGroup* crit = nullptr;
  double worst = -1;
  for (const PlanGroup& g : p.groups) {
    double t = 0;
    for (int32_t s : g.seqs) t += c.seq_ms(len[s], g.size);
    if (t > worst) worst = t, crit = &g;
  }
  std::vector<int32_t> out = crit ? crit->seqs : std::vector<int32_t>{};
  std::stable_sort(out.begin(), out.end(), [&](int32_t a, int32_t b) { return len[a] > len[b]; });
  return out;
}

// dst's sequences shorter than `longer`, shortest first, until they free `need` tokens;
// empty when they cannot.
std::vector<int32_t> give_back(const std::vector<int64_t>& len, const std::vector<int32_t>& dst,
                               int64_t longer, int64_t need) {
  std::vector<int32_t> shorter;
  for (int32_t s : dst)
    if (len[s] < longer) shorter.push_back(s);
  std::stable_sort(shorter.begin(), shorter.end(), [&](int32_t a, int32_t b) { return len[a] < len[b]; });
  std::vector<int32_t> out;
  int64_t freed = 0;
  for (size_t i = 0; i < shorter.size() && freed < need; ++i) out.push_back(shorter[i]), freed += len[shorter[i]];
  return freed >= need ? out : std::vector<int32_t>{};
}

std::vector<int32_t> without(const std::vector<int32_t>& seqs, const std::vector<int32_t>& drop) {
  std::vector<int32_t> out;
  for (int32_t s : seqs)
    if (std::find(drop.begin(), drop.end(), s) == drop.end()) out.push_back(s);
  return out;
}

}  // namespace

std::vector<std::vector<int32_t>> mb_split_tiered(const PlanCosts& c, const std::vector<int64_t>& len, int m,
                                                  int64_t token_cap, int wide_from) {
  std::vector<int32_t> order(len.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return len[a] > len[b]; });
  std::vector<std::vector<int32_t>> mbs(static_cast<size_t>(m));
  // Per micro-batch: devices in wide groups, the longest time stacked there, and the
  // rest's rank-time and tokens, which run on the devices the wide groups leave.
  std::vector<int> dev(m, 0);
  std::vector<double> floor_ms(m, 0), work(m, 0);
  std::vector<int64_t> tok(m, 0), rest_tok(m, 0);
  auto est = [&](int k, double w) { return std::max(floor_ms[k], (work[k] + w) / (c.world - dev[k])); };
  auto rest_room = [&](int k, int more) { return int64_t{c.world - dev[k] - more} * c.tokens_per_rank; };
  for (int32_t s : order) {
    const int64_t l = len[s];
    const int d = c.min_size(l);
    if (d == 0) return {};
    int best = -1;
    if (d > wide_from) {  // wide: the first micro-batch with the devices for its group
      for (int k = 0; k < m && best < 0; ++k)
        if (dev[k] + d <= c.world && tok[k] + l <= token_cap && rest_tok[k] <= rest_room(k, d)) best = k;
      if (best < 0) return {};
      dev[best] += d;
      floor_ms[best] = std::max(floor_ms[best], c.seq_ms(l, d));
    } else {
      double w = std::numeric_limits<double>::infinity();  // its least rank-time
      for (int e : c.sizes)
        if (c.holds(l, e)) w = std::min(w, e * c.seq_ms(l, e));
      double best_up = 0;
      for (int k = 0; k < m; ++k) {
        if (tok[k] + l > token_cap || rest_tok[k] + l > rest_room(k, 0)) continue;
        const double up = est(k, w) - est(k, 0);
        if (best < 0 || up < best_up - 1e-9 || (up <= best_up + 1e-9 && est(k, 0) < est(best, 0)))
          best = k, best_up = up;
      }
      if (best < 0) return {};
      work[best] += w;
      rest_tok[best] += l;
    }
    tok[best] += l;
    mbs[best].push_back(s);
  }
  return mbs;
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

int mb_exchange(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
                std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time) {
  const int64_t cap = c.tokens_per_rank * c.world;
  int tries = 0, accepted = 0;
  auto stop = [&] { return tries >= max_tries || (out_of_time && out_of_time()); };
  while (!stop()) {
    const size_t m = mbs.size();
    const std::vector<size_t> desc = mb_slowest_first(plans);
    bool improved = false;
    for (size_t si = 0; si < m && !improved && !stop(); ++si) {
      const size_t src = desc[si];
      const std::vector<int32_t> cand = critical_seqs(c, len, plans[src]);
      for (size_t ci = 0; ci < cand.size() && !improved && !stop(); ++ci) {
        const int32_t s = cand[ci];
        // Faster micro-batches first: the likeliest to absorb the sequence.
        for (size_t di = m; di-- > 0 && !improved && !stop();) {
          const size_t dst = desc[di];
          if (dst == src || plans[dst].makespan_ms >= plans[src].makespan_ms) continue;
          const int64_t need = tokens_of(len, mbs[dst]) + len[s] - cap;
          std::vector<int32_t> back;
          if (need > 0) {
            back = give_back(len, mbs[dst], len[s], need);
            if (back.empty()) continue;
          }
          std::vector<int32_t> new_src = without(mbs[src], {s});
          new_src.insert(new_src.end(), back.begin(), back.end());
          if (tokens_of(len, new_src) > cap) continue;
          std::vector<int32_t> new_dst = without(mbs[dst], back);
          new_dst.push_back(s);
          ++tries;
          MbPlan ps = mb_greedy(c, len, new_src);
          if (!ps.ok) continue;
          MbPlan pd = mb_greedy(c, len, new_dst);
          if (!pd.ok) continue;
          const double before = plans[src].makespan_ms + plans[dst].makespan_ms;
          // An emptied micro-batch is dropped below: its fixed cost is saved too.
          const double after = ps.makespan_ms + pd.makespan_ms - (new_src.empty() ? c.fixed_ms : 0);
          if (after >= before * (1 - 1e-9)) continue;
          mbs[src] = std::move(new_src), plans[src] = std::move(ps);
          mbs[dst] = std::move(new_dst), plans[dst] = std::move(pd);
          improved = true;
          ++accepted;
        }
      }
    }
    mb_drop_empty(mbs, plans);
    if (!improved) break;
  }
  return accepted;
}

}  // namespace flexsp

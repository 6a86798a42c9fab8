// mb_exchange (mb_solver.h): a local-search pass over a split. The splits the planner
// builds fill memory-bound micro-batches to the token; a long piece can sit beside filler
// that runs on its wide group. The pass moves one sequence of the slowest micro-batch's critical group into a
// faster micro-batch; where that one lacks memory, a set of its sequences shorter than the
// moved one, shortest first and just enough tokens, goes back the other way. Both
// micro-batches are re-planned with mb_greedy and the exchange is kept when their
// makespans' sum drops (first improvement). Every accepted plan comes from mb_greedy, so
// it fits memory and is placed; the number of re-planned pairs is capped (deterministic),
// the clock only guards. Its last round (any_dst) also sends into slower micro-batches and
// swaps a sequence back: the plain moves only go to faster ones, so a long piece could not
// pair with another beside the widest pieces where a shorter one sits.
#include <algorithm>

#include "lib/planner/mb/mb_solver.h"

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
  std::vector<int32_t> out = mb_longest_first(len, crit ? crit->seqs : std::vector<int32_t>{});
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

int mb_exchange(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>>& mbs,
                std::vector<MbPlan>& plans, int max_tries, const std::function<bool()>& out_of_time, bool any_dst) {
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
          if (dst == src || (!any_dst && plans[dst].makespan_ms >= plans[src].makespan_ms)) continue;
          const int64_t need = tokens_of(len, mbs[dst]) + len[s] - cap;
          std::vector<std::vector<int32_t>> backs;
          if (need > 0) {
            backs.push_back(give_back(len, mbs[dst], len[s], need));
            if (backs.back().empty()) continue;
          } else {
            backs.push_back({});
          }
          if (any_dst) {  // swaps: one of dst's longest sequences shorter than s goes back
            std::vector<int32_t> shorter;
            for (int32_t t : mbs[dst])
              if (len[t] < len[s] && 2 * len[t] >= len[s]) shorter.push_back(t);
            shorter = mb_longest_first(len, std::move(shorter));
            for (size_t i = 0; i < shorter.size() && i < 2; ++i)
              if (tokens_of(len, mbs[dst]) + len[s] - len[shorter[i]] <= cap) backs.push_back({shorter[i]});
          }
          for (const std::vector<int32_t>& back : backs) {
            if (improved || stop()) break;
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
    }
    mb_drop_empty(mbs, plans);
    if (!improved) break;
  }
  return accepted;
}

}  // namespace flexsp

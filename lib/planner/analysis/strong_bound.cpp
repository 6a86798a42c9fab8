// The strong lower bound's MILP (strong_bound.h for the model and why each row is valid):
// the length classes, the group patterns, one run's columns and rows, the incumbent read
// back as real micro-batches, and the runs over micro-batch counts. The solver behind a
// run is strong_milp.h.
#include "lib/planner/analysis/strong_bound.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "lib/planner/analysis/lower_bound.h"
#include "lib/planner/analysis/strong_milp.h"
#include "lib/planner/mb/mb_solver.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct LenClass {
  int64_t lo = 0, hi = 0, count = 0, tokens = 0;
  bool is_long = false;
  std::vector<int> sizes;     // indices into c.sizes that hold every member
  std::vector<double> t;      // long: seq time (s) of lo on each size (by size index)
  std::vector<double> rate;   // short: least d t(s,d)/s over members (s per token), by size index
  std::vector<int32_t> members;  // indices into the batch, longest first
};

std::vector<LenClass> make_classes(const PlanCosts& c, const std::vector<int64_t>& len, double long_ms,
                                   const StrongBoundOptions& opt) {
  const std::vector<int32_t> order = mb_longest_first(len);
  const int nd = static_cast<int>(c.sizes.size());
  auto mask = [&](int64_t s) {
    std::vector<int> m;
    for (int i = 0; i < nd; ++i)
      if (c.holds(s, c.sizes[i])) m.push_back(i);
    return m;
  };
  std::vector<LenClass> out;
  for (int32_t idx : order) {
    const int64_t s = len[idx];
    const bool is_long = c.least_ms(s) >= long_ms;
    const std::vector<int> m = mask(s);
    FLEXSP_CHECK(!m.empty(), "strong bound: no group holds a sequence of {} tokens", s);
    LenClass* cl = out.empty() ? nullptr : &out.back();
    const double width = is_long ? opt.long_width : opt.short_width;
    if (!cl || cl->is_long != is_long || cl->sizes != m || s < cl->hi / (1 + width)) {
      out.push_back({});
      cl = &out.back();
      cl->hi = s, cl->is_long = is_long, cl->sizes = m;
      cl->rate.assign(nd, kInf);
    }
    cl->lo = s, cl->count++, cl->tokens += s, cl->members.push_back(idx);
    for (int i : m) cl->rate[i] = std::min(cl->rate[i], c.sizes[i] * c.seq_ms(s, c.sizes[i]) / 1000.0 / s);
  }
  for (LenClass& cl : out) {
    cl.t.assign(nd, kInf);
    for (int i : cl.sizes) cl.t[i] = c.seq_ms(cl.lo, c.sizes[i]) / 1000.0;
  }
  return out;
}

// The incumbent's split as micro-batches of real sequences: per class, the long pieces by
// count and the short ones longest first onto the micro-batch with most of its token quota
// left; the pool's share is dealt over its q micro-batches the same way (micro-batches
// left empty are kept).
std::vector<std::vector<int32_t>> incumbent_split(const std::vector<LenClass>& cls, const std::vector<int64_t>& len,
                                                  const std::vector<std::vector<double>>& share, int q,
                                                  int64_t mb_tokens) {
  const int nk = static_cast<int>(share.empty() ? 0 : share[0].size());
  const int explicit_k = q > 0 ? nk - 1 : nk;
  std::vector<std::vector<int32_t>> mbs(explicit_k + std::max(q, 0));
  std::vector<int64_t> room(mbs.size(), mb_tokens);  // memory left (world E)
  for (size_t b = 0; b < cls.size(); ++b) {
    std::vector<double> left;  // quota per micro-batch, tokens
    for (int k = 0; k < explicit_k; ++k) left.push_back(share[b][k]);
    for (int j = 0; j < q; ++j) left.push_back(share[b][nk - 1] / q);
    for (int32_t idx : cls[b].members) {
      int best = -1;  // most quota left among those with room (long pieces: by quota only)
      for (size_t k = 0; k < mbs.size(); ++k)
        if ((room[k] >= len[idx] || cls[b].is_long) && (best < 0 || left[k] > left[best])) best = static_cast<int>(k);
      if (best < 0) best = static_cast<int>(std::max_element(room.begin(), room.end()) - room.begin());
      mbs[best].push_back(idx);
      left[best] -= static_cast<double>(len[idx]);
      room[best] -= len[idx];
    }
  }
  return mbs;  // empty ones included: aligned with incumbent_long_pieces
}

// The incumbent's long pieces per micro-batch and size, real sequences longest first by
// count(b, k, i) (rounded); the pool's (k = last, q > 0) round robin over its q
// micro-batches (as incumbent_split's, empty ones kept).
template <class Count>
std::vector<std::vector<SeedPiece>> incumbent_long_pieces(const PlanCosts& c, const std::vector<LenClass>& cls,
                                                          const std::vector<std::vector<double>>& share, int q,
                                                          Count count) {
  const int nk = static_cast<int>(share.empty() ? 0 : share[0].size());
  const int explicit_k = q > 0 ? nk - 1 : nk;
  std::vector<std::vector<SeedPiece>> mbs(explicit_k + std::max(q, 0));
  for (size_t b = 0; b < cls.size(); ++b) {
    if (!cls[b].is_long) continue;
    size_t next = 0, rr = 0;
    for (int k = 0; k < nk; ++k)
      for (int i = 0; i < static_cast<int>(c.sizes.size()); ++i)
        for (int j = count(b, k, i); j > 0 && next < cls[b].members.size(); --j) {
          const size_t mb = k < explicit_k ? static_cast<size_t>(k) : explicit_k + rr++ % static_cast<size_t>(q);
          mbs[mb].push_back({cls[b].members[next++], c.sizes[i]});
        }
  }
  return mbs;
}

// The sets of long pieces one group of c.sizes[i] devices can hold within its memory and
// a makespan of U s (at most count_c of class c): a group's "pattern". Empty when there
// are more than max_patterns (the per-size rows then stand alone).
struct Pattern {
  std::vector<std::pair<int, int>> pieces;  // (class, how many)
  double t = 0;                             // s
};

std::vector<Pattern> group_patterns(const PlanCosts& c, const std::vector<LenClass>& cls, int i, double U,
                                    int max_patterns) {
  std::vector<int> longs;
  for (size_t b = 0; b < cls.size(); ++b)
    if (cls[b].is_long && std::count(cls[b].sizes.begin(), cls[b].sizes.end(), i)) longs.push_back(static_cast<int>(b));
  const double cap = static_cast<double>(c.tokens_per_rank) * c.sizes[i];
  std::vector<Pattern> out;
  Pattern cur;
  bool too_many = false;
  std::function<void(size_t, double)> walk = [&](size_t from, double tok) {
    if (too_many) return;
    if (!cur.pieces.empty()) {
      if (static_cast<int>(out.size()) >= max_patterns) { too_many = true; return; }
      out.push_back(cur);
    }
    for (size_t a = from; a < longs.size(); ++a) {
      const LenClass& cl = cls[longs[a]];
      const int have = cur.pieces.empty() || cur.pieces.back().first != longs[a] ? 0 : cur.pieces.back().second;
      if (have >= cl.count || tok + cl.lo > cap || cur.t + cl.t[i] > U) continue;
      if (have) cur.pieces.back().second++;
      else cur.pieces.push_back({longs[a], 1});
      cur.t += cl.t[i];
      walk(a, tok + cl.lo);
      cur.t -= cl.t[i];
      if (have) cur.pieces.back().second--;
      else cur.pieces.pop_back();
    }
  };
  walk(0, 0);
  if (too_many) out.clear();
  return out;
}

// One run's MILP as it is built: K explicit micro-batches, plus a pool when pooled, with
// makespans summing to at most U s. Columns and rows go in the order of strong_bound.h's
// model, micro-batch by micro-batch (CBC's path depends on it).
struct StrongRun {
  using Terms = StrongMilp::Terms;
  using Grid = std::vector<std::vector<std::vector<int>>>;  // [class][micro-batch][size] -> column
  const PlanCosts& c;
  const std::vector<LenClass>& cls;
  const std::vector<bool>& coupled;  // sizes a long class uses
  int K = 0, nd = 0, nk = 0, qmax = 0;
  bool pooled = false;
  double U = 0, E = 0, W = 0, fixed = 0;
  StrongMilp m;
  std::vector<int> T;                // makespan of micro-batch k, s
  std::vector<std::vector<int>> n;   // groups of each size in micro-batch k
  Grid x, u;  // x: long: count; short: tokens / E; u: binaries of long classes
  int q = -1;                        // the pool's micro-batches
  std::vector<int64_t> first;        // class b's first long piece
  std::vector<std::vector<Pattern>> patterns;

  StrongRun(const PlanCosts& costs, const std::vector<LenClass>& classes, const std::vector<bool>& coupled_sizes,
            int k_count, bool with_pool, double u_s, double span_lb_s, int nseq, int max_patterns)
      : c(costs), cls(classes), coupled(coupled_sizes), K(k_count), nd(static_cast<int>(costs.sizes.size())),
        nk(k_count + (with_pool ? 1 : 0)), pooled(with_pool), U(u_s), E(static_cast<double>(costs.tokens_per_rank)),
        W(costs.world), fixed(costs.fixed_ms / 1000.0), T(nk), n(nk, std::vector<int>(nd, -1)),
        x(grid()), u(grid()), first(classes.size(), 0), patterns(nd) {
    // At most one micro-batch per sequence in the pool, and no more than U leaves room for.
    qmax = !pooled ? 0
           : fixed <= 0 ? nseq
                        : static_cast<int>(std::min<double>(nseq, std::floor((U - span_lb_s) / fixed)));
    q = pooled ? m.col(0, qmax, true, fixed) : -1;
    // Symmetry: number the long pieces longest first and the explicit micro-batches by the
    // first piece they hold (those without one last; with a pool, the first K explicit):
    // piece j sits in micro-batch <= j (or the pool).
    for (size_t b = 0, j = 0; b < cls.size(); ++b)
      if (cls[b].is_long) first[b] = static_cast<int64_t>(j), j += cls[b].count;
    if (max_patterns > 0)
      for (int i = 0; i < nd; ++i)
        if (coupled[i]) patterns[i] = group_patterns(c, cls, i, U, max_patterns);
  }
  Grid grid() const {
    return Grid(cls.size(), std::vector<std::vector<int>>(nk, std::vector<int>(nd, -1)));
  }
  bool is_pool(int k) const { return pooled && k == K; }
  double most_groups(int k, int i) const { return (is_pool(k) ? qmax : 1) * (c.world / c.sizes[i]); }

  // Micro-batch k's columns, its groups within the world, and per size its rows.
  void add_micro_batch(int k) {
    const bool pool = is_pool(k);
    T[k] = m.col(0, U, false, 1.0);
    for (int i = 0; i < nd; ++i) n[k][i] = m.col(0, most_groups(k, i), true);
    for (size_t b = 0; b < cls.size(); ++b)
      for (int i : cls[b].sizes) {
        if (cls[b].is_long) {
          x[b][k][i] = m.col(0, static_cast<double>(cls[b].count), true);
          if (cls[b].t[i] <= U && (pool || k <= first[b] + cls[b].count - 1)) u[b][k][i] = m.col(0, 1, true);
          else m.row({{x[b][k][i], 1}}, 0, 0);  // too slow for U, or symmetry
        } else {
          x[b][k][i] = m.col(0, cls[b].tokens / E, false);
        }
      }
    Terms g;  // groups fit the world (the pool: q worlds)
    for (int i = 0; i < nd; ++i) g.push_back({n[k][i], c.sizes[i]});
    if (pool) g.push_back({q, -W});
    m.row(g, -kInf, pool ? 0 : W);
    Terms work{{T[k], -W}};
    for (int i = 0; i < nd; ++i) add_size_rows(k, i, work);
    m.row(work, -kInf, 0);
    // One piece runs on one size: a piece alone in its class sets T_k >= its time there.
    for (size_t b = 0; b < cls.size(); ++b)
      if (cls[b].is_long && cls[b].count == 1) {
        Terms single{{T[k], -1}};
        for (int j = 0; j < nd; ++j)
          if (x[b][k][j] >= 0) single.push_back({x[b][k][j], cls[b].t[j]});
        m.row(single, -kInf, 0);
      }
  }

  // Size i in micro-batch k: memory, the long pieces' times, the patterns, time on the
  // groups (coupled sizes), and the rows on pairs of long pieces; work gets its terms.
  void add_size_rows(int k, int i, Terms& work) {
    const double d = c.sizes[i];
    Terms mem{{n[k][i], -d}}, time;
    for (size_t b = 0; b < cls.size(); ++b) {
      const int j = x[b][k][i];
      if (j < 0) continue;
      const LenClass& cl = cls[b];
      const double tok = cl.is_long ? cl.lo / E : 1.0;           // per unit of x
      const double t = cl.is_long ? cl.t[i] : cl.rate[i] * E / d;  // s per unit of x on one group
      mem.push_back({j, tok}), time.push_back({j, t}), work.push_back({j, d * t});
      if (cl.is_long && u[b][k][i] >= 0) {
        m.row({{j, 1}, {u[b][k][i], -static_cast<double>(cl.count)}}, -kInf, 0);
        m.row({{u[b][k][i], cl.t[i]}, {T[k], -1}}, -kInf, 0);
      }
    }
    m.row(mem, -kInf, 0);
    if (!patterns[i].empty()) add_pattern_rows(k, i);
    if (coupled[i] && !is_pool(k)) add_group_time_rows(k, i, time);
    for (size_t b = 0; b < cls.size(); ++b)
      if (cls[b].is_long && x[b][k][i] >= 0) add_long_rows(k, i, b);
  }

  // Patterns: each d-group holds one set of long pieces that fits its memory; the
  // micro-batch lasts at least the time of every set it uses.
  void add_pattern_rows(int k, int i) {
    const double most = most_groups(k, i);
    Terms used{{n[k][i], -1}};
    std::vector<Terms> count(cls.size());
    for (const Pattern& p : patterns[i]) {
      const int y = m.col(0, most, true), on = m.col(0, 1, true);
      used.push_back({y, 1});
      m.row({{y, 1}, {on, -most}}, -kInf, 0);
      m.row({{on, p.t}, {T[k], -1}}, -kInf, 0);
      for (const auto& [b, cnt] : p.pieces) count[b].push_back({y, cnt});
    }
    m.row(used, -kInf, 0);
    for (size_t b = 0; b < cls.size(); ++b)
      if (cls[b].is_long && x[b][k][i] >= 0) {
        count[b].push_back({x[b][k][i], -1});
        m.row(count[b], 0, 0);
      }
  }

  // Time on d-groups <= n T_k, with n in binary (z bits, w = z T_k).
  void add_group_time_rows(int k, int i, Terms time) {
    const int bits = static_cast<int>(std::floor(std::log2(c.world / c.sizes[i]))) + 1;
    Terms nsum{{n[k][i], -1}};
    for (int bit = 0; bit < bits; ++bit) {
      const int z = m.col(0, 1, true), w = m.col(0, U, false);
      nsum.push_back({z, std::ldexp(1.0, bit)});
      time.push_back({w, -std::ldexp(1.0, bit)});
      m.row({{w, 1}, {T[k], -1}}, -kInf, 0);
      m.row({{w, 1}, {z, -U}}, -kInf, 0);
    }
    m.row(nsum, 0, 0);
    m.row(time, -kInf, 0);
  }

  // Long class b on size i: pieces of time >= tau beyond the d-groups share one (T >= 2
  // tau); a d-group holds at most floor(d E / L) pieces of L tokens or more; bin packing of
  // the groups' memory (a dual feasible function, lambda = lo / (d E) <= 1/2: per group,
  // the pieces over 1 - lambda of it count 1, those between lambda and 1 - lambda their
  // share, shorter ones 0; they add up to <= 1).
  void add_long_rows(int k, int i, size_t b) {
    const double tau = cls[b].t[i];
    Terms over{{n[k][i], -1}}, cap;
    int64_t total = 0;
    for (size_t b2 = 0; b2 < cls.size(); ++b2)
      if (cls[b2].is_long && x[b2][k][i] >= 0) {
        if (cls[b2].t[i] >= tau) over.push_back({x[b2][k][i], 1}), total += cls[b2].count;
        if (cls[b2].lo >= cls[b].lo) cap.push_back({x[b2][k][i], 1});
      }
    if (2 * tau <= U) {
      const int v = m.col(0, 1, true);
      over.push_back({v, -static_cast<double>(total)});
      m.row(over, -kInf, 0);
      m.row({{v, 2 * tau}, {T[k], -1}}, -kInf, 0);
    } else {
      m.row(over, -kInf, 0);  // no two such pieces fit one group within U
    }
    const int64_t f = c.tokens_per_rank * c.sizes[i] / cls[b].lo;
    const bool next_same = b + 1 < cls.size() && cls[b + 1].is_long && x[b + 1][k][i] >= 0 &&
                           c.tokens_per_rank * c.sizes[i] / cls[b + 1].lo == f;
    if (f <= 3 && !next_same) {
      cap.push_back({n[k][i], -static_cast<double>(f)});
      m.row(cap, -kInf, 0);
    }
    const double C = E * c.sizes[i], lam = cls[b].lo / C;
    if (lam <= 0.5 && lam > 0.05) {
      Terms dff{{n[k][i], -1}};
      for (size_t b2 = 0; b2 < cls.size(); ++b2) {
        if (!cls[b2].is_long || x[b2][k][i] < 0) continue;
        const double s2 = cls[b2].lo / C;
        if (s2 >= lam) dff.push_back({x[b2][k][i], s2 > 1 - lam ? 1.0 : s2});
      }
      m.row(dff, -kInf, 0);
    }
  }

  // Every sequence placed once; the makespans' sum between the floor and U.
  void add_batch_rows(double span_lb_s) {
    for (size_t b = 0; b < cls.size(); ++b) {
      Terms all;
      for (int k = 0; k < nk; ++k)
        for (int i = 0; i < nd; ++i)
          if (x[b][k][i] >= 0) all.push_back({x[b][k][i], 1});
      const double total = cls[b].is_long ? static_cast<double>(cls[b].count) : cls[b].tokens / E;
      m.row(all, total, total);
    }
    Terms sum;
    for (int k = 0; k < nk; ++k) sum.push_back({T[k], 1});
    m.row(sum, span_lb_s, kInf);
    if (pooled) sum.push_back({q, fixed});
    m.row(sum, -kInf, U);
  }

  // The incumbent's split (its micro-batches planned greedily, then mb_compose), its long
  // pieces and the rest per micro-batch, and each micro-batch's makespan and groups.
  void read_incumbent(const std::vector<int64_t>& len, const std::vector<double>& xs, StrongBoundRun& run) const {
    std::vector<std::vector<double>> share(cls.size(), std::vector<double>(nk, 0));
    for (size_t b = 0; b < cls.size(); ++b)
      for (int k = 0; k < nk; ++k)
        for (int i = 0; i < nd; ++i)
          if (x[b][k][i] >= 0) share[b][k] += xs[x[b][k][i]] * (cls[b].is_long ? cls[b].lo : E);
    const int qn = pooled ? static_cast<int>(std::lround(xs[q])) : 0;
    const auto split = incumbent_split(cls, len, share, qn, c.tokens_per_rank * c.world);
    run.split_plan_ms = split_plan_ms(len, split);
    const auto pieces = incumbent_long_pieces(c, cls, share, qn, [&](size_t b, int k, int i) {
      return x[b][k][i] >= 0 ? static_cast<int>(std::lround(xs[x[b][k][i]])) : 0;
    });
    std::vector<char> is_long(len.size(), 0);
    for (const LenClass& cl : cls)
      for (int32_t s : cl.members) is_long[s] = cl.is_long;
    for (size_t k = 0; k < split.size(); ++k) {
      std::vector<int32_t> fluid;
      for (int32_t s : split[k])
        if (!is_long[s]) fluid.push_back(s);
      if (pieces[k].empty() && fluid.empty()) continue;
      run.long_pieces.push_back(pieces[k]);
      run.fluid_split.push_back(std::move(fluid));
    }
    for (int k = 0; k < nk; ++k) {
      run.makespans_ms.push_back(1000.0 * xs[T[k]]);
      std::string desc;
      for (int i = 0; i < nd; ++i) {
        if (xs[n[k][i]] < 0.5) continue;
        desc += fmt::format(" d{}x{}", c.sizes[i], std::lround(xs[n[k][i]]));
        for (size_t b = 0; b < cls.size(); ++b)
          if (cls[b].is_long && x[b][k][i] >= 0 && xs[x[b][k][i]] > 0.5)
            desc += fmt::format(" {}x{}", cls[b].lo, std::lround(xs[x[b][k][i]]));
      }
      run.incumbent_groups.push_back(desc);
    }
  }

  // The split's time: each micro-batch planned greedily, then by mb_compose where it is
  // faster; infinite where one does not fit.
  double split_plan_ms(const std::vector<int64_t>& len, const std::vector<std::vector<int32_t>>& split) const {
    double t = 0;
    for (const auto& seqs : split) {
      if (seqs.empty()) continue;
      const MbPlan p = mb_greedy(c, len, seqs);
      if (!p.ok) return kInf;
      MbPlan better;
      ComposeOptions co;
      co.time_limit_ms = 2000;
      const bool improved = mb_compose(c, len, seqs, p, co, &better) == ComposeStatus::improved;
      t += c.fixed_ms + (improved ? better.makespan_ms : p.makespan_ms);
    }
    return t;
  }
};

}  // namespace

double plan_sum_ms(const PlanCosts& c, const Plan& p, const std::vector<int64_t>& len) {
  double t = 0;
  for (const PlanMicroBatch& mb : p.micro_batches) t += c.fixed_ms + mb_makespan(c, len, mb.groups);
  return t;
}

StrongBound plan_strong_lower_bound(const PlanCosts& c, const std::vector<int64_t>& len, double upper_sum_ms,
                                    const StrongBoundOptions& opt) {
  FLEXSP_CHECK(upper_sum_ms > 0, "strong bound: the upper bound must be positive, got {}", upper_sum_ms);
  StrongBound out;
  const MemoryBound mb = plan_memory_lower_bound(c, len);
  const double span_lb = std::max(mb.staircase_ms, mb.work_ms);  // makespans' sum, ms
  const int m_star = mb.micro_batches;
  int64_t tokens = 0;
  for (int64_t l : len) tokens += l;
  const int nseq = static_cast<int>(len.size());
  out.memory_ms = mb.ms;
  out.sum_ms = m_star * c.fixed_ms + span_lb;  // the floor (the memory-aware bound's sum)
  out.ms = c.step_ms(out.sum_ms, nseq, tokens);
  if (len.empty()) return out;

  const std::vector<LenClass> cls = make_classes(c, len, opt.long_fraction * span_lb / m_star, opt);
  for (const LenClass& cl : cls) {
    (cl.is_long ? out.long_classes : out.short_classes)++;
    if (cl.is_long) out.long_sequences += static_cast<int>(cl.count);
  }
  std::vector<bool> coupled(c.sizes.size(), false);  // sizes a long class uses
  for (const LenClass& cl : cls)
    if (cl.is_long)
      for (int i : cl.sizes) coupled[i] = true;

  const double fixed = c.fixed_ms / 1000.0;
  const int k_last = m_star + std::max(0, opt.explicit_extra);
  const double per_run_ms = opt.time_limit_ms / (k_last - m_star + 1);
  double best = kInf;
  bool proven = true;
  for (int K = m_star; K <= k_last; ++K) {
    const bool pooled = K == k_last;
    const double U = (upper_sum_ms / 1000.0 - K * fixed) * (1 + 1e-9) + 1e-9;  // makespans' sum, s
    StrongBoundRun run;
    run.micro_batches = K, run.pooled = pooled;
    if (U < span_lb / 1000.0) {  // no plan of K micro-batches or more beats the given one
      run.status = "infeasible", run.bound_ms = run.incumbent_ms = kInf;
      out.runs.push_back(run);
      continue;
    }
    StrongRun r(c, cls, coupled, K, pooled, U, span_lb / 1000.0, nseq, opt.max_patterns);
    for (int k = 0; k < r.nk; ++k) r.add_micro_batch(k);
    r.add_batch_rows(span_lb / 1000.0);
    std::vector<double> xs;
    const StrongMilpResult solved = r.m.solve(per_run_ms, &xs);
    run.status = solved.status, run.bound_ms = solved.bound_ms, run.incumbent_ms = solved.incumbent_ms;
    run.solve_ms = solved.solve_ms;
    if (!xs.empty()) r.read_incumbent(len, xs, run);
    run.bound_ms += K * c.fixed_ms, run.incumbent_ms += K * c.fixed_ms;
    if (run.status != "optimal" && run.status != "infeasible") proven = false;
    out.runs.push_back(run);
    best = std::min(best, run.bound_ms);
  }
  // Every run infeasible: no plan beats the given one, which is then the bound.
  if (!std::isfinite(best)) best = upper_sum_ms;
  out.proven = proven;
  out.sum_ms = std::max(out.sum_ms, best);
  out.ms = c.step_ms(out.sum_ms, nseq, tokens);
  return out;
}

}  // namespace flexsp

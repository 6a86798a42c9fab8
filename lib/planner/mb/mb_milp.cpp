// The micro-batch MILP on CBC (see mb_solver.h for the model). Built through CbcMain1 so
// CBC's default cuts and heuristics apply (preprocessing off: CglPreProcess::postProcess
// crashes in Debian's CBC 2.10 when the time limit stops it); the greedy plan goes in as a
// named MIP start. The MILP sees padded bucket lengths, so its counts are turned back
// into sequences (longest first onto the least-loaded slot with quota for that bucket)
// and the real makespan decides against the greedy plan in the caller.
#include <coin/CbcModel.hpp>
#include <coin/CbcSolver.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/CoinPackedVector.hpp>
#include <coin/OsiClpSolverInterface.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <string>

#include "lib/planner/mb/mb_solver.h"
#include "lib/planner/mb/partition.h"
#include "lib/util/error.h"

namespace flexsp {

const char* milp_status_name(MilpStatus s) {
  switch (s) {
    case MilpStatus::optimal: return "optimal";
    case MilpStatus::node_limit: return "node_limit";
    case MilpStatus::timed_out: return "timed_out";
    case MilpStatus::too_large: return "too_large";
    case MilpStatus::failed: return "failed";
  }
  return "?";
}

namespace {

// The micro-batch's sequences in at most max_buckets buckets over their ascending
// lengths (partition.h), each bucket counted at its longest length.
struct Buckets {
  std::vector<int32_t> asc;   // the sequences, ascending
  std::vector<int> ends;      // bucket b holds asc[ends[b-1], ends[b])
  int nb = 0;
  std::vector<int64_t> blen;  // the bucket's (padded) length
  std::vector<int> bcount;
  std::map<int32_t, int> bucket_of;  // sequence -> bucket
};

Buckets make_buckets(const std::vector<int64_t>& len, const std::vector<int32_t>& seqs, int max_buckets) {
  Buckets k;
  k.asc = seqs;
  std::stable_sort(k.asc.begin(), k.asc.end(), [&](int32_t a, int32_t b) { return len[a] < len[b]; });
  std::vector<int64_t> sorted(k.asc.size());
  for (size_t i = 0; i < k.asc.size(); ++i) sorted[i] = len[k.asc[i]];
  k.ends = bucket_lengths(sorted, max_buckets);
  k.nb = static_cast<int>(k.ends.size());
  k.blen.resize(k.nb);
  k.bcount.resize(k.nb);
  for (int b = 0, s = 0; b < k.nb; s = k.ends[b], ++b) {
    k.blen[b] = sorted[k.ends[b] - 1];
    k.bcount[b] = k.ends[b] - s;
    for (int i = s; i < k.ends[b]; ++i) k.bucket_of[k.asc[i]] = b;
  }
  return k;
}

struct Slot {
  int d = 1, j = 0;
  int ycol = -1;
  std::vector<int> xcol;  // per bucket; -1 where the bucket does not fit
};

// The model's columns (C, then per slot y and its bucket counts x) and rows.
struct SlotModel {
  std::vector<Slot> slots;
  std::vector<double> lo{0}, hi{COIN_DBL_MAX}, obj{1};
  std::vector<std::string> names{"C"};
  std::vector<char> integer{0};
  CoinPackedMatrix rows{false, 0, 0};
  std::vector<double> rlo, rhi;
  int ncols() const { return static_cast<int>(lo.size()); }
  int add_col(double l, double h, const std::string& name) {
    lo.push_back(l), hi.push_back(h), obj.push_back(0), names.push_back(name), integer.push_back(1);
    return ncols() - 1;
  }
  void add_row(const CoinPackedVector& v, double l, double h) {
    rows.appendRow(v);
    rlo.push_back(l), rhi.push_back(h);
  }
};

// The slots (slot_counts[i] of size c.sizes[i]) and their columns; the rows: every sequence placed, each used slot within memory and C, slots of
// a size used in order and heavier first (symmetry), the sizes of the used slots within
// the world.
SlotModel build_model(const PlanCosts& c, const Buckets& k, const std::vector<int>& slot_counts) {
  SlotModel m;
  for (size_t i = 0; i < c.sizes.size(); ++i)
    for (int j = 0, d = c.sizes[i]; j < slot_counts[i]; ++j) {
      Slot s{d, j, m.add_col(0, 1, fmt::format("y_{}_{}", d, j)), std::vector<int>(k.nb, -1)};
      for (int b = 0; b < k.nb; ++b)
        if (c.holds(k.blen[b], d)) s.xcol[b] = m.add_col(0, k.bcount[b], fmt::format("x_{}_{}_{}", b, d, j));
      m.slots.push_back(std::move(s));
    }
  m.rows.setDimensions(0, m.ncols());
  for (int b = 0; b < k.nb; ++b) {  // every sequence placed
    CoinPackedVector v;
    for (const Slot& s : m.slots)
      if (s.xcol[b] >= 0) v.insert(s.xcol[b], 1.0);
    m.add_row(v, k.bcount[b], k.bcount[b]);
  }
  CoinPackedVector ranks;
  for (size_t i = 0; i < m.slots.size(); ++i) {
    const Slot& s = m.slots[i];
    CoinPackedVector mem, time;
    for (int b = 0; b < k.nb; ++b)
      if (s.xcol[b] >= 0) {
        mem.insert(s.xcol[b], static_cast<double>(k.blen[b]));
        time.insert(s.xcol[b], c.seq_ms(k.blen[b], s.d));
      }
    mem.insert(s.ycol, -static_cast<double>(c.tokens_per_rank) * s.d);
    m.add_row(mem, -COIN_DBL_MAX, 0);
    time.insert(0, -1.0);
    m.add_row(time, -COIN_DBL_MAX, 0);
    ranks.insert(s.ycol, s.d);
    if (i > 0 && m.slots[i - 1].d == s.d) {  // symmetry: used slots first, heavier first
      const Slot& prev = m.slots[i - 1];
      CoinPackedVector order;
      order.insert(s.ycol, 1.0);
      order.insert(prev.ycol, -1.0);
      m.add_row(order, -COIN_DBL_MAX, 0);
      CoinPackedVector heavier;
      for (int b = 0; b < k.nb; ++b)
        if (s.xcol[b] >= 0) {
          heavier.insert(s.xcol[b], static_cast<double>(k.blen[b]));
          heavier.insert(prev.xcol[b], -static_cast<double>(k.blen[b]));
        }
      m.add_row(heavier, -COIN_DBL_MAX, 0);
    }
  }
  m.add_row(ranks, -COIN_DBL_MAX, c.world);
  return m;
}

// The warm start: the greedy groups per size, heaviest (padded tokens) first; all zero
// (none) where the warm plan is not ok or does not fit the slots.
std::vector<double> warm_start(const PlanCosts& c, const Buckets& k, const SlotModel& m, const MbPlan& warm) {
  std::vector<double> start(m.ncols(), 0.0);
  std::map<int, std::vector<std::pair<int64_t, const PlanGroup*>>> per_d;
  for (const PlanGroup& g : warm.groups) {
    if (g.seqs.empty()) continue;
    int64_t padded = 0;
    for (int32_t q : g.seqs) padded += k.blen[k.bucket_of.at(q)];
    per_d[g.size].push_back({padded, &g});
  }
  double cmax = 0;
  bool fits = true;
  for (auto& [d, list] : per_d) {
    std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    int j = 0;
    for (const auto& [padded, g] : list) {
      auto it = std::find_if(m.slots.begin(), m.slots.end(),
                             [&, dd = d](const Slot& s) { return s.d == dd && s.j == j; });
      if (it == m.slots.end()) {
        fits = false;
        break;
      }
      start[it->ycol] = 1;
      double t = 0;
      for (int32_t q : g->seqs) {
        const int b = k.bucket_of.at(q);
        if (it->xcol[b] < 0) {
          fits = false;
          break;
        }
        start[it->xcol[b]] += 1;
        t += c.seq_ms(k.blen[b], d);
      }
      cmax = std::max(cmax, t);
      ++j;
    }
  }
  start[0] = cmax;
  if (!fits || !warm.ok) std::fill(start.begin(), start.end(), 0.0);
  return start;
}

// CBC on the model from the warm start (if any), one thread, fixed seeds, under the node
// and time limits; x gets its best solution (empty: none).
MilpStatus solve(const SlotModel& m, const std::vector<double>& start, const MilpOptions& opt,
                 std::vector<double>* x) {
  OsiClpSolverInterface solver;
  solver.loadProblem(m.rows, m.lo.data(), m.hi.data(), m.obj.data(), m.rlo.data(), m.rhi.data());
  for (int i = 0; i < m.ncols(); ++i) {
    if (m.integer[i]) solver.setInteger(i);
    solver.setColName(i, m.names[i]);
  }
  solver.messageHandler()->setLogLevel(0);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  if (start[0] > 0) {
    std::vector<std::pair<std::string, double>> mip;
    for (int i = 0; i < m.ncols(); ++i) mip.emplace_back(m.names[i], start[i]);
    model.setMIPStart(mip);
  }
  CbcMain0(model);
  model.setLogLevel(0);
  const double limit_s = std::max(opt.time_limit_ms, 1.0) / 1000.0;
  const std::string sec = fmt::format("{}", limit_s), nodes = fmt::format("{}", opt.max_nodes);
  const char* argv[] = {"flexsp", "-log", "0", "-slog", "0", "-timeMode", "elapsed",
                        "-sec", sec.c_str(), "-maxNodes", nodes.c_str(), "-threads", "0",
                        "-preprocess", "off", "-randomCbcSeed", "1", "-randomSeed", "1", "-solve", "-quit"};
  const auto t0 = std::chrono::steady_clock::now();
  CbcMain1(static_cast<int>(sizeof argv / sizeof argv[0]), argv, model);
  const double took_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  MilpStatus status = MilpStatus::failed;
  if (model.isProvenOptimal()) status = MilpStatus::optimal;
  else if (model.isSecondsLimitReached() || took_ms >= 0.95 * opt.time_limit_ms)
    status = MilpStatus::timed_out;  // its incumbent is CBC's best within the limit
  else if (model.isNodeLimitReached()) status = MilpStatus::node_limit;
  x->clear();
  if (model.bestSolution() == nullptr || model.getMinimizationObjValue() >= 1e50)
    return status == MilpStatus::optimal ? MilpStatus::failed : status;
  x->assign(model.bestSolution(), model.bestSolution() + m.ncols());
  return status;
}

// Counts -> sequences: each bucket, longest first, onto the least-loaded used slot with
// quota for it; then placed and checked against memory with the real lengths. Not ok
// where the counts do not add up or do not fit (the solution is not trusted).
MbPlan assign_counts(const PlanCosts& c, const std::vector<int64_t>& len, const Buckets& k,
                     const std::vector<Slot>& slots, const std::vector<double>& x) {
  std::vector<PlanGroup> groups;
  std::vector<double> load;
  std::vector<std::vector<int>> quota;  // [group][bucket]
  for (const Slot& s : slots) {
    if (std::lround(x[s.ycol]) != 1) continue;
    groups.push_back({-1, s.d, {}});
    load.push_back(0);
    std::vector<int> q(k.nb, 0);
    for (int b = 0; b < k.nb; ++b) q[b] = s.xcol[b] >= 0 ? static_cast<int>(std::lround(x[s.xcol[b]])) : 0;
    quota.push_back(std::move(q));
  }
  for (int b = k.nb - 1, s = 0; b >= 0; --b) {
    s = b == 0 ? 0 : k.ends[b - 1];
    for (int i = k.ends[b] - 1; i >= s; --i) {
      const int32_t q = k.asc[i];
      int best = -1;
      for (size_t g = 0; g < groups.size(); ++g)
        if (quota[g][b] > 0 && (best < 0 || load[g] < load[best])) best = static_cast<int>(g);
      if (best < 0) return {};
      quota[best][b]--;
      groups[best].seqs.push_back(q);
      load[best] += c.seq_ms(len[q], groups[best].size);
    }
  }
  MbPlan p;
  p.groups = std::move(groups);
  if (!mb_place(c, p.groups)) return {};
  for (const PlanGroup& g : p.groups) {  // memory, with real lengths (<= padded)
    int64_t tok = 0;
    for (int32_t q : g.seqs) tok += len[q];
    if (tok > c.tokens_per_rank * g.size) return {};
  }
  p.ok = true;
  p.makespan_ms = mb_makespan(c, len, p.groups);
  mb_improve(c, len, p);
  return p;
}

}  // namespace

MilpStatus mb_milp(const PlanCosts& c, const std::vector<int64_t>& len,
                   const std::vector<int32_t>& seqs, const MbPlan& warm,
                   const MilpOptions& opt, MbPlan* out) {
  *out = MbPlan{};
  if (seqs.empty()) return MilpStatus::failed;
  const Buckets k = make_buckets(len, seqs, opt.max_buckets);
  // Slots: every size, as many as could be used; restricted around the warm start's
  // group counts when the full model would be too large.
  std::map<int, int> warm_count;
  for (const PlanGroup& g : warm.groups)
    if (!g.seqs.empty()) warm_count[g.size]++;
  auto slot_counts = [&](bool restricted) {
    std::vector<int> n;
    for (int d : c.sizes) {
      int s = std::min<int>(c.world / d, static_cast<int>(seqs.size()));
      if (restricted) s = std::min(s, 2 * warm_count[d] + 2);
      n.push_back(c.holds(k.blen[0], d) ? s : 0);
    }
    return n;
  };
  auto columns = [&](const std::vector<int>& counts) {
    int64_t n = 1;
    for (int s : counts) n += int64_t{s} * (k.nb + 1);
    return n;
  };
  const bool restricted = columns(slot_counts(false)) > opt.max_columns;
  const std::vector<int> counts = slot_counts(restricted);
  if (columns(counts) > opt.max_columns) return MilpStatus::too_large;
  const SlotModel m = build_model(c, k, counts);
  std::vector<double> x;
  const MilpStatus status = solve(m, warm_start(c, k, m, warm), opt, &x);
  if (x.empty()) return status;
  MbPlan p = assign_counts(c, len, k, m.slots, x);
  if (!p.ok) return MilpStatus::failed;
  *out = std::move(p);
  return status;
}

}  // namespace flexsp

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

struct Slot {
  int d = 1, j = 0;
  int ycol = -1;
  std::vector<int> xcol;  // per bucket; -1 where the bucket does not fit
};

}  // namespace

MilpStatus mb_milp(const PlanCosts& c, const std::vector<int64_t>& len,
                   const std::vector<int32_t>& seqs, const MbPlan& warm,
                   const MilpOptions& opt, MbPlan* out) {
  *out = MbPlan{};
  if (seqs.empty()) return MilpStatus::failed;
  // Buckets over the ascending lengths.
  std::vector<int32_t> asc = seqs;
  std::stable_sort(asc.begin(), asc.end(), [&](int32_t a, int32_t b) { return len[a] < len[b]; });
  std::vector<int64_t> sorted(asc.size());
  for (size_t i = 0; i < asc.size(); ++i) sorted[i] = len[asc[i]];
  const std::vector<int> ends = bucket_lengths(sorted, opt.max_buckets);
  const int nb = static_cast<int>(ends.size());
  std::vector<int64_t> blen(nb);
  std::vector<int> bcount(nb);
  std::map<int32_t, int> bucket_of;  // sequence -> bucket
  for (int b = 0, s = 0; b < nb; s = ends[b], ++b) {
    blen[b] = sorted[ends[b] - 1];
    bcount[b] = ends[b] - s;
    for (int i = s; i < ends[b]; ++i) bucket_of[asc[i]] = b;
  }
  // Slots: every size, as many as could be used; restricted around the warm start's
  // group counts when the full model would be too large.
  std::map<int, int> warm_count;
  for (const PlanGroup& g : warm.groups)
    if (!g.seqs.empty()) warm_count[g.size]++;
  auto slots_of = [&](int d, bool restricted) {
    int k = std::min<int>(c.world / d, static_cast<int>(seqs.size()));
    if (restricted) k = std::min(k, 2 * warm_count[d] + 2);
    return c.holds(blen[0], d) ? k : 0;
  };
  auto columns = [&](bool restricted) {
    int64_t n = 1;
    for (int d : c.sizes) n += int64_t{slots_of(d, restricted)} * (nb + 1);
    return n;
  };
  const bool restricted = columns(false) > opt.max_columns;
  if (columns(restricted) > opt.max_columns) return MilpStatus::too_large;

  std::vector<Slot> slots;
  std::vector<double> lo{0}, hi{COIN_DBL_MAX}, obj{1};
  std::vector<std::string> names{"C"};
  std::vector<char> integer{0};
  auto add_col = [&](double l, double h, const std::string& name) {
    lo.push_back(l), hi.push_back(h), obj.push_back(0), names.push_back(name), integer.push_back(1);
    return static_cast<int>(lo.size()) - 1;
  };
  for (int d : c.sizes)
    for (int j = 0; j < slots_of(d, restricted); ++j) {
      Slot s{d, j, add_col(0, 1, fmt::format("y_{}_{}", d, j)), std::vector<int>(nb, -1)};
      for (int b = 0; b < nb; ++b)
        if (c.holds(blen[b], d))
          s.xcol[b] = add_col(0, bcount[b], fmt::format("x_{}_{}_{}", b, d, j));
      slots.push_back(std::move(s));
    }
  const int ncols = static_cast<int>(lo.size());

  CoinPackedMatrix rows(false, 0, 0);
  rows.setDimensions(0, ncols);
  std::vector<double> rlo, rhi;
  auto add_row = [&](const CoinPackedVector& v, double l, double h) {
    rows.appendRow(v);
    rlo.push_back(l), rhi.push_back(h);
  };
  for (int b = 0; b < nb; ++b) {  // every sequence placed
    CoinPackedVector v;
    for (const Slot& s : slots)
      if (s.xcol[b] >= 0) v.insert(s.xcol[b], 1.0);
    add_row(v, bcount[b], bcount[b]);
  }
  CoinPackedVector ranks;
  for (size_t k = 0; k < slots.size(); ++k) {
    const Slot& s = slots[k];
    CoinPackedVector mem, time;
    for (int b = 0; b < nb; ++b)
      if (s.xcol[b] >= 0) {
        mem.insert(s.xcol[b], static_cast<double>(blen[b]));
        time.insert(s.xcol[b], c.seq_ms(blen[b], s.d));
      }
    mem.insert(s.ycol, -static_cast<double>(c.tokens_per_rank) * s.d);
    add_row(mem, -COIN_DBL_MAX, 0);
    time.insert(0, -1.0);
    add_row(time, -COIN_DBL_MAX, 0);
    ranks.insert(s.ycol, s.d);
    if (k > 0 && slots[k - 1].d == s.d) {  // symmetry: used slots first, heavier first
      CoinPackedVector order;
      order.insert(s.ycol, 1.0);
      order.insert(slots[k - 1].ycol, -1.0);
      add_row(order, -COIN_DBL_MAX, 0);
      CoinPackedVector heavier;
      for (int b = 0; b < nb; ++b)
        if (s.xcol[b] >= 0) {
          heavier.insert(s.xcol[b], static_cast<double>(blen[b]));
          heavier.insert(slots[k - 1].xcol[b], -static_cast<double>(blen[b]));
        }
      add_row(heavier, -COIN_DBL_MAX, 0);
    }
  }
  add_row(ranks, -COIN_DBL_MAX, c.world);

  // The warm start: the greedy groups per size, heaviest (padded tokens) first.
  std::vector<double> start(ncols, 0.0);
  {
    std::map<int, std::vector<std::pair<int64_t, const PlanGroup*>>> per_d;
    for (const PlanGroup& g : warm.groups) {
      if (g.seqs.empty()) continue;
      int64_t padded = 0;
      for (int32_t q : g.seqs) padded += blen[bucket_of.at(q)];
      per_d[g.size].push_back({padded, &g});
    }
    double cmax = 0;
    bool fits = true;
    for (auto& [d, list] : per_d) {
      std::stable_sort(list.begin(), list.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      int j = 0;
      for (const auto& [padded, g] : list) {
        auto it = std::find_if(slots.begin(), slots.end(),
                               [&, dd = d](const Slot& s) { return s.d == dd && s.j == j; });
        if (it == slots.end()) { fits = false; break; }
        start[it->ycol] = 1;
        double t = 0;
        for (int32_t q : g->seqs) {
          const int b = bucket_of.at(q);
          if (it->xcol[b] < 0) { fits = false; break; }
          start[it->xcol[b]] += 1;
          t += c.seq_ms(blen[b], d);
        }
        cmax = std::max(cmax, t);
        ++j;
      }
    }
    start[0] = cmax;
    if (!fits || !warm.ok) std::fill(start.begin(), start.end(), 0.0);
  }

  OsiClpSolverInterface solver;
  solver.loadProblem(rows, lo.data(), hi.data(), obj.data(), rlo.data(), rhi.data());
  for (int i = 0; i < ncols; ++i) {
    if (integer[i]) solver.setInteger(i);
    solver.setColName(i, names[i]);
  }
  solver.messageHandler()->setLogLevel(0);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  if (start[0] > 0) {
    std::vector<std::pair<std::string, double>> mip;
    for (int i = 0; i < ncols; ++i) mip.emplace_back(names[i], start[i]);
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
  if (model.bestSolution() == nullptr || model.getMinimizationObjValue() >= 1e50)
    return status == MilpStatus::optimal ? MilpStatus::failed : status;
  const double* x = model.bestSolution();

  // Counts -> sequences: each bucket longest first onto the least-loaded slot with quota.
  std::vector<PlanGroup> groups;
  std::vector<double> load;
  std::vector<std::vector<int>> quota;  // [group][bucket]
  for (const Slot& s : slots) {
    if (std::lround(x[s.ycol]) != 1) continue;
    groups.push_back({-1, s.d, {}});
    load.push_back(0);
    std::vector<int> q(nb, 0);
    for (int b = 0; b < nb; ++b) q[b] = s.xcol[b] >= 0 ? static_cast<int>(std::lround(x[s.xcol[b]])) : 0;
    quota.push_back(std::move(q));
  }
  for (int b = nb - 1, s = 0; b >= 0; --b) {
    s = b == 0 ? 0 : ends[b - 1];
    for (int i = ends[b] - 1; i >= s; --i) {
      const int32_t q = asc[i];
      int best = -1;
      for (size_t g = 0; g < groups.size(); ++g)
        if (quota[g][b] > 0 && (best < 0 || load[g] < load[best])) best = static_cast<int>(g);
      if (best < 0) return MilpStatus::failed;  // counts do not add up: distrust the solution
      quota[best][b]--;
      groups[best].seqs.push_back(q);
      load[best] += c.seq_ms(len[q], groups[best].size);
    }
  }
  MbPlan p;
  p.groups = std::move(groups);
  p.ok = mb_place(c, p.groups);
  if (!p.ok) return MilpStatus::failed;
  for (const PlanGroup& g : p.groups) {  // memory, with real lengths (<= padded)
    int64_t tok = 0;
    for (int32_t q : g.seqs) tok += len[q];
    if (tok > c.tokens_per_rank * g.size) return MilpStatus::failed;
  }
  p.makespan_ms = mb_makespan(c, len, p.groups);
  mb_improve(c, len, p);
  *out = std::move(p);
  return status;
}

}  // namespace flexsp

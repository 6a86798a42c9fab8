// The class MILP on CBC (see mb_solver.h): which group sizes a micro-batch should use.
//
// The slot MILP (mb_milp.cpp) models every group and is exact, but at 64 ranks it has
// thousands of columns and CBC cannot close it in any useful time. Sequences of one
// bucket are interchangeable and so are groups of one size, so this model keeps only
// counts: n_d groups of size d, x_bd sequences of bucket b on groups of size d. For a
// target makespan C it asks for the fewest ranks such that every bucket is placed, each
// size class's summed time fits n_d C and its tokens fit n_d d E, and no sequence alone
// exceeds C on its size. That is linear once C is fixed, with ~sizes x buckets columns;
// a bisection on C (from the micro-batch's lower bound to the warm plan's makespan) finds
// the least C the classes allow. It is a fluid relaxation inside a class (bucket means
// for time and tokens), so every feasible probe's composition is turned into a real plan
// by mb_assign (longest first onto the least finishing group, then local moves) on the
// real lengths, idle ranks added as groups of 1; the best real makespan wins.
//
// Deterministic: CBC runs one thread under a node limit; the wall-clock limit is only a
// guard, and when it strikes the whole search reports timed_out and proposes nothing.
#include <coin/CbcModel.hpp>
#include <coin/CoinPackedMatrix.hpp>
#include <coin/CoinPackedVector.hpp>
#include <coin/OsiClpSolverInterface.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "lib/planner/mb/mb_solver.h"
#include "lib/planner/mb/partition.h"

namespace flexsp {

namespace {

struct Bucket {
  int count = 0;
  int64_t longest = 0;
  double mean_len = 0;
  std::vector<double> mean_ms;  // by size index
};

enum class Probe { feasible, infeasible, timed_out };

// Smallest-rank composition for target C; sizes_out gets n_d per size index.
Probe probe(const PlanCosts& c, const std::vector<Bucket>& buckets, double C, int max_nodes,
            double seconds, std::vector<int>* n_out) {
  const int ns = static_cast<int>(c.sizes.size());
  const int nb = static_cast<int>(buckets.size());
  std::vector<double> lo, hi, obj;
  std::vector<int> ncol(ns);
  std::vector<std::vector<int>> xcol(nb, std::vector<int>(ns, -1));
  for (int k = 0; k < ns; ++k) {
    ncol[k] = static_cast<int>(lo.size());
    lo.push_back(0), hi.push_back(c.world / c.sizes[k]), obj.push_back(0);  // feasibility only
  }
  for (int b = 0; b < nb; ++b) {
    bool any = false;
    for (int k = 0; k < ns; ++k) {
      const int d = c.sizes[k];
      if (!c.holds(buckets[b].longest, d) || c.seq_ms(buckets[b].longest, d) > C) continue;
      xcol[b][k] = static_cast<int>(lo.size());
      lo.push_back(0), hi.push_back(buckets[b].count), obj.push_back(0);
      any = true;
    }
    if (!any) return Probe::infeasible;  // some sequence is slower than C on every size
  }
  CoinPackedMatrix rows(false, 0, 0);
  rows.setDimensions(0, static_cast<int>(lo.size()));
  std::vector<double> rlo, rhi;
  for (int b = 0; b < nb; ++b) {
    CoinPackedVector v;
    for (int k = 0; k < ns; ++k)
      if (xcol[b][k] >= 0) v.insert(xcol[b][k], 1.0);
    rows.appendRow(v);
    rlo.push_back(buckets[b].count), rhi.push_back(buckets[b].count);
  }
  CoinPackedVector ranks;
  for (int k = 0; k < ns; ++k) {
    CoinPackedVector time, mem;
    for (int b = 0; b < nb; ++b)
      if (xcol[b][k] >= 0) {
        time.insert(xcol[b][k], buckets[b].mean_ms[k]);
        mem.insert(xcol[b][k], buckets[b].mean_len);
      }
    time.insert(ncol[k], -C);
    mem.insert(ncol[k], -static_cast<double>(c.tokens_per_rank) * c.sizes[k]);
    rows.appendRow(time), rlo.push_back(-COIN_DBL_MAX), rhi.push_back(0);
    rows.appendRow(mem), rlo.push_back(-COIN_DBL_MAX), rhi.push_back(0);
    ranks.insert(ncol[k], c.sizes[k]);
  }
  rows.appendRow(ranks), rlo.push_back(-COIN_DBL_MAX), rhi.push_back(c.world);

  OsiClpSolverInterface solver;
  solver.loadProblem(rows, lo.data(), hi.data(), obj.data(), rlo.data(), rhi.data());
  for (int i = 0; i < static_cast<int>(lo.size()); ++i) solver.setInteger(i);
  solver.messageHandler()->setLogLevel(0);
  CbcModel model(solver);
  model.setLogLevel(0);
  model.messageHandler()->setLogLevel(0);
  model.setNumberThreads(0);
  model.setRandomSeed(1);
  model.setMaximumNodes(max_nodes);
  model.setMaximumSeconds(std::max(seconds, 1e-3));
  model.branchAndBound();
  if (model.isSecondsLimitReached()) return Probe::timed_out;
  if (model.bestSolution() == nullptr) return Probe::infeasible;
  const double* x = model.bestSolution();
  n_out->assign(ns, 0);
  for (int k = 0; k < ns; ++k) (*n_out)[k] = static_cast<int>(std::lround(x[ncol[k]]));
  return Probe::feasible;
}

}  // namespace

ComposeStatus mb_compose(const PlanCosts& c, const std::vector<int64_t>& len,
                         const std::vector<int32_t>& seqs, const MbPlan& warm,
                         const ComposeOptions& opt, MbPlan* out) {
  *out = MbPlan{};
  if (seqs.empty() || !warm.ok) return ComposeStatus::no_better;
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds_left = [&] {
    return (opt.time_limit_ms -
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()) /
           1000.0;
  };
  // Buckets over the ascending lengths; each bucket's mean time per size.
  std::vector<int32_t> asc = seqs;
  std::stable_sort(asc.begin(), asc.end(), [&](int32_t a, int32_t b) { return len[a] < len[b]; });
  std::vector<int64_t> sorted(asc.size());
  for (size_t i = 0; i < asc.size(); ++i) sorted[i] = len[asc[i]];
  const std::vector<int> ends = bucket_lengths(sorted, opt.max_buckets);
  std::vector<Bucket> buckets;
  double lo = 0, work = 0;
  for (size_t b = 0, s = 0; b < ends.size(); s = ends[b], ++b) {
    Bucket bk;
    bk.count = ends[b] - static_cast<int>(s);
    bk.longest = sorted[ends[b] - 1];
    bk.mean_ms.assign(c.sizes.size(), 0);
    for (size_t i = s; i < static_cast<size_t>(ends[b]); ++i) {
      bk.mean_len += sorted[i];
      for (size_t k = 0; k < c.sizes.size(); ++k) bk.mean_ms[k] += c.seq_ms(sorted[i], c.sizes[k]);
    }
    bk.mean_len /= bk.count;
    double wmin = std::numeric_limits<double>::infinity(), tmin = wmin;
    for (size_t k = 0; k < c.sizes.size(); ++k) {
      bk.mean_ms[k] /= bk.count;
      if (c.holds(bk.longest, c.sizes[k])) {
        wmin = std::min(wmin, c.sizes[k] * bk.mean_ms[k]);
        tmin = std::min(tmin, c.seq_ms(bk.longest, c.sizes[k]));
      }
    }
    lo = std::max(lo, tmin);
    work += bk.count * wmin;
    buckets.push_back(std::move(bk));
  }
  lo = std::max(lo, work / c.world);
  double hi = warm.makespan_ms;
  MbPlan best = warm;
  std::vector<int> n;
  for (int it = 0; it < opt.max_probes && hi - lo > opt.tolerance * hi; ++it) {
    const double C = it == 0 ? lo : 0.5 * (lo + hi);  // the bound itself first
    const double secs = seconds_left();
    if (secs <= 0) return ComposeStatus::timed_out;
    const Probe p = probe(c, buckets, C, opt.max_nodes, secs, &n);
    if (p == Probe::timed_out) return ComposeStatus::timed_out;
    if (p == Probe::infeasible) {
      lo = C;
      continue;
    }
    hi = C;
    std::vector<int> sizes;
    int used = 0;
    for (size_t k = 0; k < c.sizes.size(); ++k)
      for (int j = 0; j < n[k]; ++j) sizes.push_back(c.sizes[k]), used += c.sizes[k];
    sizes.insert(sizes.end(), static_cast<size_t>(c.world - used), 1);  // idle ranks help LPT
    MbPlan cand = mb_assign(c, len, seqs, sizes);
    if (cand.ok && cand.makespan_ms < best.makespan_ms * (1 - 1e-9)) best = std::move(cand);
  }
  if (best.makespan_ms >= warm.makespan_ms * (1 - 1e-9)) return ComposeStatus::no_better;
  *out = std::move(best);
  return ComposeStatus::improved;
}

}  // namespace flexsp

// The box bound's search (box_bound.h for the LP and why each row is valid): boxes of every
// micro-batch count in one heap, least LP sum (plus the count's fixed costs) first; each
// box's LP built from triplets into OsiClp and solved from scratch by Clp. Times in s,
// tokens in units of E (as the strong bound's MILP).
#include "lib/planner/analysis/box_bound.h"

#include <coin/CoinPackedMatrix.hpp>
#include <coin/CoinWarmStart.hpp>
#include <coin/OsiClpSolverInterface.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <limits>
#include <memory>
#include <queue>

#include "lib/planner/analysis/lower_bound.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kLambdas[] = {0.1, 0.2, 0.3, 0.4};

// A length class at its shortest member: tokens (units of E), count, time by size index
// (s; inf where the size does not hold every member).
struct BoxClass {
  double len_e = 0;
  double count = 0;
  std::vector<double> t;
};

std::vector<BoxClass> box_classes(const PlanCosts& c, std::vector<int64_t> len, const BoxBoundOptions& opt) {
  std::sort(len.begin(), len.end(), std::greater<>());
  const size_t nd = c.sizes.size();
  auto holds = [&](int64_t a, int64_t b) {  // the same sizes hold both
    for (int d : c.sizes)
      if (c.holds(a, d) != c.holds(b, d)) return false;
    return true;
  };
  std::vector<BoxClass> out;
  int64_t head = 0, last = 0;
  auto close = [&] {
    BoxClass& b = out.back();
    b.len_e = static_cast<double>(last) / static_cast<double>(c.tokens_per_rank);
    b.t.assign(nd, kInf);
    for (size_t i = 0; i < nd; ++i)
      if (c.holds(last, c.sizes[i])) b.t[i] = c.seq_ms(last, c.sizes[i]) / 1000.0;
  };
  for (int64_t l : len) {
    const double width = head > c.tokens_per_rank ? opt.long_width : opt.short_width;
    if (out.empty() || static_cast<double>(l) < static_cast<double>(head) * (1 - width) || !holds(l, head)) {
      if (!out.empty()) close();
      out.push_back({}), head = l;
    }
    out.back().count += 1, last = l;
  }
  if (!out.empty()) close();
  return out;
}

// The FS1 dual feasible function: a group's items (shares of its capacity) sum to at most 1,
// so their images do too.
double fs1(double share, double lambda) { return share > 1 - lambda ? 1 : share >= lambda ? share : 0; }

class BoxLp {
 public:
  BoxLp(const PlanCosts& c, const std::vector<BoxClass>& cls, double least_work_s)
      : c_(c), cls_(cls), least_work_s_(least_work_s) {}

  // The least sum of makespans (s) over the box's LP, its T in *t; inf: no solution. Every
  // box of m micro-batches has the same rows and columns (a class too slow for the box gets
  // an upper bound of 0), so a parent's basis (*basis in, the box's out) starts its children.
  double solve(const std::vector<double>& lo, const std::vector<double>& hi, double upper_s, double seconds,
               std::vector<double>* t, std::shared_ptr<CoinWarmStart>* basis) {
    const int m = static_cast<int>(lo.size()), nd = static_cast<int>(c_.sizes.size());
    const double W = c_.world;
    ri_.clear(), ci_.clear(), el_.clear(), rlo_.clear(), rhi_.clear(), clo_.clear(), chi_.clear(), obj_.clear();
    std::vector<int> T(m), dev(m), sumv(m);
    std::vector<std::vector<int>> n(m, std::vector<int>(nd)), v = n, mem = n, tim = n, pack = n;
    constexpr int kPackRows = 2 + 2 * static_cast<int>(std::size(kLambdas));
    for (int k = 0; k < m; ++k) T[k] = col(lo[k], hi[k], 1);
    std::vector<int> cover(cls_.size());
    for (size_t b = 0; b < cls_.size(); ++b) cover[b] = row(cls_[b].count, cls_[b].count);
    for (int k = 0; k < m; ++k) {
      dev[k] = row(-kInf, W), sumv[k] = row(-kInf, 0);
      put(sumv[k], T[k], -W);
      for (int i = 0; i < nd; ++i) {
        const double d = c_.sizes[i], most = W / d;
        n[k][i] = col(0, kInf, 0), v[k][i] = col(0, kInf, 0);
        put(dev[k], n[k][i], d), put(sumv[k], v[k][i], 1);
        mem[k][i] = row(-kInf, 0), put(mem[k][i], n[k][i], -d);
        tim[k][i] = row(-kInf, 0), put(tim[k][i], v[k][i], -1);
        pack[k][i] = static_cast<int>(rlo_.size());  // kPackRows rows: n[k,d] bounds each sum
        for (int p = 0; p < kPackRows; ++p) put(row(-kInf, 0), n[k][i], -1);
        const int up = row(-kInf, 0), mc = row(-kInf, -d * lo[k] * most), down = row(-kInf, 0);
        put(up, v[k][i], 1), put(up, n[k][i], -d * hi[k]);                                 // v <= d n hi
        put(mc, v[k][i], 1), put(mc, T[k], -d * most), put(mc, n[k][i], -d * lo[k]);       // McCormick
        put(down, n[k][i], d * lo[k]), put(down, v[k][i], -1);                             // v >= d n lo
      }
      if (k + 1 < m) {
        const int r = row(-kInf, 0);
        put(r, T[k + 1], 1), put(r, T[k], -1);
      }
    }
    const int sum = row(-kInf, upper_s), work = row(least_work_s_, kInf);
    for (int k = 0; k < m; ++k) {
      put(sum, T[k], 1);
      for (int i = 0; i < nd; ++i) put(work, v[k][i], 1);
    }
    for (size_t b = 0; b < cls_.size(); ++b)
      for (int k = 0; k < m; ++k)
        for (int i = 0; i < nd; ++i) {
          const double tb = cls_[b].t[i], d = c_.sizes[i];
          if (!std::isfinite(tb)) continue;
          const int x = col(0, tb <= hi[k] ? cls_[b].count : 0, 0);
          put(cover[b], x, 1), put(mem[k][i], x, cls_[b].len_e), put(tim[k][i], x, d * tb);
          const double shares[2] = {cls_[b].len_e / d, tb / hi[k]};  // of a group's memory, time
          int r = pack[k][i];
          for (double s : shares) put(r++, x, s > 0.5 ? 1 : 0);
          for (double lambda : kLambdas)
            for (double s : shares) put(r++, x, fs1(s, lambda));
        }
    CoinPackedMatrix a(false, ri_.data(), ci_.data(), el_.data(), static_cast<CoinBigIndex>(el_.size()));
    a.setDimensions(static_cast<int>(rlo_.size()), static_cast<int>(clo_.size()));
    OsiClpSolverInterface s;
    s.messageHandler()->setLogLevel(0);
    s.loadProblem(a, clo_.data(), chi_.data(), obj_.data(), rlo_.data(), rhi_.data());
    s.getModelPtr()->setMaximumSeconds(std::max(1.0, seconds));  // a stalled LP: the box's floor
    if (*basis) {
      s.setWarmStart(basis->get());
      s.resolve();
    } else {
      s.initialSolve();
    }
    basis->reset(s.getWarmStart());
    if (s.isProvenPrimalInfeasible()) return kInf;
    t->assign(lo.begin(), lo.end());
    if (!s.isProvenOptimal()) {  // no verdict: the box's own floor, to be split further
      double floor = 0;
      for (double x : lo) floor += x;
      return floor;
    }
    for (int k = 0; k < m; ++k) (*t)[k] = s.getColSolution()[T[k]];
    return s.getObjValue();
  }

 private:
  int col(double lo, double hi, double obj) {
    clo_.push_back(lo), chi_.push_back(hi), obj_.push_back(obj);
    return static_cast<int>(clo_.size()) - 1;
  }
  int row(double lo, double hi) {
    rlo_.push_back(lo), rhi_.push_back(hi);
    return static_cast<int>(rlo_.size()) - 1;
  }
  void put(int r, int j, double a) {
    if (a != 0) ri_.push_back(r), ci_.push_back(j), el_.push_back(a);
  }
  const PlanCosts& c_;
  const std::vector<BoxClass>& cls_;
  double least_work_s_;
  std::vector<int> ri_, ci_;
  std::vector<double> el_, rlo_, rhi_, clo_, chi_, obj_;
};

struct Box {
  double value = 0;  // ms: the count's fixed costs + the LP's sum of makespans
  size_t count = 0;  // index into BoxBound::counts
  std::vector<double> lo, hi, t;
  std::shared_ptr<CoinWarmStart> basis;  // the LP's, for the children
  bool operator<(const Box& o) const { return value > o.value; }  // least first
};

}  // namespace

BoxBound plan_box_lower_bound(const PlanCosts& c, const std::vector<int64_t>& len, double upper_sum_ms,
                              const BoxBoundOptions& opt) {
  FLEXSP_CHECK(upper_sum_ms > 0, "box bound: the upper bound must be positive, got {}", upper_sum_ms);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] { return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(); };
  BoxBound out;
  const MemoryBound mb = plan_memory_lower_bound(c, len);
  const double span_lb = std::max(mb.staircase_ms, mb.work_ms);
  int64_t tokens = 0;
  for (int64_t l : len) tokens += l;
  const int nseq = static_cast<int>(len.size());
  out.memory_ms = mb.ms;
  out.sum_ms = mb.micro_batches * c.fixed_ms + span_lb;
  out.ms = c.step_ms(out.sum_ms, nseq, tokens);
  if (len.empty() || out.sum_ms >= upper_sum_ms) return out;

  const std::vector<BoxClass> cls = box_classes(c, len, opt);
  out.classes = static_cast<int>(cls.size());
  double least_work = 0, longest = 0;
  for (int64_t l : len) least_work += c.least_work(l) / 1000.0, longest = std::max(longest, c.least_ms(l) / 1000.0);
  BoxLp lp(c, cls, least_work * (1 - 1e-9));
  std::priority_queue<Box> open;
  auto push = [&](Box b) {
    const BoxBoundCount& n = out.counts[b.count];
    const double upper_s = (upper_sum_ms - n.micro_batches * c.fixed_ms) / 1000.0 * (1 + 1e-9);
    const double v = lp.solve(b.lo, b.hi, upper_s, (opt.time_limit_ms - elapsed_ms()) / 1000.0, &b.t, &b.basis);
    ++out.counts[b.count].boxes, ++out.boxes;
    if (!std::isfinite(v)) return;
    b.value = n.micro_batches * c.fixed_ms + 1000.0 * v;
    open.push(std::move(b));
  };
  // Every count whose memory-aware floor is below the given plan; past them the floor holds.
  for (int m = mb.micro_batches; m <= nseq && m * c.fixed_ms + span_lb < upper_sum_ms; ++m) {
    const double upper_s = (upper_sum_ms - m * c.fixed_ms) / 1000.0;
    if (upper_s < longest) break;
    out.counts.push_back({m, upper_sum_ms, 0});
    Box root;
    root.count = out.counts.size() - 1;
    root.lo.assign(m, 0), root.hi.assign(m, upper_s);
    root.lo[0] = longest;
    push(std::move(root));
  }
  std::vector<Box> unsplittable;  // boxes too narrow to split: their values stand
  // Until no open box is below the given plan (then it is the best: closed), or the clock.
  while (!open.empty() && open.top().value < upper_sum_ms * (1 - 1e-9) && elapsed_ms() < opt.time_limit_ms) {
    Box b = open.top();
    open.pop();
    const int m = static_cast<int>(b.lo.size());
    int k = 0;
    for (int j = 1; j < m; ++j)
      if (b.hi[j] - b.lo[j] > b.hi[k] - b.lo[k]) k = j;
    const double w = b.hi[k] - b.lo[k];
    if (w < 1e-3) {
      unsplittable.push_back(std::move(b));
      continue;
    }
    const double cut = std::clamp(b.t[k], b.lo[k] + 0.1 * w, b.hi[k] - 0.1 * w);
    for (int side = 0; side < 2; ++side) {
      Box child;
      child.count = b.count, child.lo = b.lo, child.hi = b.hi, child.basis = b.basis;
      (side == 0 ? child.hi[k] : child.lo[k]) = cut;
      bool empty = false;
      for (int j = 0; j < m; ++j) {
        if (j < k) child.lo[j] = std::max(child.lo[j], child.lo[k]);
        if (j > k) child.hi[j] = std::min(child.hi[j], child.hi[k]);
        empty = empty || child.lo[j] > child.hi[j];
      }
      if (!empty) push(std::move(child));
    }
  }
  for (Box& b : unsplittable) open.push(std::move(b));
  out.closed = open.empty() || open.top().value >= upper_sum_ms * (1 - 1e-9);
  const double best = open.empty() ? upper_sum_ms : open.top().value;
  for (; !open.empty(); open.pop()) {
    BoxBoundCount& n = out.counts[open.top().count];
    n.bound_ms = std::min(n.bound_ms, open.top().value);
  }
  out.sum_ms = std::max(out.sum_ms, std::min(best, upper_sum_ms));
  out.ms = c.step_ms(out.sum_ms, nseq, tokens);
  out.solve_ms = elapsed_ms();
  return out;
}

}  // namespace flexsp

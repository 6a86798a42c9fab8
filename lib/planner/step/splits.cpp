// The split generators of flexsp's search (splits.h).
#include "lib/planner/step/splits.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "lib/planner/mb/partition.h"
#include "lib/planner/step/flexsp.h"
#include "lib/planner/step/gates.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

using Split = std::vector<std::vector<int32_t>>;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The batch sorted longest first, and what the split rules read of it.
struct SortedBatch {
  int n = 0;
  std::vector<int32_t> order;
  std::vector<SeqBounds> bounds;  // by position in order
  std::vector<SeqBounds> by_seq;  // by sequence
  std::vector<double> prefix_w;   // least rank-time of order[0, i)
  std::vector<int64_t> prefix_tok;
  int64_t cap = 0;                // a micro-batch's tokens: E x devices
  int fewest = 1;                 // micro-batches memory needs at least
  std::vector<int> cuts;          // the dp rule's candidate cut points
  int64_t tokens() const { return prefix_tok[static_cast<size_t>(n)]; }
};

SortedBatch sort_batch(const PlanCosts& c, const std::vector<int64_t>& len) {
  SortedBatch b;
  const int n = b.n = static_cast<int>(len.size());
  b.order = mb_longest_first(len);
  b.prefix_w.assign(n + 1, 0);
  b.prefix_tok.assign(n + 1, 0);
  b.bounds.resize(n);
  for (int i = 0; i < n; ++i) {
    b.bounds[i] = seq_bounds(c, len[b.order[i]]);
    b.prefix_w[i + 1] = b.prefix_w[i] + b.bounds[i].wmin;
    b.prefix_tok[i + 1] = b.prefix_tok[i] + len[b.order[i]];
  }
  b.by_seq.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) b.by_seq[b.order[i]] = b.bounds[i];
  b.cap = c.tokens_per_rank * c.world;
  b.fewest = std::max<int>(1, static_cast<int>((b.tokens() + b.cap - 1) / b.cap));
  // Quantiles past 256 sequences keep the DP's cost bounded.
  const int max_cuts = 256;
  for (int k = 1; k <= std::min(n, max_cuts); ++k)
    b.cuts.push_back(n <= max_cuts ? k : static_cast<int>(int64_t{n} * k / max_cuts));
  b.cuts.erase(std::unique(b.cuts.begin(), b.cuts.end()), b.cuts.end());
  return b;
}

// dp: contiguous chunks of the sorted batch, each costing its lower bound (its longest
// sequence leads it, order is descending), under the memory cap.
std::vector<Split> split_dp(const PlanCosts& c, const std::vector<int64_t>&, const SortedBatch& b, int m) {
  auto cost = [&](int first, int end) {
    if (b.prefix_tok[end] - b.prefix_tok[first] > b.cap) return kInf;
    return c.fixed_ms + std::max((b.prefix_w[end] - b.prefix_w[first]) / c.world, b.bounds[first].tmin);
  };
  Split mbs;
  const std::vector<int> ends = chunk_split(b.n, m, b.cuts, cost);
  for (int first = 0, k = 0; k < static_cast<int>(ends.size()); first = ends[k++])
    mbs.emplace_back(b.order.begin() + first, b.order.begin() + ends[k]);
  return {mbs};
}

// balanced: longest first onto the micro-batch with least work, memory permitting.
std::vector<Split> split_balanced(const PlanCosts&, const std::vector<int64_t>& len, const SortedBatch& b, int m) {
  Split mbs(m);
  std::vector<double> work(m, 0);
  std::vector<int64_t> tok(m, 0);
  for (int i = 0; i < b.n; ++i) {
    int best = -1;
    for (int k = 0; k < m; ++k)
      if (tok[k] + len[b.order[i]] <= b.cap && (best < 0 || work[k] < work[best])) best = k;
    if (best < 0) return {};
    mbs[best].push_back(b.order[i]);
    work[best] += b.bounds[i].wmin;
    tok[best] += len[b.order[i]];
  }
  return {mbs};
}

// tiered: the pieces whose smallest group is wider than half a node (and, second, a
// quarter) stacked, where the longest one is (these fix long, wide groups), under a cap of
// memory and of halfway between it and an even share (mb_token_caps).
std::vector<Split> split_tiered(const PlanCosts& c, const std::vector<int64_t>& len, const SortedBatch& b, int m) {
  std::vector<int> wide_from = {std::max(1, c.ranks_per_node / 2)};
  if (c.ranks_per_node / 4 >= 1 && c.ranks_per_node / 4 < wide_from[0]) wide_from.push_back(c.ranks_per_node / 4);
  const int longest_d = b.n > 0 ? c.min_size(len[b.order[0]]) : 0;
  std::vector<Split> out;
  for (int w : wide_from)
    if (longest_d > w)
      for (int64_t tc : mb_token_caps(c, b.tokens(), m)) out.push_back(mb_split_tiered(c, len, m, tc, w));
  return out;
}

using CountRule = std::vector<Split> (*)(const PlanCosts&, const std::vector<int64_t>&, const SortedBatch&, int m);
struct NamedCountRule {
  const char* name;
  CountRule rule;
};
// In this order; ties go to the earlier rule.
constexpr NamedCountRule kCountRules[] = {{"dp", split_dp}, {"balanced", split_balanced}, {"tiered", split_tiered}};

// The first split's clock (flexsp_split): true once the split has used its share of the
// planning time of the step `best` makes; never before a candidate fits.
using SplitClock = std::function<bool(const Candidate& best)>;

// The best split of m micro-batches by the count rules (by the sum of fixed + makespan);
// not ok where none fits or none beats `beat`, a sum the caller would not take. Past the
// first that fits, the rules stop when out_of_time(best) says so (given `incumbent`, the
// caller's best, the clock reads that one).
Candidate best_of_count(const PlanCosts& c, const std::vector<int64_t>& len, const SortedBatch& b, int m,
                        double beat, const SplitClock& out_of_time, const Candidate* incumbent = nullptr) {
  Candidate best;
  for (const NamedCountRule& r : kCountRules)
    for (Split& mbs : r.rule(c, len, b, m)) {
      if (static_cast<int>(mbs.size()) != m) continue;
      if (out_of_time(incumbent && incumbent->ok ? *incumbent : best)) return best;
      Candidate cand = plan_split(c, len, std::move(mbs), std::min(beat, best.total_ms), &b.by_seq);
      if (cand.ok && cand.total_ms < best.total_ms - 1e-9) best = std::move(cand);
    }
  return best;
}

// Candidates of different micro-batch counts compare by the step they make: with a
// pipeline, the simulated one (plan_pipeline_ms). More micro-batches shrink the bubble and
// each pays the fixed cost: with makespans summing to S, the closed form (S + m fixed)
// (m k + pp - 1) / (m k) -- the estimate before the micro-batches are planned -- is least
// near m* = sqrt((pp - 1) S / (k fixed)); the counts around m* (at most 8 pp past the
// fewest) are tried besides the usual few past the fewest.
Candidate split_by_count(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                         const SortedBatch& b, const SplitClock& out_of_time) {
  const int n = b.n;
  auto step = [&](const Candidate& k) { return candidate_step_ms(c, k, len, b.tokens()); };
  Candidate best;
  int m = b.fewest;
  for (; m <= std::max(n, 1) && !best.ok; ++m) best = best_of_count(c, len, b, m, kInf, out_of_time);
  auto consider = [&](Candidate cand) {
    if (cand.ok && step(cand) < step(best) - 1e-9) best = std::move(cand);
  };
  // Without a pipeline the step is the sum: a count whose sum reaches the best's loses.
  auto beat = [&] { return c.pipeline.pp <= 1 ? best.total_ms : kInf; };
  for (int extra = 0; extra < ctx.extra_micro_batches && m <= n && !out_of_time(best); ++extra, ++m)
    consider(best_of_count(c, len, b, m, beat(), out_of_time, &best));
  if (c.pipeline.pp > 1 && best.ok) {
    const int mb = static_cast<int>(best.mbs.size());
    const double k = pp_units(c.pipeline, 1), span = best.total_ms - mb * c.fixed_ms;
    const double est = c.fixed_ms > 0 ? std::sqrt((c.pipeline.pp - 1) * span / (k * c.fixed_ms)) : 1e9;
    const int hi = std::min(n, b.fewest + 8 * c.pipeline.pp);
    const int centre = static_cast<int>(std::clamp<double>(std::round(est), b.fewest, hi));
    for (int t : {centre - 1, centre, centre + 1})
      if (t >= m && t <= hi && !out_of_time(best)) consider(best_of_count(c, len, b, t, kInf, out_of_time, &best));
  }
  return best;
}

// uniform: the best uniform plan's split, each micro-batch planned afresh; its uniform
// groups stand where they obey holds() (a uniform d wider than the heads carries short
// sequences too: not flexsp's rule) and the greedy plan is not better. Not ok when the
// uniform plan is empty or a micro-batch has no plan.
Candidate split_uniform(const PlanCosts& c, const std::vector<int64_t>& len, const Plan& uniform) {
  Candidate cand;
  if (uniform.micro_batches.empty()) return cand;
  cand.ok = true;
  cand.total_ms = 0;
  for (const PlanMicroBatch& mb : uniform.micro_batches) {
    std::vector<int32_t> seqs;
    for (const PlanGroup& g : mb.groups) seqs.insert(seqs.end(), g.seqs.begin(), g.seqs.end());
    MbPlan p = mb_greedy(c, len, seqs);
    bool kept_ok = true;
    for (const PlanGroup& g : mb.groups)
      for (int32_t q : g.seqs) kept_ok = kept_ok && c.holds(len[q], g.size);
    const double keep = mb_makespan(c, len, mb.groups);
    if (kept_ok && (!p.ok || p.makespan_ms > keep)) p.ok = true, p.groups = mb.groups, p.makespan_ms = keep;
    if (!p.ok) cand.ok = false;
    cand.total_ms += c.fixed_ms + p.makespan_ms;
    cand.mbs.push_back(std::move(seqs));
    cand.plans.push_back(std::move(p));
  }
  return cand;
}

// stacked: the pieces whose least rank-time is on a group of the whole stage (within 1%:
// long ring pieces, the ring's steps hiding the transfers), longest first, in
// micro-batches of their own, where they run at their least rank-time with no device
// idle; the rest split by flexsp_split at its fewest count (its pieces are not
// world-wide: no recursion past one level). The dp rule's bound (least work, longest
// alone) does not see what shorter sequences lose beside such pieces on that group (they
// are cheaper on narrower groups). Tried only where the stack fills 3/4 of its
// micro-batches' memory: emptier stacks lose. Not ok where it is not tried or fails.
Candidate split_stacked(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                        const SortedBatch& b, PlanClock::time_point t0) {
  const int n = b.n;
  int stack_end = 0;
  if (c.max_size() == c.world)
    while (stack_end < n && c.holds(len[b.order[stack_end]], c.world) &&
           c.world * c.seq_ms(len[b.order[stack_end]], c.world) <= b.bounds[stack_end].wmin * 1.01)
      ++stack_end;
  Split stacked;  // contiguous, each under the memory cap
  int64_t stacked_tok = 0;
  for (int i = 0; i < stack_end; ++i) {
    const int64_t l = len[b.order[i]];
    if (stacked.empty() || stacked_tok + l > b.cap) stacked.emplace_back(), stacked_tok = 0;
    stacked.back().push_back(b.order[i]);
    stacked_tok += l;
  }
  const bool stack_full = 4 * b.prefix_tok[stack_end] >= 3 * b.cap * static_cast<int64_t>(stacked.size());
  if (stacked.empty() || stack_end >= n || !stack_full) return {};
  Candidate cand = plan_split(c, len, std::move(stacked));
  std::vector<int64_t> rest_len;
  for (int i = stack_end; i < n; ++i) rest_len.push_back(len[b.order[i]]);
  PlannerContext fewest = ctx;  // the rest at its fewest micro-batches only: a third of the cost
  fewest.extra_micro_batches = 0;
  fewest.seed_split.clear();  // indices of the whole batch, not of the rest
  Candidate rest = flexsp_split(fewest, c, rest_len, Plan{}, t0, false);
  auto to_batch = [&](int32_t q) { return b.order[stack_end + q]; };
  for (size_t k = 0; k < rest.mbs.size() && cand.ok && rest.ok; ++k) {
    for (int32_t& q : rest.mbs[k]) q = to_batch(q);
    for (PlanGroup& g : rest.plans[k].groups)
      for (int32_t& q : g.seqs) q = to_batch(q);
    cand.total_ms += c.fixed_ms + rest.plans[k].makespan_ms;
    cand.mbs.push_back(std::move(rest.mbs[k]));
    cand.plans.push_back(std::move(rest.plans[k]));
  }
  if (!rest.ok) return {};
  return cand;
}

}  // namespace

Candidate flexsp_split(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                       const Plan& uniform, PlanClock::time_point t0, bool stack, std::vector<Candidate>* runners_up) {
  const SortedBatch b = sort_batch(c, len);
  auto step = [&](const Candidate& k) { return candidate_step_ms(c, k, len, b.tokens()); };
  const SplitClock out_of_time = [&](const Candidate& k) {
    return ctx.time_limit_ms > 0 && k.ok &&
           ms_since(t0) > ctx.gates.first_split_share * step_time_limit_ms(ctx, step(k));
  };
  Candidate best = split_by_count(ctx, c, len, b, out_of_time);
  if (!out_of_time(best))
    if (Candidate u = split_uniform(c, len, uniform); u.ok && step(u) < step(best) - 1e-9) best = std::move(u);
  if (stack && !out_of_time(best))
    if (Candidate s = split_stacked(ctx, c, len, b, t0); s.ok && step(s) < step(best) - 1e-9) {
      if (runners_up) runners_up->push_back(std::move(best));
      best = std::move(s);
    }
  FLEXSP_CHECK(best.ok, "planner: no plan fits memory for a batch of {} sequences", b.n);
  if (!ctx.seed_split.empty()) {  // an experiment's start replaces the candidates (context.h)
    Candidate seeded = seeded_split(c, len, ctx.seed_split, b.tokens(), kInf);
    if (seeded.ok) {
      seeded.seeded = true;
      best = std::move(seeded);
      if (runners_up) runners_up->clear();
    }
  }
  const std::function<bool()> fill_out_of_time = [&] { return out_of_time(best); };
  fill_candidate(c, len, b.tokens(), best, fill_out_of_time);
  if (runners_up)
    for (Candidate& k : *runners_up) fill_candidate(c, len, b.tokens(), k, fill_out_of_time);
  return best;
}

Candidate levels_split(const PlanCosts& c, const std::vector<int64_t>& len, int m, double share, bool widen_first) {
  const int64_t tokens = total_tokens(len);
  double work = 0;
  for (int64_t l : len) work += c.least_work(l);
  const double avg_ms = work / c.world / m + c.fixed_ms;
  Candidate best;
  std::vector<std::vector<std::vector<SeedPiece>>> seen;
  for (int widen : {0, 1})
    for (double alpha : {0.3, 0.5})
      for (double beta : {0.5, 1.0}) {
        if (widen_first && widen == 0) continue;
        auto seed = mb_seed_levels(c, len, m, avg_ms, widen, alpha, beta, share, widen_first);
        if (seed.empty() || std::find(seen.begin(), seen.end(), seed) != seen.end()) continue;
        Candidate cand = seeded_split(c, len, seed, tokens, best.total_ms);
        seen.push_back(std::move(seed));
        if (cand.ok && candidate_step_ms(c, cand, len, tokens) < candidate_step_ms(c, best, len, tokens) - 1e-9)
          best = std::move(cand);
      }
  if (best.ok) fill_candidate(c, len, tokens, best);
  return best;
}

Candidate sample_split(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                       PlanClock::time_point t0) {
  const int n = static_cast<int>(len.size()), runs_of = c.world / ctx.sample_devices;
  const std::vector<int32_t> order = mb_longest_first(len);
  std::vector<int64_t> sample;
  for (int first = 0; first < n; first += runs_of)
    sample.push_back(len[order[first + (std::min(n, first + runs_of) - first) / 2]]);
  PlanCosts sc = c;
  sc.world = c.world / runs_of;  // at least sample_devices, so every size stays
  PlannerContext sctx = ctx;
  sctx.seed_split.clear();
  const Plan sp = plan_flexsp(sctx, sc, sample, Plan{}, t0, nullptr);
  std::vector<std::vector<SeedPiece>> seed;
  for (const PlanMicroBatch& mb : sp.micro_batches) {
    seed.emplace_back();
    for (const PlanGroup& g : mb.groups)
      for (int32_t q : g.seqs)
        for (int i = q * runs_of; i < std::min(n, (q + 1) * runs_of); ++i) seed.back().push_back({order[i], g.size});
  }
  const int64_t tokens = total_tokens(len);
  Candidate k = seeded_split(c, len, seed, tokens, kInf);
  if (k.ok) fill_candidate(c, len, tokens, k);
  return k;
}

}  // namespace flexsp

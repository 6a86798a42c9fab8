// flexsp's search in one space of group sizes (planner.h, steps 1-3 of plan_step): the
// split phase (micro-batch count and split candidates, each micro-batch planned
// greedily, then mb_fill) and the improve phase (the local search over the split, the
// MILPs, mb_resize) under the time limit. Split from planner.cpp, which keeps the costs,
// the baselines, plan_step and PlanAhead.
#include "lib/planner/flexsp_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "lib/planner/mb_solver.h"
#include "lib/planner/partition.h"
#include "lib/util/error.h"

namespace flexsp {

double ms_since(PlanClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(PlanClock::now() - t0).count();
}

namespace {

using Clock = PlanClock;

// Least time and least rank-time of one sequence over the sizes that hold it.
struct SeqBounds {
  double tmin = 0, wmin = 0;
};
SeqBounds seq_bounds(const PlanCosts& c, int64_t l) {
  SeqBounds b{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  for (int d : c.sizes)
    if (c.holds(l, d)) {
      b.tmin = std::min(b.tmin, c.seq_ms(l, d));
      b.wmin = std::min(b.wmin, d * c.seq_ms(l, d));
    }
  return b;
}


// Where the widest passes run (the levels splits, mb_resplit): the step holds a piece
// whose smallest group is wider than half a node (the tiered splits' condition: which of
// such pieces share a micro-batch is what they change; elsewhere they only cost time)
// and the stage has at most 256 devices (a greedy plan there is cheap; at 1024 GPUs a
// re-split pair re-plans ~2,800 sequences a dozen times, about 1 s).
bool wide_passes(const PlanCosts& c, const std::vector<int64_t>& len) {
  int64_t longest = 0;
  for (int64_t l : len) longest = std::max(longest, l);
  return c.world <= 256 && c.min_size(longest) > std::max(1, c.ranks_per_node / 2);
}

Plan to_plan(const std::vector<MbPlan>& mbs) {
  Plan p;
  for (const MbPlan& m : mbs) p.micro_batches.push_back({m.groups});
  return p;
}

// One split of the batch into micro-batches, greedily planned.
struct Candidate {
  bool ok = false;
  double total_ms = std::numeric_limits<double>::infinity();
  std::vector<std::vector<int32_t>> mbs;
  std::vector<MbPlan> plans;
  bool seeded = false;  // PlannerContext::seed_split's split
};

// Stops (not ok) once the sum reaches `beat`, where the caller would reject it anyway:
// the planned micro-batches' sum plus the others' bounds (fixed + the longest sequence's
// least time or the least work over the devices; by_seq: each sequence's SeqBounds).
Candidate plan_split(const PlanCosts& c, const std::vector<int64_t>& len,
                     std::vector<std::vector<int32_t>> mbs,
                     double beat = std::numeric_limits<double>::infinity(),
                     const std::vector<SeqBounds>* by_seq = nullptr) {
  double rest_lb = 0;  // the bounds of the micro-batches not planned yet
  std::vector<double> lb(mbs.size(), 0);
  if (by_seq && std::isfinite(beat))
    for (size_t k = 0; k < mbs.size(); ++k) {
      double work = 0, longest = 0;
      for (int32_t s : mbs[k]) work += (*by_seq)[s].wmin, longest = std::max(longest, (*by_seq)[s].tmin);
      lb[k] = c.fixed_ms + std::max(work / c.world, longest);
      rest_lb += lb[k];
    }
  Candidate cand;
  cand.total_ms = 0;
  for (size_t k = 0; k < mbs.size(); ++k) {
    MbPlan p = mb_greedy(c, len, mbs[k]);
    if (!p.ok) return {};
    cand.total_ms += c.fixed_ms + p.makespan_ms;
    rest_lb -= lb[k];
    if (cand.total_ms + rest_lb * (1 - 1e-9) >= beat - 1e-9) return {};
    cand.plans.push_back(std::move(p));
  }
  cand.mbs = std::move(mbs);
  cand.ok = true;
  return cand;
}

// A candidate's step: with a pipeline, the simulated one (plan_pipeline_ms).
double candidate_step_ms(const PlanCosts& c, const Candidate& k, const std::vector<int64_t>& len,
                         int64_t tokens) {
  if (c.pipeline.pp <= 1 || !k.ok) return c.step_ms(k.total_ms, static_cast<int>(k.mbs.size()), tokens);
  std::vector<const std::vector<PlanGroup>*> groups;
  for (const MbPlan& p : k.plans) groups.push_back(&p.groups);
  return plan_pipeline_ms(c, groups, len);
}

// A seed's split (mb_split_seeded under either token cap, its micro-batches planned by
// mb_plan_seeded); not ok where it loses to beat (a sum) or nothing fits.
Candidate seeded_split(const PlanCosts& c, const std::vector<int64_t>& len,
                       const std::vector<std::vector<SeedPiece>>& seed, int64_t tokens, double beat) {
  Candidate best;
  for (int64_t tc : mb_token_caps(c, tokens, static_cast<int>(seed.size()))) {
    std::vector<std::vector<int>> sizes;
    Candidate cand;
    cand.mbs = mb_split_seeded(c, len, seed, tc, &sizes);
    cand.ok = !cand.mbs.empty(), cand.total_ms = 0;
    for (size_t k = 0; k < cand.mbs.size() && cand.ok; ++k) {
      const size_t sized = static_cast<size_t>(
          std::count_if(seed[k].begin(), seed[k].end(), [](const SeedPiece& p) { return p.size > 0; }));
      cand.plans.push_back(mb_plan_seeded(c, len, cand.mbs[k], sized, sizes[k]));
      cand.ok = cand.plans.back().ok, cand.total_ms += c.fixed_ms + cand.plans.back().makespan_ms;
      cand.ok = cand.ok && cand.total_ms < std::min(beat, best.total_ms) - 1e-9;
    }
    if (cand.ok) best = std::move(cand);
  }
  return best;
}

// Micro-batches with idle devices take sequences of the last one (mb_fill), kept where faster.
void fill_candidate(const PlanCosts& c, const std::vector<int64_t>& len, int64_t tokens, Candidate& k) {
  Candidate filled = k;
  if (mb_fill(c, len, filled.mbs, filled.plans, 64)) {
    filled.total_ms = 0;
    for (const MbPlan& p : filled.plans) filled.total_ms += c.fixed_ms + p.makespan_ms;
    if (candidate_step_ms(c, filled, len, tokens) < candidate_step_ms(c, k, len, tokens) - 1e-9) k = std::move(filled);
  }
}

// The best levels split of m micro-batches (mb_seed_levels; its variants: a level past the
// first at its head's smallest group or twice it, alpha 0.3 or 0.5, beta 0.5 or 1; with
// widen_first every level at twice it), targets against the average micro-batch of the
// least work, pieces sharing groups within `share` of the target; not ok when none is
// built or fits.
Candidate levels_split(const PlanCosts& c, const std::vector<int64_t>& len, int m, double share, bool widen_first) {
  int64_t tokens = 0;
  double work = 0;
  for (int64_t l : len) tokens += l, work += c.least_work(l);
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

// plan_flexsp's first phase (planner.h, steps 1-2 up to mb_fill): the micro-batch count
// and the split, each micro-batch planned greedily. No clock: it always runs to the end.
// Where the stacked split wins, runners_up (optional) gets the best of the others, for the
// local search to take further too.
Candidate flexsp_split(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                       const Plan& uniform, bool stack = true, std::vector<Candidate>* runners_up = nullptr) {
  const int n = static_cast<int>(len.size());
  const std::vector<int32_t> order = mb_longest_first(len);
  std::vector<double> prefix_w(n + 1, 0);
  std::vector<int64_t> prefix_tok(n + 1, 0);
  std::vector<SeqBounds> bounds(n);
  for (int i = 0; i < n; ++i) {
    bounds[i] = seq_bounds(c, len[order[i]]);
    prefix_w[i + 1] = prefix_w[i] + bounds[i].wmin;
    prefix_tok[i + 1] = prefix_tok[i] + len[order[i]];
  }
  std::vector<SeqBounds> by_seq(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) by_seq[order[i]] = bounds[i];
  const int64_t cap = c.tokens_per_rank * c.world;
  const int m0 = std::max<int>(1, static_cast<int>((prefix_tok[n] + cap - 1) / cap));
  // Chunk cost: the chunk's lower bound (its longest sequence leads it, order is descending).
  auto cost = [&](int b, int e) {
    if (prefix_tok[e] - prefix_tok[b] > cap) return std::numeric_limits<double>::infinity();
    return c.fixed_ms + std::max((prefix_w[e] - prefix_w[b]) / c.world, bounds[b].tmin);
  };
  std::vector<int> cuts;
  const int max_cuts = 256;
  for (int k = 1; k <= std::min(n, max_cuts); ++k)
    cuts.push_back(n <= max_cuts ? k : static_cast<int>(int64_t{n} * k / max_cuts));
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  auto split_dp = [&](int m) {
    std::vector<std::vector<int32_t>> mbs;
    const std::vector<int> ends = chunk_split(n, m, cuts, cost);
    for (int b = 0, k = 0; k < static_cast<int>(ends.size()); b = ends[k++])
      mbs.emplace_back(order.begin() + b, order.begin() + ends[k]);
    return mbs;
  };
  auto split_balanced = [&](int m) {  // longest first onto the micro-batch with least work
    std::vector<std::vector<int32_t>> mbs(m);
    std::vector<double> work(m, 0);
    std::vector<int64_t> tok(m, 0);
    for (int i = 0; i < n; ++i) {
      int best = -1;
      for (int k = 0; k < m; ++k)
        if (tok[k] + len[order[i]] <= cap && (best < 0 || work[k] < work[best])) best = k;
      if (best < 0) return std::vector<std::vector<int32_t>>{};
      mbs[best].push_back(order[i]);
      work[best] += bounds[i].wmin;
      tok[best] += len[order[i]];
    }
    return mbs;
  };
  // Tiered splits (mb_split.cpp) stack the pieces whose smallest group is wider than
  // half a node (and, second candidate, a quarter): these fix long, wide groups.
  std::vector<int> wide_from = {std::max(1, c.ranks_per_node / 2)};
  if (c.ranks_per_node / 4 >= 1 && c.ranks_per_node / 4 < wide_from[0]) wide_from.push_back(c.ranks_per_node / 4);
  const int longest_d = n > 0 ? c.min_size(len[order[0]]) : 0;
  auto try_m = [&](int m, double beat) {  // beat: a sum the caller would not take
    Candidate best;
    // Tiered splits under a cap of memory, and of halfway between it and an even share.
    std::vector<std::vector<std::vector<int32_t>>> splits = {split_dp(m), split_balanced(m)};
    for (int w : wide_from)
      if (longest_d > w)
        for (int64_t tc : mb_token_caps(c, prefix_tok[n], m)) splits.push_back(mb_split_tiered(c, len, m, tc, w));
    for (auto& mbs : splits) {
      if (static_cast<int>(mbs.size()) != m) continue;
      Candidate cand = plan_split(c, len, std::move(mbs), std::min(beat, best.total_ms), &by_seq);
      if (cand.ok && cand.total_ms < best.total_ms - 1e-9) best = std::move(cand);
    }
    return best;
  };
  // Candidates of different micro-batch counts compare by the step they make: with a
  // pipeline, the simulated one (plan_pipeline_ms). More micro-batches shrink the bubble
  // and each pays the fixed cost: with makespans summing to S, the closed form (S + m
  // fixed) (m k + pp - 1) / (m k) -- the estimate before the micro-batches are planned --
  // is least near m* = sqrt((pp - 1) S / (k fixed)); the counts around m* (at most 8 pp
  // past the fewest) are tried besides the usual few past the fewest.
  const int64_t tokens = prefix_tok[n];
  auto step = [&](const Candidate& k) { return candidate_step_ms(c, k, len, tokens); };
  Candidate best;
  int m = m0;
  const double inf = std::numeric_limits<double>::infinity();
  for (; m <= std::max(n, 1) && !best.ok; ++m) best = try_m(m, inf);
  auto consider = [&](Candidate cand) {
    if (cand.ok && step(cand) < step(best) - 1e-9) best = std::move(cand);
  };
  // Without a pipeline the step is the sum: a count whose sum reaches the best's loses.
  auto beat = [&] { return c.pipeline.pp <= 1 ? best.total_ms : inf; };
  for (int extra = 0; extra < ctx.extra_micro_batches && m <= n; ++extra, ++m) consider(try_m(m, beat()));
  if (c.pipeline.pp > 1 && best.ok) {
    const int mb = static_cast<int>(best.mbs.size());
    const double k = pp_units(c.pipeline, 1), span = best.total_ms - mb * c.fixed_ms;
    const double est = c.fixed_ms > 0 ? std::sqrt((c.pipeline.pp - 1) * span / (k * c.fixed_ms)) : 1e9;
    const int hi = std::min(n, m0 + 8 * c.pipeline.pp);
    const int centre = static_cast<int>(std::clamp<double>(std::round(est), m0, hi));
    for (int t : {centre - 1, centre, centre + 1})
      if (t >= m && t <= hi) consider(try_m(t, inf));
  }
  // The best uniform plan's split (memory-feasible by construction, where the token-count
  // splits above can strand memory in big groups), each micro-batch planned afresh; its
  // uniform groups stand where the greedy plan is not better.
  if (!uniform.micro_batches.empty()) {
    Candidate cand;
    cand.ok = true;
    cand.total_ms = 0;
    for (const PlanMicroBatch& mb : uniform.micro_batches) {
      std::vector<int32_t> seqs;
      for (const PlanGroup& g : mb.groups) seqs.insert(seqs.end(), g.seqs.begin(), g.seqs.end());
      MbPlan p = mb_greedy(c, len, seqs);
      // The uniform groups stand where they obey holds() (a uniform d wider than the heads
      // carries short sequences too: not flexsp's rule).
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
    if (cand.ok && step(cand) < step(best) - 1e-9) best = std::move(cand);
  }
  // The stacked split: the pieces whose least rank-time is on a group of the whole stage
  // (within 1%: long ring pieces, the ring's steps hiding the transfers), longest first,
  // in micro-batches of their own, where they run at their least rank-time with no device
  // idle; the rest split as above at its fewest count. The chunk DP's bound (least work,
  // longest alone) does not see what shorter sequences lose beside them on that group
  // (they are cheaper on narrower groups): on the 1M long tail at 64 GPUs it cut 280K
  // between 293K and four 110-130K pieces, all on one ring. Tried where the stack fills
  // 3/4 of its micro-batches' memory: every emptier stack of the 1M long tail lost.
  int stack_end = 0;
  if (c.max_size() == c.world)
    while (stack_end < n && c.holds(len[order[stack_end]], c.world) &&
           c.world * c.seq_ms(len[order[stack_end]], c.world) <= bounds[stack_end].wmin * 1.01)
      ++stack_end;
  std::vector<std::vector<int32_t>> stacked;  // contiguous, each under the memory cap
  int64_t stacked_tok = 0;
  for (int i = 0; stack && i < stack_end; ++i) {
    const int64_t l = len[order[i]];
    if (stacked.empty() || stacked_tok + l > cap) stacked.emplace_back(), stacked_tok = 0;
    stacked.back().push_back(order[i]);
    stacked_tok += l;
  }
  const bool stack_full = 4 * prefix_tok[stack_end] >= 3 * cap * static_cast<int64_t>(stacked.size());
  if (stack && !stacked.empty() && stack_end < n && stack_full) {
    Candidate cand = plan_split(c, len, std::move(stacked));
    // The rest split and planned on its own (its pieces are not world-wide: no recursion).
    std::vector<int64_t> rest_len;
    for (int i = stack_end; i < n; ++i) rest_len.push_back(len[order[i]]);
    PlannerContext fewest = ctx;  // the rest at its fewest micro-batches only: a third of the cost
    fewest.extra_micro_batches = 0;
    fewest.seed_split.clear();  // indices of the whole batch, not of the rest
    Candidate rest = flexsp_split(fewest, c, rest_len, Plan{}, false);
    auto to_batch = [&](int32_t q) { return order[stack_end + q]; };
    for (size_t k = 0; k < rest.mbs.size() && cand.ok && rest.ok; ++k) {
      for (int32_t& q : rest.mbs[k]) q = to_batch(q);
      for (PlanGroup& g : rest.plans[k].groups)
        for (int32_t& q : g.seqs) q = to_batch(q);
      cand.total_ms += c.fixed_ms + rest.plans[k].makespan_ms;
      cand.mbs.push_back(std::move(rest.mbs[k]));
      cand.plans.push_back(std::move(rest.plans[k]));
    }
    if (cand.ok && rest.ok && step(cand) < step(best) - 1e-9) {
      if (runners_up) runners_up->push_back(std::move(best));
      best = std::move(cand);
    }
  }
  FLEXSP_CHECK(best.ok, "planner: no plan fits memory for a batch of {} sequences", n);
  if (!ctx.seed_split.empty()) {  // an experiment's start replaces the candidates (planner.h)
    Candidate seeded = seeded_split(c, len, ctx.seed_split, prefix_tok[n], inf);
    if (seeded.ok) {
      seeded.seeded = true;
      best = std::move(seeded);
      if (runners_up) runners_up->clear();
    }
  }
  fill_candidate(c, len, tokens, best);
  if (runners_up)
    for (Candidate& k : *runners_up) fill_candidate(c, len, tokens, k);
  return best;
}

// plan_flexsp's second phase, the local search over the split, within its share of
// ctx.time_limit_ms counted from t0.
Candidate flexsp_local_search(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                              Candidate best, Clock::time_point t0, PlanStats* st) {
  int64_t tokens = 0;
  for (int64_t l : len) tokens += l;
  auto step = [&](const Candidate& k) { return candidate_step_ms(c, k, len, tokens); };
  if (st) st->seeded = best.seeded;
  {  // local search over the split (mb_solver.h): exchanges, partners for the groups with
     // slack, exchanges again after partners moved, a micro-batch dissolved (exchanges
     // again after it), then exchanges into any micro-batch with swaps; each kept when the
     // step is faster (a pipeline's bubble grows if a micro-batch empties). Its share of
     // the time limit is half, counted from its own start, so that slow candidates (1024
     // GPUs: ~0.8 s of 2) do not use it up; it ends by 90% of the limit, leaving the MILPs
     // the rest.
    const double start = ms_since(t0);
    const double budget = std::min(start + 0.5 * ctx.time_limit_ms, 0.9 * ctx.time_limit_ms);
    auto out_of_time = [&] { return ctx.time_limit_ms > 0 && ms_since(t0) > budget; };
    auto improve = [&](const auto& pass) {
      Candidate cand = best;
      const int kept = pass(cand);
      cand.total_ms = 0;
      for (const MbPlan& p : cand.plans) cand.total_ms += c.fixed_ms + p.makespan_ms;
      if (kept == 0 || step(cand) >= step(best) - 1e-9) return 0;
      best = std::move(cand);
      return kept;
    };
    auto exchange = [&](Candidate& k) {
      return mb_exchange(c, len, k.mbs, k.plans, ctx.exchange_max_tries, out_of_time);
    };
    const int exchanged = improve(exchange);
    const int partnered = improve([&](Candidate& k) {
      return mb_partner(c, len, k.mbs, k.plans, ctx.partner_max_tries, out_of_time);
    });
    int again = partnered > 0 ? improve(exchange) : 0;
    const int dissolved =
        improve([&](Candidate& k) { return mb_dissolve(c, len, k.mbs, k.plans, ctx.dissolve_max_tries, out_of_time); });
    if (dissolved > 0) again += improve(exchange);
    // Last, exchanges into any micro-batch, slower ones too, and swaps (mb_solver.h): a long
    // piece beside the widest pieces can free a whole micro-batch's critical group.
    again += improve([&](Candidate& k) {
      return mb_exchange(c, len, k.mbs, k.plans, ctx.swap_max_tries, out_of_time, true);
    });
    // Then pairs of micro-batches split again (mb_solver.h), where wide_passes says (the
    // 64-GPU layout search on lengths up to 20K took 53 s with it everywhere, 28 s without).
    const int resplit = !wide_passes(c, len) ? 0 : improve([&](Candidate& k) {
      return mb_resplit(c, len, k.mbs, k.plans, ctx.resplit_max_tries, out_of_time);
    });
    if (st) st->exchanges = exchanged + again, st->partners = partnered, st->dissolved = dissolved, st->resplit = resplit;
  }
  if (st) st->greedy_ms = step(best);
  return best;
}

// plan_flexsp's last phase: the MILPs and mb_resize on the winner of the local search,
// within what is left of ctx.time_limit_ms counted from t0.
Plan flexsp_finish(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                   Candidate best, Clock::time_point t0, PlanStats* st) {
  const int n = static_cast<int>(len.size());
  int64_t tokens = 0;
  for (int64_t l : len) tokens += l;
  auto step = [&](const Candidate& k) { return candidate_step_ms(c, k, len, tokens); };
  // Per micro-batch, within what is left of the time limit: the class MILP picks group
  // sizes (any scale); the slot MILP, exact, where it is small enough to close.
  if (ctx.use_milp && n > 0) {
    const int nmb = static_cast<int>(best.mbs.size());
    for (int k = 0; k < nmb; ++k) {
      auto share = [&] { return (ctx.time_limit_ms - ms_since(t0)) / (nmb - k); };
      if (share() < 1) {  // no time left: greedy stands
        if (st) st->milp_timed_out++;
        continue;
      }
      ComposeOptions co;
      co.time_limit_ms = share();
      MbPlan mp;
      const ComposeStatus cs = mb_compose(c, len, best.mbs[k], best.plans[k], co, &mp);
      if (cs == ComposeStatus::timed_out) {
        if (st) st->milp_timed_out++;
        continue;
      }
      if (st) st->milp_solved++;
      if (cs == ComposeStatus::improved) {
        best.plans[k] = std::move(mp);
        if (st) st->milp_improved++;
      }
      MilpOptions opt;
      opt.max_buckets = ctx.max_buckets;
      opt.time_limit_ms = share();
      opt.max_columns = ctx.milp_max_columns;
      opt.max_nodes = ctx.milp_max_nodes;
      if (opt.time_limit_ms < 1) continue;
      const MilpStatus s = mb_milp(c, len, best.mbs[k], best.plans[k], opt, &mp);
      if (s == MilpStatus::timed_out && st) st->milp_timed_out++;
      if (mp.ok && mp.makespan_ms < best.plans[k].makespan_ms * (1 - 1e-9)) {
        best.plans[k] = std::move(mp);
        if (st) st->milp_improved++;
      }
    }
  }
  {  // last, each micro-batch's group sizes re-sized (mb_solver.h): after the MILPs, whose
     // compositions from the greedy plan can beat the re-sized one; kept when the step is
     // faster (a pipeline prices the plan as a whole)
    Candidate resized = best;
    int changed = 0;
    best.total_ms = resized.total_ms = 0;  // the MILPs changed plans, not the totals
    for (size_t k = 0; k < resized.plans.size(); ++k) {
      const double before = resized.plans[k].makespan_ms;
      if (ctx.time_limit_ms == 0 || ms_since(t0) < ctx.time_limit_ms) {
        mb_resize(c, len, resized.mbs[k], resized.plans[k], ctx.resize_max_rounds);
        if (ctx.resize_max_rounds > 0)
          if (MbPlan u = mb_pooled(c, len, resized.mbs[k]); u.ok && u.makespan_ms < resized.plans[k].makespan_ms)
            resized.plans[k] = std::move(u);
      }
      if (resized.plans[k].makespan_ms < before) ++changed;
      best.total_ms += c.fixed_ms + before;
      resized.total_ms += c.fixed_ms + resized.plans[k].makespan_ms;
    }
    if (changed > 0 && step(resized) < step(best) - 1e-9) {
      best = std::move(resized);
      if (st) st->resized = changed;
    }
  }
  return to_plan(best.plans);
}

}  // namespace

void plan_keep_faster(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                      PlanClock::time_point t0, Plan& p, PlanStats* st,
                      const std::function<Plan(const PlannerContext&, PlanStats*)>& plan_fn) {
  PlannerContext rest = ctx;
  if (ctx.time_limit_ms > 0) {
    rest.time_limit_ms = static_cast<int>(ctx.time_limit_ms - ms_since(t0));
    if (rest.time_limit_ms < std::max(1, ctx.time_limit_ms / 2)) return;
  }
  PlanStats alt_st;
  Plan q = plan_fn(rest, &alt_st);
  if (plan_predict_ms(c, q, len) < plan_predict_ms(c, p, len) - 1e-9) {
    p = std::move(q);
    if (st) *st = alt_st;
  }
}

// Past 256 devices the wide passes do not run (wide_passes), so a sample brings their
// splits: one sequence of each run of S by length (its middle; S = world / sample_devices),
// planned on world / S devices with every pass, then replicated as a seed -- each sampled
// sequence's micro-batch and group size given to every sequence of its run. The true fixed
// cost keeps the sample's trade between micro-batches and makespans the batch's. Where
// the longest piece needs more than half a node, as for the wide passes.
bool sample_passes(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len) {
  int64_t longest = 0;
  for (int64_t l : len) longest = std::max(longest, l);
  return ctx.sample_devices > 0 && c.world > 256 && c.world >= 2 * ctx.sample_devices &&
         c.max_size() <= ctx.sample_devices && c.min_size(longest) > std::max(1, c.ranks_per_node / 2);
}

Candidate sample_split(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                       Clock::time_point t0) {
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
  int64_t tokens = 0;
  for (int64_t l : len) tokens += l;
  Candidate k = seeded_split(c, len, seed, tokens, std::numeric_limits<double>::infinity());
  if (k.ok) fill_candidate(c, len, tokens, k);
  return k;
}

// The split's best through the local search; where the stacked split won, the best of the
// other splits too: the local search can reverse their order (the 20 longest pieces of a
// 1M long-tail step: 47.06 s from the stacked split, 46.69 s from the other). Then, where
// the longest piece's smallest group is wider than half a node and the stage has at most
// 256 devices, the levels split (levels_split) of the winner's count, one less and one
// more, without and with pieces sharing groups: a levels split that loses before the local
// search often wins after it (long tail, 64 GPUs, median of 5 steps over the memory-aware
// bound: 80 GB 1.059 -> 1.040, 120 GB 1.089 -> 1.076). At 1024 GPUs they won nothing and
// cost 5 s per step. Last, the winner's count with the first level widened too (a second
// heavy tail, Pareto 1.1: 4.7% off a step whose 192K pieces otherwise pull the 70-110K ones
// beside them). Each alternative starts only while half of the time limit is left (under
// the trainer's 1000 ms the last rarely starts); the MILPs and mb_resize then finish the
// fastest.
Plan plan_flexsp(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                 const Plan& uniform, Clock::time_point t0, PlanStats* st) {
  int64_t tokens = 0;
  for (int64_t l : len) tokens += l;
  auto step = [&](const Candidate& k) { return candidate_step_ms(c, k, len, tokens); };
  std::vector<Candidate> runners_up;
  Candidate first = flexsp_split(ctx, c, len, uniform, true, &runners_up);
  const int m = static_cast<int>(first.mbs.size());
  Candidate best = flexsp_local_search(ctx, c, len, std::move(first), t0, st);
  auto time_left = [&] { return ctx.time_limit_ms == 0 || ms_since(t0) < 0.5 * ctx.time_limit_ms; };
  auto try_alternative = [&](Candidate k) {
    PlanStats alt;
    Candidate r = flexsp_local_search(ctx, c, len, std::move(k), t0, &alt);
    if (step(r) < step(best) - 1e-9) {
      best = std::move(r);
      if (st) *st = alt;
    }
  };
  for (Candidate& k : runners_up)
    if (time_left()) try_alternative(std::move(k));
  const int64_t cap = c.tokens_per_rank * c.world;
  const int fewest = static_cast<int>((tokens + cap - 1) / cap);
  if (ctx.seed_split.empty() && wide_passes(c, len)) {
    const int counts[] = {m, m - 1, m + 1};
    for (int i = 0; i < std::min(3, ctx.levels_max_counts); ++i)
      for (double share : {0.0, 0.1})
        if (counts[i] >= std::max(1, fewest) && time_left())
          if (Candidate lv = levels_split(c, len, counts[i], share, false); lv.ok) try_alternative(std::move(lv));
    // Last, so that under a limit it never pushes out the others: the first level widened.
    if (ctx.levels_max_counts > 0 && m >= std::max(1, fewest) && time_left())
      if (Candidate lv = levels_split(c, len, m, 0.0, true); lv.ok) try_alternative(std::move(lv));
  }
  // Past 256 devices, a sample's split (long tail, 1024 GPUs, step 0 at limit 0: 55,562 ->
  // 54,778 ms; the split alone is no good, the local search and the MILPs make it).
  if (ctx.seed_split.empty() && sample_passes(ctx, c, len) && time_left())
    if (Candidate k = sample_split(ctx, c, len, t0); k.ok) try_alternative(std::move(k));
  return flexsp_finish(ctx, c, len, std::move(best), t0, st);
}

}  // namespace flexsp

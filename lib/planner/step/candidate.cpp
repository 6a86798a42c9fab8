// Candidates of flexsp's search (candidate.h).
#include "lib/planner/step/candidate.h"

#include <algorithm>
#include <cmath>

namespace flexsp {

double ms_since(PlanClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(PlanClock::now() - t0).count();
}

int64_t total_tokens(const std::vector<int64_t>& len) {
  int64_t tokens = 0;
  for (int64_t l : len) tokens += l;
  return tokens;
}

SeqBounds seq_bounds(const PlanCosts& c, int64_t l) {
  SeqBounds b{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  for (int d : c.sizes)
    if (c.holds(l, d)) {
      b.tmin = std::min(b.tmin, c.seq_ms(l, d));
      b.wmin = std::min(b.wmin, d * c.seq_ms(l, d));
    }
  return b;
}

Candidate plan_split(const PlanCosts& c, const std::vector<int64_t>& len, std::vector<std::vector<int32_t>> mbs,
                     double beat, const std::vector<SeqBounds>* by_seq) {
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

void candidate_total(const PlanCosts& c, Candidate& k) {
  k.total_ms = 0;
  for (const MbPlan& p : k.plans) k.total_ms += c.fixed_ms + p.makespan_ms;
}

double candidate_step_ms(const PlanCosts& c, const Candidate& k, const std::vector<int64_t>& len, int64_t tokens) {
  if (c.pipeline.pp <= 1 || !k.ok) return c.step_ms(k.total_ms, static_cast<int>(k.mbs.size()), tokens);
  std::vector<const std::vector<PlanGroup>*> groups;
  for (const MbPlan& p : k.plans) groups.push_back(&p.groups);
  return plan_pipeline_ms(c, groups, len);
}

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

void fill_candidate(const PlanCosts& c, const std::vector<int64_t>& len, int64_t tokens, Candidate& k,
                    const std::function<bool()>& out_of_time) {
  Candidate filled = k;
  if (mb_fill(c, len, filled.mbs, filled.plans, 64, out_of_time)) {
    candidate_total(c, filled);
    if (candidate_step_ms(c, filled, len, tokens) < candidate_step_ms(c, k, len, tokens) - 1e-9) k = std::move(filled);
  }
}

Plan candidate_plan(const Candidate& k) {
  Plan p;
  for (const MbPlan& m : k.plans) p.micro_batches.push_back({m.groups});
  return p;
}

}  // namespace flexsp

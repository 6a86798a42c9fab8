// Offload or a wider group, per micro-batch (PlannerContext::offload_choice,
// train.offload = auto; docs/offload.md). Offload buys memory -- more tokens per device, so
// a long sequence fits a narrower group and a micro-batch holds more -- and costs the
// copies (PlanCosts: a2 at least the blocks' round trip at bw_h2d). Which wins depends on
// the micro-batch: one whose longest sequence must otherwise spread wide gains, one of
// short sequences only pays. So the step is planned in both spaces -- without offload
// (where every sequence fits) and with it -- and in each plan every micro-batch then takes
// the faster of the two layouts of its own sequences: its groups as planned, those groups
// without offload where they fit, and each side's greedy re-plan (mb_greedy + mb_resize).
// The faster plan of the two spaces is kept. Each space gets half the time limit, so
// neither crowds out the other at scale.
#include "lib/planner/step/offload_choice.h"

#include <algorithm>


namespace flexsp {

namespace {

// Whether every group of mb fits c's memory.
bool fits(const PlanCosts& c, const std::vector<int64_t>& len, const std::vector<PlanGroup>& groups) {
  for (const PlanGroup& g : groups) {
    int64_t tok = 0;
    for (int32_t s : g.seqs) tok += len[s];
    if (tok > c.tokens_per_rank * g.size) return false;
    for (int32_t s : g.seqs)
      if (!c.holds(len[s], g.size)) return false;
  }
  return true;
}

}  // namespace

int mb_offload_choose(const PlanCosts& c, const std::vector<int64_t>& len, Plan& p, int resize_rounds, bool regroup) {
  if (!c.offload_costs) return 0;
  PlanCosts plain = c;
  plain.offload_costs.reset();
  const PlanCosts& off = *c.offload_costs;
  int offloaded = 0;
  for (PlanMicroBatch& mb : p.micro_batches) {
    if (mb.offload && fits(plain, len, mb.groups)) mb.offload = false;  // the same groups, no copies
    offloaded += mb.offload && !regroup ? 1 : 0;
    if (!regroup) continue;
    double best = mb_makespan(c.of(mb), len, mb.groups);
    std::vector<int32_t> seqs;
    for (const PlanGroup& g : mb.groups) seqs.insert(seqs.end(), g.seqs.begin(), g.seqs.end());
    for (const bool o : {false, true}) {
      const PlanCosts& k = o ? off : plain;
      MbPlan q = mb_greedy(k, len, seqs);
      if (!q.ok) continue;
      mb_resize(k, len, seqs, q, resize_rounds);
      // Ties keep what the micro-batch has, and the layout without offload.
      if (q.makespan_ms < best * (1 - 1e-9)) best = q.makespan_ms, mb.groups = std::move(q.groups), mb.offload = o;
    }
    offloaded += mb.offload ? 1 : 0;
  }
  return offloaded;
}

Plan plan_offload_choice(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                         PlanClock::time_point t0, PlanStats* st, const PlanInSpace& plan_in) {
  PlanCosts plain = c;
  plain.offload_costs.reset();
  const PlanCosts& off = *c.offload_costs;
  int64_t longest = ctx.mode == SpMode::static_sp ? ctx.max_seq_len : 1;  // static sizes for it
  int64_t tokens = 0;
  for (int64_t l : len) longest = std::max(longest, l), tokens += l;
  auto space = [&](const PlanCosts& k, bool offload) {
    return [&, offload](const PlannerContext& rest, PlanStats* s) {
      Plan q = plan_in(rest, k, PlanClock::now(), s);
      for (PlanMicroBatch& mb : q.micro_batches) mb.offload = offload;
      mb_offload_choose(c, len, q, ctx.resize_max_rounds, ctx.mode == SpMode::flexsp);
      return q;
    };
  };
  if (tokens <= plain.tokens_per_rank) return space(plain, false)(ctx, st);  // any group holds the batch
  if (plain.min_size(longest) == 0) return space(off, true)(ctx, st);  // only offload holds the longest
  PlannerContext half = ctx;
  if (ctx.time_limit_ms > 0) half.time_limit_ms = std::max(1, (ctx.time_limit_ms - static_cast<int>(ms_since(t0))) / 2);
  Plan p = space(plain, false)(half, st);
  PlanStats with_st;
  Plan q = space(off, true)(half, &with_st);
  if (plan_predict_ms(c, q, len) < plan_predict_ms(c, p, len) - 1e-9) {
    p = std::move(q);
    if (st) *st = with_st;
  }
  return p;
}

}  // namespace flexsp

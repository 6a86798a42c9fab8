// The local search over a split as a table of passes (planner.h, step 2). Each entry names
// a pass over the split (lib/planner/mb/, its file named as the pass), the gate that says
// whether it runs, its budget of tries (PlannerContext) and the PlanStats counter of what
// it kept; one loop runs them in order. A pass's result is kept only where the step gets
// faster (a pipeline's bubble grows if a micro-batch empties).
//
// The order, and why (on stages past gates.front_passes_after_devices unload and dissolve
// also run first, see context.h):
//  - exchange: a sequence of the slowest micro-batch's critical group for shorter ones of
//    a faster micro-batch, first, as the cheapest repair of a token-count split;
//  - partner: groups with slack (a wide piece alone on the group its memory needs) take
//    other micro-batches' sequences; exchange again where it moved something;
//  - unload: a micro-batch whose bound is its longest sequence alone, lengthened past it by
//    what sits beside it (memory), cut back to that time, the rest moved to the others or
//    to a micro-batch of its own (before dissolve, which may merge that one back only
//    where the step gets faster);
//  - dissolve: a fast micro-batch spread over the others (its fixed cost saved); exchange
//    again after it;
//  - swap: exchanges into any micro-batch, slower ones too, with swaps: a long piece
//    beside the widest pieces can free a whole micro-batch's critical group;
//  - resplit: pairs of micro-batches pooled and split again, the largest neighbourhood,
//    only where gate_wide_passes says it pays (elsewhere it costs time and finds nothing).
// Time: the local search gets gates.local_search_share of the limit counted from its own
// start, so that slow candidates do not use it up, and ends by gates.local_search_end of
// it, leaving the MILPs the rest; each pass checks out_of_time between its tries.
#include "lib/planner/step/passes.h"

#include <algorithm>
#include <functional>

#include "lib/planner/step/gates.h"

namespace flexsp {

namespace {

// What a pass's gate sees: the step, and what the pass before it kept.
struct GateInput {
  const PlannerContext& ctx;
  const PlanCosts& c;
  const std::vector<int64_t>& len;
  int kept_before;
};
using PassGate = bool (*)(const GateInput&);
bool always(const GateInput&) { return true; }
bool after_kept(const GateInput& g) { return g.kept_before > 0; }
bool wide_passes(const GateInput& g) { return gate_wide_passes(g.ctx, g.c, g.len); }
bool wide_stage(const GateInput& g) { return g.c.world > g.ctx.gates.front_passes_after_devices; }

using OutOfTime = std::function<bool()>;
using PassRun = int (*)(const PlanCosts&, const std::vector<int64_t>&, Candidate&, int tries, const OutOfTime&);
int exchange(const PlanCosts& c, const std::vector<int64_t>& len, Candidate& k, int tries, const OutOfTime& out) {
  return mb_exchange(c, len, k.mbs, k.plans, tries, out);
}
int partner(const PlanCosts& c, const std::vector<int64_t>& len, Candidate& k, int tries, const OutOfTime& out) {
  return mb_partner(c, len, k.mbs, k.plans, tries, out);
}
int unload(const PlanCosts& c, const std::vector<int64_t>& len, Candidate& k, int tries, const OutOfTime& out) {
  return mb_unload(c, len, k.mbs, k.plans, tries, out);
}
int dissolve(const PlanCosts& c, const std::vector<int64_t>& len, Candidate& k, int tries, const OutOfTime& out) {
  return mb_dissolve(c, len, k.mbs, k.plans, tries, out);
}
int swap(const PlanCosts& c, const std::vector<int64_t>& len, Candidate& k, int tries, const OutOfTime& out) {
  return mb_exchange(c, len, k.mbs, k.plans, tries, out, true);
}
int resplit(const PlanCosts& c, const std::vector<int64_t>& len, Candidate& k, int tries, const OutOfTime& out) {
  return mb_resplit(c, len, k.mbs, k.plans, tries, out);
}

struct LocalPass {
  const char* name;
  PassGate gate;
  int PlannerContext::*budget;
  int PlanStats::*counter;
  PassRun run;
};

constexpr LocalPass kLocalPasses[] = {
    {"unload", wide_stage, &PlannerContext::unload_max_tries, &PlanStats::unloaded, unload},
    {"dissolve", wide_stage, &PlannerContext::dissolve_max_tries, &PlanStats::dissolved, dissolve},
    {"exchange", always, &PlannerContext::exchange_max_tries, &PlanStats::exchanges, exchange},
    {"partner", always, &PlannerContext::partner_max_tries, &PlanStats::partners, partner},
    {"exchange", after_kept, &PlannerContext::exchange_max_tries, &PlanStats::exchanges, exchange},
    {"unload", always, &PlannerContext::unload_max_tries, &PlanStats::unloaded, unload},
    {"dissolve", always, &PlannerContext::dissolve_max_tries, &PlanStats::dissolved, dissolve},
    {"exchange", after_kept, &PlannerContext::exchange_max_tries, &PlanStats::exchanges, exchange},
    {"swap", always, &PlannerContext::swap_max_tries, &PlanStats::exchanges, swap},
    {"resplit", wide_passes, &PlannerContext::resplit_max_tries, &PlanStats::resplit, resplit},
};

}  // namespace

std::vector<std::string> local_pass_names() {
  std::vector<std::string> names;
  for (const LocalPass& p : kLocalPasses) names.push_back(p.name);
  return names;
}

Candidate local_search(const PlannerContext& ctx, const PlanCosts& c, const std::vector<int64_t>& len,
                       Candidate best, PlanClock::time_point t0, PlanStats* st) {
  const int64_t tokens = total_tokens(len);
  auto step = [&](const Candidate& k) { return candidate_step_ms(c, k, len, tokens); };
  if (st) st->seeded = best.seeded;
  const double budget = std::min(ms_since(t0) + ctx.gates.local_search_share * ctx.time_limit_ms,
                                 ctx.gates.local_search_end * ctx.time_limit_ms);
  const OutOfTime out_of_time = [&] { return ctx.time_limit_ms > 0 && ms_since(t0) > budget; };
  PlanStats kept_by;
  int kept = 0;
  for (const LocalPass& p : kLocalPasses) {
    if (p.gate({ctx, c, len, kept})) {
      Candidate cand = best;
      kept = p.run(c, len, cand, ctx.*p.budget, out_of_time);
      candidate_total(c, cand);
      if (kept > 0 && step(cand) < step(best) - 1e-9) {
        best = std::move(cand);
      } else {
        kept = 0;
      }
    } else {
      kept = 0;
    }
    kept_by.*p.counter += kept;
  }
  if (st) {
    for (const LocalPass& p : kLocalPasses) st->*p.counter = kept_by.*p.counter;
    st->greedy_ms = step(best);
  }
  return best;
}

}  // namespace flexsp

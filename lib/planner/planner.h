// The FlexSP planner (docs/planner.md): the sequence lengths of one step's global batch ->
// a Plan (lib/plan/plan.h): micro-batches, aligned power-of-two SP groups, sequences on
// the groups. The planner sits beside the runtime on top of lib/plan/ and its own cost
// model; it imports neither the runtime nor the trainer.
//
// Layout of lib/planner/: context.h (what planning needs, and its one builder), cost/ (the
// cost and memory models and the prices of a plan: plan_costs.h), mb/ (one micro-batch's
// solvers and the passes over a split, each file named as its pass), step/ (plan_step: the
// baselines and flexsp's search -- split generators, the local-search pass table, the
// MILPs), and analysis/ (offline: bounds, layout search, simulate, fits), which the
// per-step planner never includes.
//
// Per step, for sp_mode flexsp (step/flexsp.h):
//  1. the split: micro-batch counts from the fewest that fit memory up, each split by the
//     named split rules (step/splits.h), every micro-batch planned greedily; the best by
//     the step it makes (with a pipeline, the simulated one) wins, then mb_fill;
//  2. the local search (step/passes.cpp): a table of passes over the split -- exchange,
//     partner, exchange, unload, dissolve, exchange, swap, resplit -- each with a gate, a budget
//     of tries and a PlanStats counter, kept only where the step gets faster; then the
//     same for alternative splits (runners-up, levels splits, a sample's split) while
//     the time limit allows, the fastest going on;
//  3. per micro-batch, the class MILP on CBC (mb_compose) and, when asked, the exact slot
//     MILP (mb_milp); last, mb_resize. The better plan by the real makespan is kept.
// Baselines in the same code: static (one d for every step) and batch_adaptive (one d per
// step, the best by predicted time); flexsp's candidates include batch_adaptive's split,
// so a flexsp plan is never predicted slower. Every plan returned passes plan_validate.
//
// Deterministic: no clock or random number steers the search. CBC runs one thread with a
// fixed seed under node limits; the time limit is a guard: a MILP it stops proposes
// nothing and its micro-batch keeps the plan it had (counted in PlanStats::milp_timed_out),
// the local search stops at its share of it (PlannerGates), alternatives start only
// while their share is left, and the first split tries no more counts or rules past its
// share: the only cases in which two runs can differ. The limit itself is time_limit_ms at
// most time_step_share of the first split's predicted step (planning runs during the
// previous step), a prediction, the same in every run. time_limit_ms = 0
// plans greedily (the passes then stop at their budgets only); `flexsp plan --exact-milp`
// takes the slot MILP's best plan at the limit, so that mode depends on the clock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "lib/plan/plan.h"
#include "lib/planner/context.h"
#include "lib/planner/cost/plan_costs.h"

namespace flexsp {

struct PlanStats {
  double predicted_ms = 0;    // the plan's predicted step time
  double unpipelined_ms = 0;  // the same work without the pipeline's bubble: the stage's share
                              // of sum(fixed + makespan) + the boundary p2p (pp 1: predicted)
  double lower_bound_ms = 0;  // plan_lower_bound_ms: no plan of the batch is faster
  double solve_ms = 0;        // wall time of plan_step
  double greedy_ms = 0;       // predicted time of the greedy plan (flexsp mode)
  int micro_batches = 0;
  int milp_solved = 0;        // micro-batches whose class MILP search finished
  int milp_timed_out = 0;     // MILPs the time limit stopped (their micro-batch kept its plan)
  int milp_improved = 0;      // MILPs that beat the plan they started from
  int exchanges = 0;          // mb_exchange: exchanges between micro-batches kept
  int partners = 0;           // mb_partner: sequences moved into other groups' slack
  int unloaded = 0;           // mb_unload: micro-batches cut back to their longest sequence's time
  int dissolved = 0;          // mb_dissolve: micro-batches spread over the others
  int resplit = 0;            // mb_resplit: pairs of micro-batches split again
  int resized = 0;            // mb_resize: micro-batches whose group sizes changed
  int offloaded = 0;          // micro-batches with activation offload
  bool seeded = false;        // PlannerContext::seed_split fit and started the local search
};

// The plan of one step. lengths[i] = tokens of sequence i of the global batch. Throws
// Error for an infeasible batch (a sequence longer than the largest runnable group holds).
Plan plan_step(const PlannerContext& ctx, const std::vector<int64_t>& lengths,
               PlanStats* stats = nullptr);

// The static baseline's d: ctx.static_sp_size, else the smallest allowed d that holds
// ctx.max_seq_len (or the longest of `lengths` when that is 0).
int plan_static_size(const PlannerContext& ctx, const PlanCosts& c,
                     const std::vector<int64_t>& lengths);

// Plans ahead: rank 0 submits step k+1's lengths while step k trains; a worker thread
// plans it. No MPI on the thread: wait() returns the plan on rank 0, which then calls
// plan_broadcast. Errors of the planning are rethrown by wait().
class PlanAhead {
 public:
  explicit PlanAhead(PlannerContext ctx);
  ~PlanAhead();  // drops steps not yet started, finishes the one running, joins
  PlanAhead(const PlanAhead&) = delete;
  PlanAhead& operator=(const PlanAhead&) = delete;

  void submit(int64_t step, std::vector<int64_t> lengths);
  // Blocks until step's plan is ready; wait_ms (optional) gets the time blocked here, the
  // "plan wait" of the timing report. Throws Error if step was never submitted.
  Plan wait(int64_t step, double* wait_ms = nullptr, PlanStats* stats = nullptr);

 private:
  struct Result {
    Plan plan;
    PlanStats stats;
    std::exception_ptr error;
  };
  void run();

  const PlannerContext ctx_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int64_t, std::vector<int64_t>>> queue_;
  std::map<int64_t, Result> done_;
  std::map<int64_t, bool> pending_;  // submitted, not yet collected
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace flexsp

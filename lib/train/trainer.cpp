#include "lib/train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>

#include "lib/data/mixture.h"
#include "lib/optim/optim.h"
#include "lib/plan/plan.h"
#include "lib/planner/planner.h"
#include "lib/planner/cost/sim_price.h"
#include "lib/runtime/micro_batch.h"
#include "lib/util/agree.h"
#include "lib/util/error.h"

namespace flexsp {

namespace {

// The stop request of SIGTERM / SIGUSR1 (the signal number; 0: none). A global because a
// signal handler can reach nothing else; sig_atomic_t writes are async-signal-safe.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void note_stop_signal(int sig) { g_stop_signal = sig; }

void install_stop_handlers(struct sigaction* old_term, struct sigaction* old_usr1) {
  struct sigaction sa {};
  sa.sa_handler = note_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI's system calls carry on; the loop looks at the flag
  sigaction(SIGTERM, &sa, old_term);
  sigaction(SIGUSR1, &sa, old_usr1);
}

// Installs the handlers for the duration of a run and restores the previous ones after.
// A request noted before (catch_stop_signals) stands: the run stops after its first step.
class StopSignals {
 public:
  StopSignals() { install_stop_handlers(&old_term_, &old_usr1_); }
  ~StopSignals() {
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGUSR1, &old_usr1_, nullptr);
    g_stop_signal = 0;
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_term_ {}, old_usr1_ {};
};

}  // namespace

void catch_stop_signals() { install_stop_handlers(nullptr, nullptr); }

namespace {

std::vector<int64_t> lengths_of(const std::vector<SeqRef>& batch) {
  std::vector<int64_t> l;
  l.reserve(batch.size());
  for (const SeqRef& s : batch) l.push_back(s.length);
  return l;
}

// The step's compute: the plan's schedule of micro-batches, then the gradient reduction
// and the optimizer. Fills loss, lr, grad_norm, predictions and micro_batches. Throws
// Error (the weights unchanged) when the loss or the gradient norm is not finite.
void train_step(TrainSession& s, const Plan& plan, const std::vector<SeqRef>& batch,
                const TokenDataset& ds, StepRecord& r) {
  const RunConfig& cfg = s.cfg();
  ZeroOptimizer& zero = s.zero();
  r.predictions = count_predictions(batch);
  zero.zero_grads();
  const ExecStats ex =
      s.run_plan(plan, batch, ds, 1.0 / static_cast<double>(r.predictions), &r.phases);
  double loss_sum = ex.loss_sum;
  s.parallel().world_groups().world->all_reduce(&loss_sum, &loss_sum, 1, DType::f64, ReduceOp::sum);
  r.loss = loss_sum / static_cast<double>(r.predictions);
  r.lr = lr_at(cfg.optim, r.step, cfg.train.steps);
  r.grad_norm = std::isfinite(r.loss) ? zero.step(cfg.optim, r.lr, &r.phases) : std::nan("");
  FLEXSP_CHECK(std::isfinite(r.loss) && std::isfinite(r.grad_norm),
               "step {}: the loss ({}) or the gradient norm ({}) is not finite; the weights "
               "were not updated", r.step, r.loss, r.grad_norm);
  r.micro_batches = static_cast<int64_t>(plan.micro_batches.size());
  s.backend().synchronize();
}

// Why the run stops after this step: a signal on any rank, or rank 0's clock past
// train.max_minutes ("": it goes on). Collective over world.
std::string stop_request(const RunConfig& cfg, int rank, Comm& world,
                         std::chrono::steady_clock::time_point run_start) {
  int64_t stop[2] = {static_cast<int64_t>(g_stop_signal), 0};
  if (rank == 0 && cfg.train.max_minutes > 0)
    stop[1] = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count() >=
              cfg.train.max_minutes * 60;
  world.all_reduce(stop, stop, 2, DType::i64, ReduceOp::max);
  if (stop[0] != 0) return stop[0] == SIGUSR1 ? "SIGUSR1" : "SIGTERM";
  if (stop[1] != 0) return fmt::format("train.max_minutes = {} reached", cfg.train.max_minutes);
  return "";
}

}  // namespace

std::vector<StepRecord> run_training(const RunConfig& config, ParallelState& ps,
                                     const TokenDataset& ds, BatchSampler& sampler,
                                     const TrainOptions& opts) {
  TrainSession s(config, ps, ds, opts);
  const Grid& grid = ps.world();
  Groups& groups = ps.world_groups();
  s.start(sampler);
  const RunConfig& cfg = s.cfg();
  if (grid.rank == 0) std::printf("%s", s.describe().c_str());
  if (grid.rank == 0)  // a mixture's sources: shares, and epochs at the (resumed) cursor
    std::printf("%s", describe_mixture(sampler, parse_data_path(cfg.data.path),
                                       std::max<int64_t>(cfg.train.steps - s.start_step(), 0)).c_str());
  StepLog log(s);

  // Rank 0 plans step k+1 on a background thread while step k trains: batches depend
  // only on the data, the seed and k, so the next one is drawn a step ahead.
  std::unique_ptr<PlanAhead> ahead;
  // Planned at fixed(G), the fixed cost with this layout's ZeRO traffic per micro-batch:
  // the price the timing report predicts the step with (lib/planner/cost/sim_price.h).
  if (grid.rank == 0) ahead = std::make_unique<PlanAhead>(sim_plan_context(s.planner()));
  std::vector<SeqRef> next_batch;
  SamplerCursor next_end;  // the cursor after next_batch: where the batch after it starts
  const int64_t steps = cfg.train.steps, first = s.start_step() + 1;
  if (steps >= first) {
    next_batch = sampler.next();
    next_end = sampler.cursor();
    if (ahead) ahead->submit(first, lengths_of(next_batch));
  } else if (grid.rank == 0) {
    std::printf("the checkpoint is at step %lld and train.steps is %lld: nothing to train\n",
                static_cast<long long>(s.start_step()), static_cast<long long>(steps));
  }

  StopSignals signals;
  const auto run_start = std::chrono::steady_clock::now();
  // Phase times from the backend's clock: events on a GPU's stream (no device drain at a
  // phase boundary), resolved once per step after its synchronization; wall time on a CPU.
  const std::unique_ptr<EventClock> clock = s.backend().make_event_clock();
  for (int64_t step = first; step <= steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    StepRecord r;
    r.step = step;
    r.phases.clock = clock.get();
    const std::vector<SeqRef> batch = std::move(next_batch);
    const SamplerCursor batch_end = next_end;
    const std::vector<int64_t> lengths = lengths_of(batch);
    Plan plan;
    agree(grid.comm, [&] {
      if (ahead) plan = ahead->wait(step, &r.plan_wait_ms);
    });
    r.phases.add(Phase::plan_wait, r.plan_wait_ms);
    if (step < steps) {
      next_batch = sampler.next();
      next_end = sampler.cursor();
      if (ahead) ahead->submit(step + 1, lengths_of(next_batch));
    }
    plan_broadcast(plan, *groups.world, 0);
    plan_validate(plan, lengths, s.limits());
    if (grid.rank == 0 && opts.print_plans)
      std::printf("step %lld plan:\n%s", static_cast<long long>(step), plan_describe(plan, lengths).c_str());

    train_step(s, plan, batch, ds, r);
    for (int64_t n : lengths) r.tokens += n;
    r.source_tokens = sampler.source_tokens(batch);
    s.consumed += r.tokens;

    const std::string why = stop_request(cfg, grid.rank, *groups.world, run_start);
    const bool stopping = !why.empty() && step < steps;
    // Checkpoints: the step waits for the state's copy (the write goes on in the
    // background with checkpoint.async; the run's last one is waited for), and each step
    // boundary publishes a finished write or stops the run if it failed.
    std::string saved;
    if (!cfg.checkpoint.dir.empty()) {
      ScopedPhase timed(&r.phases, Phase::checkpoint);
      const bool last = stopping || step == steps;
      if (last || (cfg.checkpoint.every > 0 && step % cfg.checkpoint.every == 0))
        saved = s.save_checkpoint(step, batch_end, /*wait=*/last);
      else
        s.poll_checkpoint();
    }
    r.phases.resolve();  // the device is idle since the step's synchronization
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log.add(r, plan, lengths, s.take_saved_checkpoints(), stopping);

    if (stopping) {
      if (grid.rank == 0) {
        if (saved.empty())
          std::printf("stopping after step %lld (%s); checkpoint.dir is not set, so nothing was saved\n",
                      static_cast<long long>(step), why.c_str());
        else
          std::printf("stopping after step %lld (%s): checkpoint written to %s\n",
                      static_cast<long long>(step), why.c_str(), saved.c_str());
        std::fflush(stdout);
      }
      break;
    }
  }
  log.finish();  // prints the phases, the report's summary and the pipeline's stages
  if (const std::string note = s.backend().kernel_note(); grid.rank == 0 && !note.empty())
    std::printf("%s\n", note.c_str());

  if (!opts.dump_weights.empty()) {
    s.dump_weights(opts.dump_weights);
    if (grid.rank == 0) std::printf("weights written to %s\n", opts.dump_weights.c_str());
  }
  return log.records();
}

}  // namespace flexsp

#include "lib/train/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "io/checkpoint/checkpoint.h"
#include "io/report/report.h"
#include "io/weights/weights.h"
#include "lib/backend/backend.h"
#include "lib/comm/backend_comms.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"
#include "lib/optim/optim.h"
#include "lib/plan/plan.h"
#include "lib/planner/planner.h"
#include "lib/runtime/executor.h"
#include "lib/runtime/ulysses.h"
#include "lib/runtime/zero.h"
#include "lib/train/micro_batch.h"
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

// Writes this rank's part of the training state after `step` (collective). cfg: the run's
// effective configuration (environment overrides applied).
std::string save_checkpoint(const RunConfig& cfg, const Grid& grid, ZeroOptimizer& zero,
                            const ModelConfig& mc, const ParamTable& table, int64_t step,
                            int64_t consumed, const SamplerCursor& next) {
  CheckpointShard mine;
  mine.shards = zero.state_shards();
  const size_t n = static_cast<size_t>(mine.shards.size());
  std::vector<float> p(n), m(n), v(n);
  zero.get_state(p.data(), m.data(), v.data());
  mine.params = p.data();
  mine.exp_avg = m.data();
  mine.exp_avg_sq = v.data();
  CheckpointMeta meta;
  meta.step = step;
  meta.consumed_tokens = consumed;
  meta.seed = cfg.train.seed;
  meta.cursor = next;
  meta.world_size = grid.size;
  meta.zero = cfg.parallel.zero;
  meta.adam_steps = zero.adam_steps();
  meta.config_ini = config_to_ini(cfg);
  meta.version = FLEXSP_VERSION;
  return checkpoint_save(grid.comm, cfg.checkpoint.dir, cfg.checkpoint.keep, mc, table, meta, mine);
}

std::string duration_text(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// Tokens of the largest global batch the sampler can produce.
int64_t max_batch_tokens(const RunConfig& cfg) {
  const int64_t seq = cfg.data.max_seq_len + 1;
  int64_t whole = cfg.train.global_batch_tokens;
  if (cfg.train.global_batch_seqs > 0) {
    const int64_t by_seqs = cfg.train.global_batch_seqs * seq;
    whole = whole > 0 ? std::min(whole, by_seqs) : by_seqs;
  }
  return whole;
}

// Group sizes per micro-batch, e.g. "4+2+1+1 | 8".
std::string plan_shape(const Plan& p) {
  std::string s;
  for (size_t m = 0; m < p.micro_batches.size(); ++m) {
    s += m ? " | " : "";
    for (size_t g = 0; g < p.micro_batches[m].groups.size(); ++g)
      s += fmt::format("{}{}", g ? "+" : "", p.micro_batches[m].groups[g].size);
  }
  return s;
}

std::vector<int64_t> lengths_of(const std::vector<SeqRef>& batch) {
  std::vector<int64_t> l;
  l.reserve(batch.size());
  for (const SeqRef& s : batch) l.push_back(s.length);
  return l;
}

}  // namespace

std::vector<StepRecord> run_training(const RunConfig& config, const Grid& grid, Groups& groups,
                                     const TokenDataset& ds, BatchSampler& sampler,
                                     const TrainOptions& opts) {
  ModelConfig mc;
  std::unique_ptr<Backend> be;
  PlannerContext pctx;
  PlanLimits limits;
  // The configuration that runs: the CUDA numerics keys with their environment overrides
  // (FLEXSP_CUDA_TF32, FLEXSP_CUDA_ATTENTION) applied, so that checkpoints and reports
  // record what ran.
  RunConfig cfg = config;
  agree(grid.comm, [&] {
    const BackendOptions bo = with_env_overrides(
        {cfg.train.backend, cfg.train.precision, cfg.train.tf32, cfg.train.cuda_attention});
    cfg.train.tf32 = bo.tf32;
    cfg.train.cuda_attention = bo.cuda_attention;
  });
  agree(grid.comm, [&] {
    mc = resolve_model_config(cfg.model, cfg.set_keys, ds.vocab_size());
    FLEXSP_CHECK(mc.vocab >= ds.vocab_size(),
                 "model.vocab: {} is smaller than the dataset's vocab_size {}", mc.vocab,
                 ds.vocab_size());
    if (cfg.parallel.sp_mode == "static" && cfg.is_set("parallel.sp_size")) {
      FLEXSP_CHECK(grid.size % cfg.parallel.sp_size == 0,
                   "parallel.sp_size: {} does not divide the {} ranks", cfg.parallel.sp_size, grid.size);
      ulysses_check(mc, cfg.parallel.sp_size);
    }
    zero_check(cfg.parallel);
    pctx = planner_context(cfg, mc, grid.size, grid.ranks_per_node);
    limits = plan_limits(pctx, plan_costs(pctx));
    be = make_backend(
        {cfg.train.backend, cfg.train.precision, cfg.train.tf32, cfg.train.cuda_attention});
  });
  // Communicators for buffers in backend memory (parallel.comm), built once for the run
  // and removed before the backend goes (declared after it, before its users).
  CommChoice comm_choice = CommChoice::host;
  const bool own_gpus = ranks_have_own_gpus(grid, *groups.world);
  agree(grid.comm, [&] {
    comm_choice = choose_comm(cfg.parallel.comm, be->name(), nccl_built(), own_gpus);
  });
  BackendComms backend_comms(groups, grid, *be, comm_choice);

  // Workspace bounds: the planner puts at most E tokens on a rank per micro-batch.
  const int64_t whole = max_batch_tokens(cfg);
  const int64_t E = limits.max_tokens_per_rank;
  const int64_t max_local = std::min(E, whole);
  const int64_t max_group = std::min(E * grid.size, whole);
  PlanExecutor exec(*be, mc, groups, max_local, max_group);
  const ParamTable& table = exec.model().params();
  ZeroOptimizer zero(*be, table, cfg.parallel, groups);

  // Where training starts: a checkpoint (--resume), weights (--load-weights) or the
  // seeded initialisation.
  const std::string& ckdir = cfg.checkpoint.dir;
  std::string resume_path;
  agree(grid.comm, [&] {
    FLEXSP_CHECK(opts.resume.empty() || opts.load_weights.empty(),
                 "--resume and --load-weights cannot be used together");
    if (!opts.resume.empty()) resume_path = checkpoint_resolve(opts.resume, ckdir);
    if (!ckdir.empty() && grid.rank == 0) {
      std::error_code ec;
      std::filesystem::create_directories(ckdir, ec);
      FLEXSP_CHECK(std::filesystem::is_directory(ckdir, ec), "checkpoint.dir: cannot create {}", ckdir);
    }
  });
  int64_t start = 0, consumed = 0;
  std::vector<float> host;
  if (!resume_path.empty()) {
    CheckpointMeta meta;
    agree(grid.comm, [&] {
      meta = checkpoint_read_meta(resume_path, mc);
      sampler.seek(meta.cursor);
    });
    const ShardRanges ps = zero.param_shards(), ss = zero.state_shards();
    std::vector<float> p(static_cast<size_t>(ps.size())), m(static_cast<size_t>(ss.size())),
        v(static_cast<size_t>(ss.size()));
    checkpoint_load(grid.comm, resume_path, mc, table, ps, p.data(), ss, m.data(), v.data());
    zero.set_state(p.data(), m.data(), v.data());
    zero.set_adam_steps(meta.adam_steps);
    start = meta.step;
    consumed = meta.consumed_tokens;
    if (grid.rank == 0) {
      std::printf("resumed from %s: step %lld, %lld tokens, saved by %lld ranks (ZeRO %lld)\n",
                  resume_path.c_str(), static_cast<long long>(start), static_cast<long long>(consumed),
                  static_cast<long long>(meta.world_size), static_cast<long long>(meta.zero));
      if (meta.seed != cfg.train.seed)
        std::printf("note: train.seed is %llu in the checkpoint but %llu in this run: the data order changes\n",
                    static_cast<unsigned long long>(meta.seed),
                    static_cast<unsigned long long>(cfg.train.seed));
    }
  } else {
    if (grid.rank == 0 && opts.resume == "auto")
      std::printf("no checkpoint in %s: starting fresh\n", ckdir.c_str());
    host.assign(static_cast<size_t>(table.total), 0.f);
    agree(grid.comm, [&] {
      if (!opts.load_weights.empty())
        load_weights(opts.load_weights, mc, table, host.data());
      else
        init_params(mc, table, cfg.train.seed, host.data(), 0, table.total);
    });
    zero.set_params(host.data());
  }
  // Never overwrite or rotate away checkpoints newer than where this run starts.
  agree(grid.comm, [&] {
    const std::vector<int64_t> have = checkpoint_steps(ckdir);
    FLEXSP_CHECK(have.empty() || have.back() <= start,
                 "checkpoint.dir: {} already holds {} (a run past step {}); resume it with "
                 "--resume auto or choose another directory",
                 ckdir, checkpoint_file_name(have.empty() ? 0 : have.back()), start);
  });

  if (grid.rank == 0)
    std::printf("model: %s; backend %s (%s activations); comm %s; tf32 %s; cuda_attention %s; sp_mode %s; ZeRO %d; up to %lld tokens per rank per micro-batch\n",
                model_config_summary(mc).c_str(), be->name(), dtype_name(be->act_dtype()),
                comm_choice_name(comm_choice), cfg.train.tf32 ? "on" : "off",
                cfg.train.cuda_attention.c_str(),
                cfg.parallel.sp_mode.c_str(),
                cfg.parallel.zero, static_cast<long long>(max_local));

  // Timing report (rank 0 writes; every rank contributes its phase times each step).
  std::unique_ptr<ReportWriter> report;
  agree(grid.comm, [&] {
    if (grid.rank != 0 || cfg.report.dir.empty()) return;
    ReportRunInfo info;
    info.world = grid.size;
    info.nodes = grid.nodes;
    info.ranks_per_node = grid.ranks_per_node;
    info.sp_mode = cfg.parallel.sp_mode;
    info.backend = be->name();
    info.activations = dtype_name(be->act_dtype());
    info.tf32 = cfg.train.tf32;
    info.cuda_attention = cfg.train.cuda_attention;
    info.model = model_config_summary(mc);
    info.config_ini = config_to_ini(cfg);
    info.zero = cfg.parallel.zero;
    info.model_params = model_num_params(mc);
    info.peak_tflops = cfg.report.peak_tflops;
    report = std::make_unique<ReportWriter>(cfg.report.dir, info, cfg.report.every);
  });

  // Rank 0 plans step k+1 on a background thread while step k trains: batches depend
  // only on the data, the seed and k, so the next one is drawn a step ahead.
  std::unique_ptr<PlanAhead> ahead;
  if (grid.rank == 0) ahead = std::make_unique<PlanAhead>(pctx);
  std::vector<SeqRef> next_batch;
  SamplerCursor next_end;  // the cursor after next_batch: where the batch after it starts
  const int64_t steps = cfg.train.steps, first = start + 1;
  if (steps >= first) {
    next_batch = sampler.next();
    next_end = sampler.cursor();
    if (ahead) ahead->submit(first, lengths_of(next_batch));
  } else if (grid.rank == 0) {
    std::printf("the checkpoint is at step %lld and train.steps is %lld: nothing to train\n",
                static_cast<long long>(start), static_cast<long long>(steps));
  }

  StopSignals signals;
  const auto run_start = std::chrono::steady_clock::now();
  std::vector<StepRecord> records;
  double total_ms = 0;
  // Phase times from the backend's clock: events on a GPU's stream (no device drain at a
  // phase boundary), resolved once per step after its synchronization; wall time on a CPU.
  const std::unique_ptr<EventClock> clock = be->make_event_clock();
  PhaseTimes phases, all_phases;
  phases.clock = clock.get();
  for (int64_t step = first; step <= steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    phases.clear();
    const std::vector<SeqRef> batch = std::move(next_batch);
    const SamplerCursor batch_end = next_end;
    const std::vector<int64_t> lengths = lengths_of(batch);
    const int64_t predictions = count_predictions(batch);
    Plan plan;
    double plan_wait_ms = 0;
    agree(grid.comm, [&] {
      if (ahead) plan = ahead->wait(step, &plan_wait_ms);
    });
    phases.add(Phase::plan_wait, plan_wait_ms);
    if (step < steps) {
      next_batch = sampler.next();
      next_end = sampler.cursor();
      if (ahead) ahead->submit(step + 1, lengths_of(next_batch));
    }
    plan_broadcast(plan, *groups.world, 0);
    plan_validate(plan, lengths, limits);
    if (grid.rank == 0 && opts.print_plans)
      std::printf("step %lld plan:\n%s", static_cast<long long>(step), plan_describe(plan, lengths).c_str());

    zero.zero_grads();
    const ExecStats ex = exec.run(plan, batch, ds, zero.provider(),
                                  1.0 / static_cast<double>(predictions), &phases);
    double loss_sum = ex.loss_sum;
    groups.world->all_reduce(&loss_sum, &loss_sum, 1, DType::f64, ReduceOp::sum);
    const double loss = loss_sum / static_cast<double>(predictions);
    const double lr = lr_at(cfg.optim, step, steps);
    const double grad_norm = std::isfinite(loss) ? zero.step(cfg.optim, lr, &phases) : std::nan("");
    FLEXSP_CHECK(std::isfinite(loss) && std::isfinite(grad_norm),
                 "step {}: the loss ({}) or the gradient norm ({}) is not finite; the weights "
                 "were not updated", step, loss, grad_norm);
    be->synchronize();
    int64_t tokens = 0;
    for (int64_t n : lengths) tokens += n;
    consumed += tokens;

    // Stop requests: a signal on any rank, or rank 0's clock past train.max_minutes.
    int64_t stop[2] = {static_cast<int64_t>(g_stop_signal), 0};
    if (grid.rank == 0 && cfg.train.max_minutes > 0)
      stop[1] = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count() >=
                cfg.train.max_minutes * 60;
    groups.world->all_reduce(stop, stop, 2, DType::i64, ReduceOp::max);
    const bool stopping = (stop[0] != 0 || stop[1] != 0) && step < steps;
    std::string saved;
    if (!ckdir.empty() && (stopping || step == steps ||
                           (cfg.checkpoint.every > 0 && step % cfg.checkpoint.every == 0))) {
      ScopedPhase timed(&phases, Phase::checkpoint);
      saved = save_checkpoint(cfg, grid, zero, mc, table, step, consumed, batch_end);
    }

    phases.resolve();  // the device is idle since the synchronization above

    StepRecord r;
    r.step = step;
    r.loss = loss;
    r.lr = lr;
    r.grad_norm = grad_norm;
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.tokens = tokens;
    r.predictions = predictions;
    r.micro_batches = static_cast<int64_t>(plan.micro_batches.size());
    r.plan_wait_ms = plan_wait_ms;
    r.phases = phases;
    r.phases.clock = nullptr;  // the times only: the clock does not outlive the run
    for (size_t i = 0; i < kPhases; ++i) all_phases.ms[i] += phases.ms[i];
    records.push_back(r);
    total_ms += r.ms;

    if (!cfg.report.dir.empty()) {
      ReportRow row;
      row.phases = phase_stats(phases, *groups.world);
      double peak = static_cast<double>(be->peak_allocated_bytes());
      groups.world->all_reduce(&peak, &peak, 1, DType::f64, ReduceOp::max);
      if (report) {
        row.step = step;
        row.wall_ms = r.ms;
        row.loss = loss;
        row.lr = lr;
        row.grad_norm = grad_norm;
        row.tokens = r.tokens;
        row.sequences = static_cast<int64_t>(batch.size());
        row.predictions = predictions;
        row.micro_batches = r.micro_batches;
        row.flops = model_train_flops(mc, lengths);
        row.peak_mem_gb = peak / 1e9;
        row.predicted_ms = plan.predicted_ms;
        row.plan = plan_shape(plan);
        report->add(std::move(row));
      }
    }

    // The gradient norm with 7 significant digits: the equivalence tests compare it
    // between layouts to 1e-5 relative, whatever its magnitude.
    if (grid.rank == 0 && (step % cfg.report.every == 0 || step == steps || step == first)) {
      const double eta =
          total_ms / 1e3 / static_cast<double>(step - start) * static_cast<double>(steps - step);
      std::printf("step %lld/%lld | loss %.6f | lr %.3e | grad norm %.7g | %.1f ms | %.0f tok/s | ETA %s\n",
                  static_cast<long long>(step), static_cast<long long>(steps), loss, lr, grad_norm,
                  r.ms, static_cast<double>(r.tokens) / (r.ms / 1e3), duration_text(eta).c_str());
      std::fflush(stdout);
    }
    if (grid.rank == 0 && !saved.empty() && !stopping) {
      std::printf("checkpoint written: %s (%.0f ms)\n", saved.c_str(), phases.get(Phase::checkpoint));
      std::fflush(stdout);
    }
    if (stopping) {
      if (grid.rank == 0) {
        const std::string why = stop[0] != 0 ? (stop[0] == SIGUSR1 ? "SIGUSR1" : "SIGTERM")
                                             : fmt::format("train.max_minutes = {} reached", cfg.train.max_minutes);
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

  // Where the time went: per phase, ms per step, min / mean / max over ranks.
  if (!records.empty()) {
    const PhaseStats ps = phase_stats(all_phases, *groups.world);
    if (grid.rank == 0) {
      std::printf("time per step by phase (ms; min / mean / max over %d ranks):\n", grid.size);
      for (size_t i = 0; i < kPhases; ++i) {
        const double n = static_cast<double>(records.size());
        std::printf("  %-12s %9.2f %9.2f %9.2f\n", phase_name(static_cast<Phase>(i)),
                    ps.min.ms[i] / n, ps.mean.ms[i] / n, ps.max.ms[i] / n);
      }
    }
  }

  if (report) std::printf("%s", report->finish().c_str());

  if (!opts.dump_weights.empty()) {
    host.resize(static_cast<size_t>(table.total));
    zero.get_params(host.data());  // collective: ZeRO-3 gathers the shards
    agree(grid.comm, [&] {
      if (grid.rank == 0) dump_weights(opts.dump_weights, mc, table, host.data());
    });
    if (grid.rank == 0) std::printf("weights written to %s\n", opts.dump_weights.c_str());
  }
  return records;
}

}  // namespace flexsp

#include "lib/train/step_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "lib/comm/phase_stats.h"
#include "lib/data/mixture.h"
#include "lib/model/model_config.h"
#include "lib/planner/cost/memory_model.h"
#include "lib/planner/cost/pipeline.h"
#include "lib/planner/planner.h"
#include "lib/util/agree.h"

namespace flexsp {

namespace {

std::string duration_text(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s / 60 % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// Group sizes per micro-batch, e.g. "4+2+1+1 | 8 (offload)": those with activation offload
// marked.
std::string plan_shape(const Plan& p) {
  std::string s;
  for (size_t m = 0; m < p.micro_batches.size(); ++m) {
    s += m ? " | " : "";
    for (size_t g = 0; g < p.micro_batches[m].groups.size(); ++g)
      s += fmt::format("{}{}", g ? "+" : "", p.micro_batches[m].groups[g].size);
    if (p.micro_batches[m].offload) s += " (offload)";
  }
  return s;
}

}  // namespace

// Seq1F1B: the memory model with the stage's activations from the slots the run has met
// so far (pp_slot_tokens on every stage, the most loaded one; the slots persist from step
// to step as the runtime's do). Otherwise the memory model's peak.
double StepLog::predicted_mem(const Plan& plan, const std::vector<int64_t>& lengths) {
  const PlannerContext& pc = s_.planner();
  const PipelineLayout& pl = pc.pipeline;
  if (pl.pp <= 1 || pl.schedule != PpSchedule::seq1f1b || pl.seq_chunks <= 1 || plan.micro_batches.empty())
    return predicted_mem_gb_;
  const int C = pl.seq_chunks, M = static_cast<int>(plan.micro_batches.size());
  const int64_t most_local = s_.max_local_tokens();
  const int64_t first = std::min(most_local, (most_local + C - 1) / C + pc.tp);  // PipelineExecutor::slot
  const std::vector<int64_t> units = plan_unit_tokens(pricing_->costs, plan, lengths, pc.tp);
  slot_caps_.resize(static_cast<size_t>(pl.pp));
  int64_t held = 0;
  for (int st = 0; st < pl.pp; ++st)
    held = std::max(held, pp_slot_tokens(pl.pp, st, M, C, units, first, most_local, &slot_caps_[static_cast<size_t>(st)]));
  const double in_flight = static_cast<double>(held) / static_cast<double>(most_local);
  return memory_estimate_context(pc, nullptr, in_flight).total(most_local) / 1e9;
}

StepLog::StepLog(TrainSession& s) : s_(s) {
  const RunConfig& cfg = s.cfg();
  const Grid& grid = s.parallel().world();
  agree(grid.comm, [&] {
    if (grid.rank != 0 || cfg.report.dir.empty()) return;
    ReportRunInfo info;
    info.world = grid.size;
    info.nodes = grid.nodes;
    info.ranks_per_node = grid.ranks_per_node;
    info.sp_mode = enum_name(cfg.parallel.sp_mode);
    info.backend = s.backend().name();
    info.activations = dtype_name(s.backend().act_dtype());
    info.tf32 = cfg.train.tf32;
    info.cuda_attention = enum_name(cfg.train.cuda_attention);
    info.model = model_config_summary(s.model());
    info.config_ini = config_to_ini(cfg);
    info.zero = cfg.parallel.zero;
    info.model_params = model_num_params(s.model());
    info.peak_tflops = cfg.report.peak_tflops;
    for (const DataSourceSpec& d : parse_data_path(cfg.data.path)) info.sources.emplace_back(d.name, d.weight);
    // The memory model's peak: states, ZeRO buffers and the workspace the model is sized
    // for (the allocator's peak reaches it on the first step that fills it).
    const PlannerContext& pc = s.planner();
    predicted_mem_gb_ =
        memory_peak_bytes(pc, s.max_local_tokens(), s.model().offload, s.model().offload_plain_tokens) / 1e9;
    // The predicted step: the plan priced as simulate and the search price a step (ZeRO
    // traffic and the optimizer included), so that it compares with the measured one.
    pricing_ = std::make_unique<SimStepPricing>(sim_step_pricing(pc));
    report_ = std::make_unique<ReportWriter>(cfg.report.dir, info, cfg.report.every);
  });
}

void StepLog::add(const StepRecord& r, const Plan& plan, const std::vector<int64_t>& lengths,
                  const std::vector<CheckpointSaved>& saved, bool stopping) {
  const RunConfig& cfg = s_.cfg();
  const Grid& grid = s_.parallel().world();
  Comm& world = *s_.parallel().world_groups().world;
  records_.push_back(r);
  records_.back().phases.clock = nullptr;  // the times only: the clock does not outlive the run
  for (size_t i = 0; i < kPhases; ++i) all_phases_.ms[i] += r.phases.ms[i];
  total_ms_ += r.ms;

  const double flops = model_train_flops(s_.model(), lengths);
  if (!cfg.report.dir.empty()) {
    ReportRow row;
    row.phases = phase_stats(r.phases, world);
    double peak = static_cast<double>(s_.backend().peak_allocated_bytes());
    world.all_reduce(&peak, &peak, 1, DType::f64, ReduceOp::max);
    if (report_) {
      row.step = r.step;
      row.wall_ms = r.ms;
      row.loss = r.loss;
      row.lr = r.lr;
      row.grad_norm = r.grad_norm;
      row.tokens = r.tokens;
      row.sequences = static_cast<int64_t>(lengths.size());
      row.predictions = r.predictions;
      row.micro_batches = r.micro_batches;
      row.flops = flops;
      row.peak_mem_gb = peak / 1e9;
      row.predicted_ms = plan.predicted_ms > 0 ? sim_step_ms(*pricing_, plan, lengths) : 0;
      row.predicted_mem_gb = predicted_mem(plan, lengths);
      row.plan = plan_shape(plan);
      row.source_tokens = r.source_tokens;
      report_->add(std::move(row));
    }
  }
  if (grid.rank != 0) return;
  // The gradient norm with 7 significant digits: the equivalence tests compare it
  // between layouts to 1e-5 relative, whatever its magnitude.
  const int64_t steps = cfg.train.steps, done = r.step - s_.start_step();
  if (r.step % cfg.report.every == 0 || r.step == steps || done == 1) {
    const double eta = total_ms_ / 1e3 / static_cast<double>(done) * static_cast<double>(steps - r.step);
    // The step's figures as the report's row has them (Throughput of one step).
    Throughput one;
    one.add(r.ms, static_cast<double>(r.tokens), flops);
    std::printf("step %lld/%lld | loss %.6f | lr %.3e | grad norm %.7g | %.1f ms | %.0f tok/s | MFU %s | ETA %s\n",
                static_cast<long long>(r.step), static_cast<long long>(steps), r.loss, r.lr,
                r.grad_norm, r.ms, one.tokens_per_s(),
                mfu_text(one.mfu(grid.size, cfg.report.peak_tflops)).c_str(), duration_text(eta).c_str());
    std::fflush(stdout);
  }
  for (const CheckpointSaved& c : saved) {
    if (report_)
      report_->add_checkpoint({c.step, c.path, static_cast<double>(c.bytes), c.stall_ms, c.snapshot_ms, c.write_ms});
    if (stopping && c.step == r.step) continue;  // the stop line names it
    std::printf("checkpoint written: %s (%.1f MB; training waited %.0f ms, of which %.0f ms copying the state; "
                "written in %.0f ms)\n",
                c.path.c_str(), c.bytes / 1e6, c.stall_ms, c.snapshot_ms, c.write_ms);
    std::fflush(stdout);
  }
}

void StepLog::finish() {
  const Grid& grid = s_.parallel().world();
  if (!records_.empty()) {
    const PhaseStats ps = phase_stats(all_phases_, *s_.parallel().world_groups().world);
    if (grid.rank == 0) {
      std::printf("time per step by phase (ms; min / mean / max over %d ranks):\n", grid.size);
      const double n = static_cast<double>(records_.size());
      for (size_t i = 0; i < kPhases; ++i)
        std::printf("  %-12s %9.2f %9.2f %9.2f\n", phase_name(static_cast<Phase>(i)),
                    ps.min.ms[i] / n, ps.mean.ms[i] / n, ps.max.ms[i] / n);
    }
  }
  // Collective even without a report: the stages' figures are gathered to rank 0.
  const ReportPipeline stages = s_.pipeline_summary();
  if (report_) {
    report_->set_pipeline(stages);
    std::printf("%s", report_->finish().c_str());
  }
  if (grid.rank == 0 && stages.stages > 0) {
    std::printf("%s", pipeline_table(stages).c_str());
    std::fflush(stdout);
  }
}

}  // namespace flexsp

// What a run tells about its steps (docs/reports.md): the progress line every report.every
// steps, the timing report (rank 0 writes report.dir; every rank contributes its phase
// times), and at the end the time per phase, min / mean / max over the ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/report/report.h"
#include "lib/plan/plan.h"
#include "lib/planner/cost/sim_price.h"
#include "lib/train/session.h"
#include "lib/util/timer.h"

namespace flexsp {

struct StepRecord {
  int64_t step = 0;  // 1-based: the number of updates applied after this step
  double loss = 0, lr = 0, grad_norm = 0, ms = 0;
  double plan_wait_ms = 0;  // rank 0: time the step waited for its plan
  PhaseTimes phases;        // this rank's time per phase
  int64_t tokens = 0, predictions = 0, micro_batches = 0;
  std::vector<int64_t> source_tokens;  // the step's tokens by data source (data.path)
};

class StepLog {
 public:
  // Collective: rank 0 opens the report when report.dir is set.
  explicit StepLog(TrainSession& s);

  // After a step (collective when report.dir is set: phase statistics and peak memory
  // are reduced over the ranks). lengths: the step's sequences; saved: the checkpoints
  // published at its end (printed, and recorded in the report).
  void add(const StepRecord& r, const Plan& plan, const std::vector<int64_t>& lengths,
           const std::vector<CheckpointSaved>& saved, bool stopping);
  // Prints the time per phase, closes the report (with the pipeline's stages, if any)
  // and prints the stages' table (collective).
  void finish();

  const std::vector<StepRecord>& records() const { return records_; }

 private:
  TrainSession& s_;
  std::unique_ptr<ReportWriter> report_;
  std::vector<StepRecord> records_;
  PhaseTimes all_phases_;
  double total_ms_ = 0;
  double predicted_mem_gb_ = 0;  // rank 0: the memory model's peak per rank
  std::vector<std::vector<int64_t>> slot_caps_;  // rank 0, Seq1F1B: each stage's slots (pp_slot_tokens)
  double predicted_mem(const Plan& plan, const std::vector<int64_t>& lengths);
  // rank 0: the step's price beyond the plan's micro-batches (sim_step_pricing)
  std::unique_ptr<SimStepPricing> pricing_;
};

}  // namespace flexsp

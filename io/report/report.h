// Timing reports (docs/reports.md). Rank 0 collects one ReportRow per step (phases already
// reduced to min/mean/max over ranks) and writes, under report.dir:
//   steps.csv    one line per step, appended and flushed as the run goes (survives a crash)
//   report.h5    the same columns as 1-D float64 datasets under /steps (plus /steps/plan as
//                strings) and the run's description as root attributes
//                (schema = "flexsp.report"); rewritten under a temporary name and renamed
//                every report.every steps and at the end, so it is never half-written
//   summary.json the run's totals and means, and each checkpoint's stall and write time,
//                at the end
// The tokens drawn from each data source go to report.h5 (/steps/source_tokens, steps x
// sources, and the root attribute data_sources naming them) and summary.json.
// With pipeline stages, report.h5 and summary.json also hold the per-stage figures.
// Throughput figures: TFLOP/s per GPU from the model shape (dense 6N per token plus causal
// attention from the sum of s^2) over the step's wall time and the world size; MFU against
// report.peak_tflops. A figure above the peak is a bug or a wrong peak: it is an Error.
// A run's figures are totals over totals (Throughput), never means of per-step rates: a
// mean of rates weighs a fast step like a slow one and overstates an uneven run.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "io/report/pipeline_report.h"
#include "lib/util/timer.h"

namespace flexsp {

struct ReportRunInfo {
  int world = 1, nodes = 1, ranks_per_node = 1;
  std::string sp_mode, backend, model, config_ini;
  // The numerics that ran (also in config_ini): activation type and the CUDA keys.
  std::string activations = "f32", cuda_attention = "auto";
  bool tf32 = false;
  int zero = 0;
  int64_t model_params = 0;
  double peak_tflops = 989;
  // The data's sources (data.path) as (name, weight); one for a plain dataset.
  std::vector<std::pair<std::string, double>> sources;
};

// Tokens and FLOPs over wall time, summed over the steps added. One step's figures (the
// progress line, a report row) and a run's (summary.json, `flexsp report`) both come from
// here, so they agree.
struct Throughput {
  double ms = 0, tokens = 0, flops = 0;  // flops: training FLOPs, all ranks together
  int64_t steps = 0;

  void add(double wall_ms, double step_tokens, double step_flops) {
    ms += wall_ms, tokens += step_tokens, flops += step_flops, ++steps;
  }
  double tokens_per_s() const { return ms > 0 ? tokens / (ms / 1e3) : 0; }
  double tflops_per_gpu(int world) const {
    return ms > 0 && world > 0 ? flops / (ms / 1e3) / world / 1e12 : 0;
  }
  double mfu(int world, double peak_tflops) const {
    return peak_tflops > 0 ? tflops_per_gpu(world) / peak_tflops : 0;
  }
  double mean_ms() const { return steps > 0 ? ms / double(steps) : 0; }
};

// The steps a run's figures count: all but the first (start-up: allocation, the first
// plan) when there are others.
inline size_t throughput_first_step(size_t steps) { return steps > 1 ? 1 : 0; }

// MFU as a percentage with three significant digits ("38.6%", "0.00123%" on a CPU), as
// the progress line and the run summary print it.
std::string mfu_text(double mfu);

struct ReportRow {
  int64_t step = 0;
  double wall_ms = 0, loss = 0, lr = 0, grad_norm = 0;
  int64_t tokens = 0, predictions = 0, micro_batches = 0, sequences = 0;
  double flops = 0;            // training FLOPs of the step (all ranks together)
  double tflops_per_gpu = 0;   // filled by ReportWriter::add
  double mfu = 0;              // filled by ReportWriter::add
  double peak_mem_gb = 0;      // max over ranks of the backend's peak allocation
  double predicted_ms = 0;     // the planner's prediction for the step (0: none)
  double predicted_mem_gb = 0; // the memory model's peak per rank (0: none)
  PhaseStats phases;
  std::string plan;            // e.g. "4+2+1+1 | 8": group sizes per micro-batch
  std::vector<int64_t> source_tokens;  // tokens drawn from each source (ReportRunInfo::sources)
};

// One checkpoint a run wrote (io/checkpoint/writer.h's CheckpointSaved): what training
// waited for it and how long it took to write in the background.
struct ReportCheckpoint {
  int64_t step = 0;
  std::string path;
  double bytes = 0, stall_ms = 0, snapshot_ms = 0, write_ms = 0;
};

class ReportWriter {
 public:
  // Creates dir (and parents) and a new steps.csv. Throws Error naming the path.
  ReportWriter(const std::string& dir, const ReportRunInfo& info, int64_t every);
  ~ReportWriter();
  ReportWriter(const ReportWriter&) = delete;
  ReportWriter& operator=(const ReportWriter&) = delete;

  // Completes the row's throughput figures, appends it to steps.csv, and rewrites
  // report.h5 every `every` steps. Throws Error if TFLOP/s exceeds the peak.
  void add(ReportRow row);
  // The pipeline's per-stage figures (io/report/pipeline_report.h), written by finish()
  // as /pipeline and summary.json's "pipeline"; unset (no stages): neither is written.
  void set_pipeline(ReportPipeline p) { pipeline_ = std::move(p); }
  // A checkpoint published during the run: summary.json's "checkpoints".
  void add_checkpoint(ReportCheckpoint c) { checkpoints_.push_back(std::move(c)); }
  // Writes report.h5 and summary.json; returns the summary as text for rank 0 to print.
  std::string finish();

  const std::vector<ReportRow>& rows() const { return rows_; }
  const std::string& dir() const { return dir_; }

 private:
  void write_h5() const;
  void write_sources_h5(hid_t file, hid_t steps, const std::string& tmp) const;

  std::string dir_;
  ReportRunInfo info_;
  int64_t every_ = 1;
  std::vector<ReportRow> rows_;
  ReportPipeline pipeline_;
  std::vector<ReportCheckpoint> checkpoints_;
  std::FILE* csv_ = nullptr;  // owned
};

}  // namespace flexsp

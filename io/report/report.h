// Timing reports (docs/reports.md). Rank 0 collects one ReportRow per step (phases already
// reduced to min/mean/max over ranks) and writes, under report.dir:
//   steps.csv    one line per step, appended and flushed as the run goes (survives a crash)
//   report.h5    the same columns as 1-D float64 datasets under /steps (plus /steps/plan as
//                strings) and the run's description as root attributes
//                (schema = "flexsp.report"); rewritten under a temporary name and renamed
//                every report.every steps and at the end, so it is never half-written
//   summary.json the run's totals and means, at the end
// The tokens drawn from each data source go to report.h5 (/steps/source_tokens, steps x
// sources, and the root attribute data_sources naming them) and summary.json.
// With pipeline stages, report.h5 and summary.json also hold the per-stage figures.
// Throughput figures: TFLOP/s per GPU from the model shape (dense 6N per token plus causal
// attention from the sum of s^2) over the step's wall time and the world size; MFU against
// report.peak_tflops. A figure above the peak is a bug or a wrong peak: it is an Error.
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
  std::FILE* csv_ = nullptr;  // owned
};

}  // namespace flexsp

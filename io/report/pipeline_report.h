// The pipeline's per-stage timing in a timing report (docs/reports.md, "Pipeline stages"):
// one record per stage, reduced over the stage's ranks by the trainer (times: the mean
// ms per step; activation bytes: the largest). One table format serves the end of
// `flexsp train` and `flexsp report`, and one layout report.h5 (/pipeline) and
// summary.json ("pipeline"); a report without stages has neither (stages == 0).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace flexsp {

struct ReportStage {
  int first_layer = 0, layers = 0;
  double forward_ms = 0, backward_ms = 0, p2p_ms = 0;  // per step; p2p: waits on receives
  double schedule_ms = 0;                              // the schedule's wall time per step
  double units = 0;                                    // schedule units per step
  double bubble = 0;          // measured: p2p_ms / schedule_ms
  double bubble_formula = 0;  // (P - 1) / (units + P - 1)
  double activation_bytes = 0;  // the largest over the stage's ranks
};

struct ReportPipeline {
  int stages = 0;  // 0: no pipeline
  std::string schedule;
  int seq_chunks = 1;  // seq1f1b: chunks per sequence
  std::vector<ReportStage> stage;
};

// The per-stage table (a title line, a header, one line per stage).
std::string pipeline_table(const ReportPipeline& p);
// Writes group /pipeline under `file` (nothing when p.stages == 0); `what` names the file.
void write_pipeline_h5(hid_t file, const ReportPipeline& p, const std::string& what);
// Reads /pipeline (stages == 0 when the file has none). Throws Error naming path.
ReportPipeline read_pipeline_h5(hid_t file, const std::string& path);
// summary.json's "pipeline" object.
nlohmann::json pipeline_json(const ReportPipeline& p);

}  // namespace flexsp

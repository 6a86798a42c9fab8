// The pipeline's price and memory factors (pipeline.h).
#include "lib/planner/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "lib/runtime/pipeline_schedule.h"
#include "lib/runtime/seq_chunks.h"
#include "lib/util/error.h"

namespace flexsp {

PpSchedule pp_schedule_parse(const std::string& s) {
  if (s == "1f1b") return PpSchedule::one_f_one_b;
  if (s == "seq1f1b") return PpSchedule::seq1f1b;
  fail(fmt::format("parallel.pp_schedule: '{}' is not one of 1f1b, seq1f1b", s));
}

const char* pp_schedule_name(PpSchedule s) { return s == PpSchedule::seq1f1b ? "seq1f1b" : "1f1b"; }

void pp_check(const PipelineLayout& p, int layers) {
  FLEXSP_CHECK(p.pp >= 1, "parallel.pp_size: must be >= 1, got {}", p.pp);
  FLEXSP_CHECK(p.pp <= layers, "parallel.pp_size: {} stages for {} layers (a stage needs one)", p.pp, layers);
  FLEXSP_CHECK(p.seq_chunks >= 1, "parallel.seq_chunks: must be >= 1, got {}", p.seq_chunks);
  FLEXSP_CHECK(p.stage_layers >= 0 && p.stage_layers <= layers,
               "parallel.pp_layers: a stage of {} layers in a model of {}", p.stage_layers, layers);
}

int pp_stage_layers(const PipelineLayout& p, int layers) {
  if (p.stage_layers > 0) return p.stage_layers;
  const int pp = std::max(1, p.pp);
  return (layers + pp - 1) / pp;
}

namespace {
int chunks_of(const PipelineLayout& p) { return p.schedule == PpSchedule::seq1f1b ? std::max(1, p.seq_chunks) : 1; }
}  // namespace

int pp_slots(const PipelineLayout& p) {
  if (p.pp <= 1) return 1;
  return pipeline_in_flight(p.pp, 0, p.pp, chunks_of(p));  // pp micro-batches fill the warm-up
}

double pp_chunk_share(const PipelineLayout& p, const ModelConfig& m, int64_t longest) {
  const int k = chunks_of(p);
  if (p.pp <= 1 || k == 1) return 1;
  if (longest <= 0) return 1 / std::sqrt(static_cast<double>(k));
  double lin = 0, att = 0;
  seq_chunk_costs(m, &lin, &att);
  return static_cast<double>(seq_chunk_bounds(longest, k, lin, att)[1]) / static_cast<double>(longest);
}

double pp_in_flight(const PipelineLayout& p, double share) {
  if (p.pp <= 1) return 1;
  return pp_slots(p) * share;
}

double pp_units(const PipelineLayout& p, int micro_batches) {
  const int k = p.schedule == PpSchedule::seq1f1b ? std::max(1, p.seq_chunks) : 1;
  return static_cast<double>(std::max(1, micro_batches)) * k;
}

double pp_bubble_factor(const PipelineLayout& p, int micro_batches) {
  if (p.pp <= 1) return 1;
  const double u = pp_units(p, micro_batches);
  return (u + p.pp - 1) / u;
}

std::string pp_describe(const PipelineLayout& p) {
  if (p.pp <= 1) return "";
  if (p.schedule == PpSchedule::seq1f1b) return fmt::format("pp {} seq1f1b x{}", p.pp, p.seq_chunks);
  return fmt::format("pp {} 1f1b", p.pp);
}

}  // namespace flexsp

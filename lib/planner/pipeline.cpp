// The pipeline's price and memory factors (pipeline.h).
#include "lib/planner/pipeline.h"

#include <fmt/format.h>

#include <algorithm>

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

double pp_in_flight(const PipelineLayout& p) {
  if (p.pp <= 1) return 1;
  if (p.schedule == PpSchedule::one_f_one_b) return p.pp;
  return std::max(1.0, static_cast<double>(p.pp) / std::max(1, p.seq_chunks));
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

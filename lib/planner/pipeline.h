// Pipeline parallelism as the planner prices it (issue 19, docs/planner.md#pipeline): the
// schedule, what the first stage keeps in flight, and the bubble.
//
// The planner plans the ranks of one stage (world / pp); every stage runs the same plan on
// its own layers. With the layers split evenly a stage does 1/pp of each micro-batch's
// work (stage_layers / layers when parallel.pp_layers is uneven: the slowest stage), so
//   step = (sum of the plan's micro-batch times x stage share + boundary traffic)
//          x (U + pp - 1) / U
// with U the pipeline's units: m micro-batches for 1F1B, m x seq_chunks chunks for
// Seq1F1B (each micro-batch cut into seq_chunks chunks along its sequences). The bubble
// is (pp - 1) / (U + pp - 1) of the step; more units shrink it, and each micro-batch
// pays the fixed cost again: the planner's choice of the micro-batch count weighs both.
//
// Memory of the first stage (the most loaded): 1F1B keeps pp micro-batches of activations
// in flight, Seq1F1B about pp chunks, pp / seq_chunks micro-batches but never less than
// one micro-batch (the later chunks of a sequence attend to the keys and values of the
// earlier ones, which stay until their backward). In micro-batches:
//   in_flight = pp (1f1b), max(1, pp / seq_chunks) (seq1f1b)
// of the stage's activations per token (its layers only).
#pragma once

#include <string>

namespace flexsp {

enum class PpSchedule { one_f_one_b, seq1f1b };

// "1f1b" or "seq1f1b"; anything else is an Error naming parallel.pp_schedule.
PpSchedule pp_schedule_parse(const std::string& s);
const char* pp_schedule_name(PpSchedule s);

struct PipelineLayout {
  int pp = 1;                 // stages
  PpSchedule schedule = PpSchedule::one_f_one_b;
  int seq_chunks = 1;         // Seq1F1B: chunks per micro-batch
  int stage_layers = 0;       // layers of the largest stage; 0: ceil(layers / pp)
};

// Throws Error naming the key when pp, seq_chunks or stage_layers are out of range for a
// model of `layers` layers.
void pp_check(const PipelineLayout& p, int layers);

// Layers of the largest stage.
int pp_stage_layers(const PipelineLayout& p, int layers);

// Micro-batches of activations the first stage holds at once (see above).
double pp_in_flight(const PipelineLayout& p);

// Pipeline units of m micro-batches: m (1f1b), m x seq_chunks (seq1f1b).
double pp_units(const PipelineLayout& p, int micro_batches);

// (units + pp - 1) / units: the step over the work of one stage.
double pp_bubble_factor(const PipelineLayout& p, int micro_batches);

// "pp 4 1f1b", "pp 4 seq1f1b x4"; "" for pp = 1.
std::string pp_describe(const PipelineLayout& p);

}  // namespace flexsp

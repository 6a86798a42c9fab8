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
// Memory of the first stage (the most loaded), as the runtime runs it: the schedule of
// lib/runtime/pipeline_schedule.h holds pp_slots units there at once -- pp micro-batches
// under 1F1B, pp + seq_chunks - 1 chunks under Seq1F1B (the warm-up of stage 0 is
// pp - 1 + seq_chunks - 1 units, plus the one running) -- and each slot grows to the largest
// unit it meets. Seq1F1B cuts every sequence at equal causal cost (lib/runtime/seq_chunks.h:
// a prefix of t tokens costs lin t + att t^2 / 2), so the first chunk is the largest and
// holds share = b_1(n) / n of a sequence of n tokens, a share that grows with n: 1/chunks
// for short sequences, up to 1/sqrt(chunks) for attention-bound ones. A chunk of a
// micro-batch then holds at most share(longest) of its tokens, and in micro-batches
//   in_flight = pp_slots x share  (1F1B: pp x 1)
// of the stage's activations per token (its layers only): for pp 4 x 2 chunks of
// 1024-token sequences of the `small` model 5 x 0.56 = 2.8, 3.1 with the chunk attention's
// own buffers (memory_model.h); measured 2.88 (bench/results/2026-11-25-pipeline.md).
#pragma once

#include <cstdint>
#include <string>

#include "lib/model/model_config.h"

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

// Units (micro-batches or chunks) the first stage holds at once: the runtime's schedule
// (pipeline_in_flight of stage 0) with enough micro-batches to fill it.
int pp_slots(const PipelineLayout& p);

// The largest Seq1F1B chunk's share of a micro-batch's tokens for sequences of at most
// `longest` tokens of model m (the runtime's cut; exact to half a token per sequence);
// longest <= 0: the attention-bound limit 1/sqrt(chunks). 1 for 1F1B or pp 1.
double pp_chunk_share(const PipelineLayout& p, const ModelConfig& m, int64_t longest);

// Micro-batches of activations the first stage holds at once: pp_slots x share (see above).
double pp_in_flight(const PipelineLayout& p, double share);

// Pipeline units of m micro-batches: m (1f1b), m x seq_chunks (seq1f1b).
double pp_units(const PipelineLayout& p, int micro_batches);

// (units + pp - 1) / units: the step over the work of one stage.
double pp_bubble_factor(const PipelineLayout& p, int micro_batches);

// "pp 4 1f1b", "pp 4 seq1f1b x4"; "" for pp = 1.
std::string pp_describe(const PipelineLayout& p);

}  // namespace flexsp

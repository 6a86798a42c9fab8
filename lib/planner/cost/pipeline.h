// Pipeline parallelism as the planner prices it (docs/planner.md#pipeline): the
// schedule, what a stage keeps in flight, and the step.
//
// The planner plans the ranks of one stage (world / pp); every stage runs the same plan on
// its own layers (parallel.pp_layers, or the runtime's split by cost: pipeline_layers with
// the head on the last stage). The step is priced as the runtime runs it: pp_simulate_ms
// runs every stage's own schedule (lib/plan/pipeline_schedule.h) as events -- an op
// starts when its stage is free and its input from the neighbour has arrived -- over each
// unit's forward and backward time on each stage; the step is the makespan. Units are the
// plan's micro-batches (1F1B) or their Seq1F1B chunks, each priced from its own segments
// (plan_pipeline_ms, planner.h), so uneven units, uneven stages and the per-chunk fixed
// costs all show. Where only a sum of micro-batch times is known (the planner weighing
// micro-batch counts before it has the plan) the closed form stands as the estimate:
//   step ~ (sum of micro-batch times x stage share + boundary traffic) x (U + pp - 1) / U
// with U the units: m micro-batches, or m x seq_chunks chunks. With equal units on equal
// stages the simulation gives exactly that factor.
//
// Memory of a stage, as the runtime runs it: the schedule of stage s holds
// pipeline_in_flight units at once -- pp - s micro-batches under 1F1B, pp - s + chunks - 1
// chunks under Seq1F1B -- and each slot grows to the largest unit it meets. The bound (the
// check before training, the planner's tokens per rank) is stage 0's slots each sized for
// the largest chunk: Seq1F1B cuts every sequence at equal causal cost
// (lib/plan/seq_chunk_cuts.h: a prefix of t tokens costs lin t + att t^2 / 2), so the first
// chunk holds share = b_1(n) / n of a sequence of n tokens, a share that grows with n:
// 1/chunks for short sequences, up to 1/sqrt(chunks) for attention-bound ones, and
//   in_flight = pp_slots x share  (1F1B: pp x 1)
// micro-batches of the stage's activations per token (its layers only): for pp 4 x 2 chunks
// of 1024-token sequences of the `small` model 5 x 0.56 = 2.8, 3.1 with the chunk
// attention's own buffers (memory_model.h; against the measured, bench/results/2026-11-25-pipeline.md).
// The trainer's predicted peak instead replays the slots over the chunks its steps meet
// (pp_slot_tokens: the runtime's free list and growth rule), which the runtime's slots
// follow: they start at a chunk's even share and grow only to the chunks they meet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/model/model_config.h"
#include "lib/plan/pp_schedule.h"

namespace flexsp {

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

// (units + pp - 1) / units: the step over the work of one stage, for equal units on equal
// stages (the planner's estimate where it has only a sum of micro-batch times).
double pp_bubble_factor(const PipelineLayout& p, int micro_batches);

// The layers of each stage as the runtime splits them (`given`: parallel.pp_layers, else
// pipeline_layers with the embedding's and the head's costs, pipeline_edge_costs), and
// each stage's share of a unit's work:
// attn (the layers' attention and its traffic: layers_s / layers) and rest (the dense work,
// per-sequence and fixed costs: (layers_s + edges_s) / (layers + edges)).
void pp_stage_shares(const PipelineLayout& p, const std::vector<int>& given, const ModelConfig& m,
                     std::vector<double>* attn, std::vector<double>* rest);

// The share of a unit's time its forward takes: 1/3 (backward does twice its GEMMs), 1/4
// under activation checkpointing (backward runs the forward again first).
double pp_forward_share(const ModelConfig& m);

// The makespan of one step of `stages` stages over micro_batches x chunks units, each stage
// running pipeline_schedule(stages, s, micro_batches, chunks): an op starts when its stage
// is free and its input has arrived (a forward: the previous stage's forward of the unit
// + send_ms[u]; a backward: the next stage's backward + send_ms[u]; sends do not hold the
// sender). forward_ms and backward_ms are [stage x units + unit]. O(units x stages^2) at worst.
double pp_simulate_ms(int stages, int micro_batches, int chunks, const std::vector<double>& forward_ms,
                      const std::vector<double>& backward_ms, const std::vector<double>& send_ms);

// The slots of stage `stage` over one step, as PipelineExecutor::run assigns them: a
// forward takes the last free slot (none for a unit of 0 tokens: empty on this rank), a
// backward frees it; a new slot starts at first_cap tokens, and one meeting a unit of more
// grows to max(tokens, cap + cap / 4), at most max_cap. *caps: the slots' sizes, kept
// from step to step as the runtime keeps them. Returns their sum after the step (slots
// never shrink: the stage's peak of sum of slot sizes, in tokens).
int64_t pp_slot_tokens(int stages, int stage, int micro_batches, int chunks,
                       const std::vector<int64_t>& unit_tokens, int64_t first_cap, int64_t max_cap,
                       std::vector<int64_t>* caps);

// "pp 4 1f1b", "pp 4 seq1f1b x4"; "" for pp = 1.
std::string pp_describe(const PipelineLayout& p);

}  // namespace flexsp

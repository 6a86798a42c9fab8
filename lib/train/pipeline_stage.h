// A pipeline stage's part of the model (parallel.pp_size > 1, docs/parallel.md), and the
// mapping between the stage's parameters and the whole model's. The stage's ranks and
// communicators are the parallel state's (lib/parallel/parallel_state.h).
//
// Design:
//  - Layers are split by pipeline_layers with pipeline_edge_costs. A stage's model is the
//    LLaMA of its layers; its flat table keeps the embedding and head units (used only on
//    the first and last stage, the embedding also on the last when tied), so ZeRO and the
//    model work unchanged. Units map one to one onto the whole model's table of the same
//    tp rank (layer l of stage s is layer first_layer + l), which is how weights files,
//    checkpoints and the initialisation (drawn for the whole model) reach a stage.
//  - Which stage owns a unit (writes it to files): the embedding the first, the head the
//    last, each layer its stage.
//  - Checkpoints keep the whole model's layout: each rank writes the part of its ZeRO
//    shards that lies in units its stage owns, at the whole model's positions; a resumed
//    stage reads its units (the last stage's tied embedding and its moments come from the
//    first stage), so a checkpoint moves between pp, tp and rank counts.
#pragma once

#include <memory>
#include <vector>

#include "lib/comm/comm.h"
#include "lib/config/config.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"

namespace flexsp {

struct PipelineStage {
  int stage = 0, stages = 1;
  std::vector<int> layers;  // per stage
  int first_layer = 0;      // of this stage
  ModelConfig model;        // this stage's model (its layers)

  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
};

// The stage of `stage` of `stages`; mc: the whole model. Throws Error naming
// parallel.pp_size / pp_layers for an impossible split.
PipelineStage pipeline_stage_create(int stage, int stages, const RunConfig& cfg,
                                    const ModelConfig& mc);

// Stage table <- whole-model table (the same tp rank): every unit of the stage.
void pipeline_from_full(const PipelineStage& p, const ParamTable& full, const float* src,
                        const ParamTable& stage, float* dst);
// Whole-model table <- stage table: the units this stage owns (others left alone).
void pipeline_to_full(const PipelineStage& p, const ParamTable& stage, const float* src,
                      const ParamTable& full, float* dst);

// Checkpoints: the ranges of s (this rank's, stage layout) inside units the stage owns,
// at the whole model's positions (replicas as s).
ShardRanges pipeline_shards(const PipelineStage& p, const ParamTable& stage, const ParamTable& full,
                            const ShardRanges& s);
// Data over s (ranges concatenated) -> data over pipeline_shards(s), and back (the rest of
// dst left alone).
void pipeline_pack(const PipelineStage& p, const ParamTable& stage, const ParamTable& full,
                   const ShardRanges& s, const float* src, float* dst);
void pipeline_unpack(const PipelineStage& p, const ParamTable& stage, const ParamTable& full,
                     const ShardRanges& s, const float* src, float* dst);
// After a load (collective over the world): the last stage's copy of a tied embedding
// from the first stage's. params over `param` (ranges concatenated; the two ends' shards
// of the embedding line up: same unit, same data-parallel ranks), zero in units not read;
// m, v over `state`; tied: my copies' ranks (host; null off the tied ends); dp: the
// stage's data-parallel ranks (host).
void pipeline_tied_restore(const PipelineStage& p, const ParamTable& stage, Comm* tied, Comm& dp,
                           const ShardRanges& param, const ShardRanges& state, float* params,
                           float* m, float* v);

}  // namespace flexsp

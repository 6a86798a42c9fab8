// What a training run holds for its pipeline stage (parallel.pp_size > 1, docs/parallel.md),
// and the mapping between the stage's parameters and the whole model's.
//
// Design:
//  - The stage is a grid of its own (grid_stage: plans, tp, Ulysses and ZeRO see only its
//    ranks) with its own communicators; two more cross the stages: `peers` (my position in
//    every stage, rank = stage: the norm, weights to dump) and `tied` (with tied
//    embeddings, my positions in the first and last stage: the embedding's gradient).
//    Activations and their gradients go over the world's communicator for backend memory
//    (`p2p`), world ranks: MPI, staged MPI, or NCCL (the stage link pairs an activation
//    send with the next gradient receive from the same partner in one group,
//    lib/runtime/stage_link.h, so NCCL's in-order stream cannot deadlock).
//  - Layers are split by pipeline_layers (pipeline_schedule.h) with pipeline_edge_costs. A stage's model is the
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
//  - The tied embedding's gradient (backend memory) crosses over staged MPI on a GPU
//    backend, over the host communicator on the CPU backend.
#pragma once

#include <memory>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/platform/backend_comms.h"
#include "lib/comm/groups.h"
#include "lib/config/config.h"
#include "lib/grid/grid.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"
#include "lib/runtime/zero.h"

namespace flexsp {

struct PipelineStage {
  Grid grid;  // the stage's ranks
  std::unique_ptr<Groups> groups;
  std::unique_ptr<BackendComms> backend_comms;  // for groups (after the backend exists)
  std::unique_ptr<Comm> peers_host, tied_host;  // host memory; tied_host null off the ends
  std::unique_ptr<Comm> tied_staged;
  Comm* tied = nullptr;  // backend memory (the host comm, or a staged one)
  Comm* p2p = nullptr;   // backend memory, world ranks
  int stage = 0, stages = 1;
  std::vector<int> layers;  // per stage
  int first_layer = 0;      // of this stage
  ModelConfig model;        // this stage's model (its layers)

  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
  ~PipelineStage();
};

// Collective over world (built with pp_size = cfg.parallel.pp_size): the stage's grid,
// groups and the cross-stage communicators; mc: the whole model. Throws Error naming
// parallel.pp_size / pp_layers for an impossible split.
std::unique_ptr<PipelineStage> pipeline_stage_create(const Grid& world, const RunConfig& cfg,
                                                     const ModelConfig& mc);
// Once the backend exists (collective): communicators for backend memory. world: the
// world's groups (their backend sets already built).
void pipeline_stage_backend(PipelineStage& p, Backend& be, CommChoice choice, Groups& world);

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
// m, v over `state`; dp: the stage's data-parallel ranks (host).
void pipeline_tied_restore(const PipelineStage& p, const ParamTable& stage, Comm& dp,
                           const ShardRanges& param, const ShardRanges& state, float* params,
                           float* m, float* v);

}  // namespace flexsp

// ZeRO over flat buffers (docs/parallel.md): who keeps which part of the parameters,
// gradients and optimizer states, and which communication a step needs. One interface,
// two implementations: stages 0-2 keep full replicas of the parameters and gradients
// (zero_replicated.cpp), stage 3 keeps only shards and serves the model unit by unit
// (zero_sharded.cpp); what both do with tensor and pipeline parallelism is zero_parts.h's.
//
//   stage 0: gradients all-reduced over the world; every rank updates every parameter.
//   stage 1: AdamW states sharded over the optimizer shard group; gradients all-reduced;
//            each rank updates its shard; parameters all-gathered over the shard group.
//            (Stages 0-1 on several ranks: in the step's last micro-batch each unit's
//            all-reduce is started as soon as its backward is done -- the model's units
//            are final then -- and runs while the next units' backward computes; every
//            rank makes the same calls, idle ones through the model's idle pass. Without
//            ZeroPeers::overlap the whole buffer is all-reduced once after the backward
//            instead: for ranks that share cores, where nothing runs beside the backward
//            and the overlap only adds work to it -- the parallel state's choice.)
//   stage 2: as 1, but gradients are reduce-scattered (each rank receives only the
//            reduced gradient of its shard): over the world directly, or for a node
//            group within the node, then all-reduced across nodes. zero_grad_group must
//            equal zero_optim_group.
//   stage 3: no full-size buffer at all. The model reads its weights unit by unit (the
//            embedding, each layer, the head = final norm + lm_head; ParamProvider in
//            lib/model/llama.h): before a unit's forward and again before its backward
//            (and its activation re-forward) the unit is all-gathered over the parameter
//            group into a slot, and the slot is freed when the model is done with it.
//            After a unit's backward its gradient slot is reduce-scattered into this
//            rank's gradient shard (accumulated over micro-batches). The step reduces
//            what is left across nodes, clips with the global norm over the shards, and
//            runs one AdamW per unit piece. The reduce-scatter of a unit is started
//            (Comm::start_reduce_scatter) and finished when the next unit is done, so it
//            runs while the next unit's backward computes. The model's prefetch(u) starts
//            unit u's gather (Comm::start_all_gather) into its slot while the current unit
//            computes; unit_params / unit_act_params complete it right before u computes.
//            Gathers go over the parameter-gather communicators and reductions over the
//            gradient ones (Groups::for_backend(CommPurpose)): with NCCL each has its own
//            stream, so neither waits behind the other. With bf16 activations the gathers
//            move a bf16 copy of the param pieces (refreshed after each update), half the
//            bytes. A rank holds its shards plus up to four units of full weights and
//            gradients (current and prefetched weights, the gradients being made and those
//            being reduced; five with tied embeddings, whose head needs the embedding unit
//            too).
//
// Stage 3 shard layout: each unit's contiguous flat range is padded to a multiple of the
// world size and cut into equal pieces over the parameter group (`param piece`, piece j
// to the rank with group rank j). With zero_param_group = node, a param piece is cut
// again into one `sub-piece` per node (sub-piece n to the rank of node n with the same
// local rank: the cross_node communicator); with `world` the sub-piece is the param
// piece. Gradients are kept per param piece (grad group `node`) or per sub-piece (`world`),
// optimizer states likewise. Supported (param, grad, optim) groups at stage 3:
//   (world, world, world), (node, world, world) -- InternEvo's choice: gathers inside a
//   node, gradients and optimizer states over the world --, (node, node, world),
//   (node, node, node). zero_check rejects the others, naming the key.
//
// Stages 0-2 pad the flat buffers to a multiple of the shard count so every shard has
// the same size (all-gather and reduce-scatter need equal blocks); padding stays zero.
//
// Tensor parallelism (lib/model/tensor_parallel.h): the layout is this rank's block of
// every tensor, and `groups` are those of the data-parallel grid (grid_dp: the ranks of
// my tp index), so every stage shards over the data-parallel peers, whose layouts are
// equal. Tensors that several tp ranks hold copies of (norms, shared kv heads) have a
// partial gradient on each copy: after the data-parallel reduction, the part of them in
// this rank's gradient shard is summed over the copies (an aligned block of consecutive
// ranks: ZeroPeers::tp_blocks' blocks) -- the shards' bounds are the same on every tp rank, so
// the copies' shards line up. Only copy 0 counts in the gradient norm, which is summed
// over the tp group last.
//
// Pipeline stages (lib/runtime/pipeline.h): each stage's optimizer holds its stage's table
// and its groups are the stage's. ZeroPeers adds what crosses the stages: with tied
// embeddings the embedding gradient is summed between its copies on the first and the
// last stage (stages 0-2: the whole buffers, before the data-parallel reduction; stage 3:
// shard by shard after it -- the partner on the other stage has the same position in an
// equal parameter group, so the embedding unit's pieces have the same bounds), and the
// gradient norm's square is summed over the stages, the last stage's copy of a tied
// embedding left out. Stage 3 serves a stage exactly as a single model: the pipeline
// calls forward and backward of different micro-batches (or Seq1F1B chunks) interleaved,
// and each call gathers, frees and reduce-scatters unit by unit as above, so the stage
// holds its shards and the slots during the step too. A stage's model never touches the
// units it does not run (the embedding past the first stage, the head before the last;
// it prefetches the head only on the last stage); ranks with nothing to run in a
// pipeline unit answer the collectives with the model's idle halves.
#pragma once

#include <cstdint>
#include <memory>

#include "lib/backend/backend.h"
#include "lib/config/config.h"
#include "lib/model/llama.h"
#include "lib/model/params.h"
#include "lib/parallel/parallel_state.h"
#include "lib/util/timer.h"

namespace flexsp {

// Throws Error naming the key when the [parallel] ZeRO settings are not supported.
void zero_check(const ParallelSection& p);

class ZeroOptimizer {
 public:
  virtual ~ZeroOptimizer() = default;

  virtual int stage() const = 0;
  // What the model reads its weights from and accumulates its gradients into.
  virtual ParamProvider& provider() = 0;
  // Whether provider() starts the all-reduces inside the backward (stages 0-1, several
  // ranks, ZeroPeers::overlap).
  virtual bool overlaps_reduce() const { return false; }
  // Full flat parameters (host, the same on every rank) in; this rank keeps its part.
  virtual void set_params(const float* host) = 0;
  // Full flat parameters out (host, table.total). Collective (stage 3 gathers).
  virtual void get_params(float* host) = 0;

  // Checkpoint state (host buffers, ranges concatenated in order). state_shards(): the
  // AdamW moments this rank keeps, with the matching (up-to-date) parameters;
  // param_shards(): the parameters this rank keeps (stages 0-2: all of them).
  virtual ShardRanges state_shards() const = 0;
  virtual ShardRanges param_shards() const = 0;
  virtual void get_state(float* params, float* exp_avg, float* exp_avg_sq) = 0;  // over state_shards()
  // params over param_shards(), moments over state_shards(). Not collective.
  virtual void set_state(const float* params, const float* exp_avg, const float* exp_avg_sq) = 0;
  virtual int64_t adam_steps() const = 0;  // AdamW updates applied (bias correction)
  virtual void set_adam_steps(int64_t s) = 0;

  virtual void zero_grads() = 0;
  // Reduces the accumulated gradients, computes the global gradient norm, and -- when it
  // is finite -- applies AdamW (lr, clipped to o.grad_clip) and re-assembles the
  // parameters. Returns the norm (NaN or inf: nothing was changed). Collective.
  // timers (optional) receive grad_reduce and optimizer time.
  virtual double step(const OptimSection& o, double lr, PhaseTimes* timers = nullptr) = 0;
};

// The optimizer of stage p.zero over table (this rank's layout), sharding over
// peers.dp (lib/parallel/parallel_state.h: ZeroPeers). Throws Error naming the key when
// the settings are not supported (zero_check).
std::unique_ptr<ZeroOptimizer> make_zero_optimizer(Backend& be, const ParamTable& table,
                                                   const ParallelSection& p,
                                                   const ZeroPeers& peers);

}  // namespace flexsp

// ZeRO over flat buffers (docs/parallel.md): who keeps which part of the parameters,
// gradients and optimizer states, and which communication a step needs.
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
#include <utility>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/config/config.h"
#include "lib/grid/grid.h"
#include "lib/model/llama.h"
#include "lib/model/params.h"
#include "lib/model/tensor_parallel.h"
#include "lib/optim/optim.h"
#include "lib/parallel/parallel_state.h"
#include "lib/util/timer.h"

namespace flexsp {

// Throws Error naming the key when the [parallel] ZeRO settings are not supported.
void zero_check(const ParallelSection& p);

class ZeroOptimizer final : private ParamProvider {
 public:
  // peers: the data-parallel groups it shards over, and what tensor and pipeline
  // parallelism add (lib/parallel/parallel_state.h).
  ZeroOptimizer(Backend& be, const ParamTable& table, const ParallelSection& p,
                const ZeroPeers& peers);
  ~ZeroOptimizer() override;

  int stage() const { return stage_; }
  // What the model reads its weights from and accumulates its gradients into.
  ParamProvider& provider();
  // Whether provider() starts the all-reduces inside the backward (stages 0-1, several
  // ranks, ZeroPeers::overlap).
  bool overlaps_reduce() const { return stage_ <= 1 && groups_.world->size() > 1 && peers_.overlap; }
  // Full flat parameters (host, the same on every rank) in; this rank keeps its part.
  void set_params(const float* host);
  // Full flat parameters out (host, table.total). Collective (stage 3 gathers).
  void get_params(float* host);

  // Full-length replicas (stages 0-2), padded() long; nullptr at stage 3.
  float* params() { return params_.get(); }
  float* grads() { return grads_.get(); }
  int64_t padded() const { return padded_; }

  // Checkpoint state (host buffers, ranges concatenated in order). state_shards(): the
  // AdamW moments this rank keeps, with the matching (up-to-date) parameters;
  // param_shards(): the parameters this rank keeps (stages 0-2: all of them).
  ShardRanges state_shards() const;
  ShardRanges param_shards() const;
  void get_state(float* params, float* exp_avg, float* exp_avg_sq);  // over state_shards()
  // params over param_shards(), moments over state_shards(). Not collective.
  void set_state(const float* params, const float* exp_avg, const float* exp_avg_sq);
  int64_t adam_steps() const;  // AdamW updates applied (bias correction)
  void set_adam_steps(int64_t s);

  void zero_grads();
  // Reduces the accumulated gradients, computes the global gradient norm, and -- when it
  // is finite -- applies AdamW (lr, clipped to o.grad_clip) and re-assembles the
  // parameters. Returns the norm (NaN or inf: nothing was changed). Collective.
  // timers (optional) receive grad_reduce and optimizer time.
  double step(const OptimSection& o, double lr, PhaseTimes* timers = nullptr);

 private:
  struct Unit;
  struct Slot {
    Buffer<float> buf;
    int unit = -1;  // -1: free, -2: its reduce-scatter is under way
    bool grad = false;
    bool act = false;  // weights in the backend's act_dtype (bf16), not fp32
    std::unique_ptr<CommRequest> gather;  // started into buf (prefetch), not yet completed
  };
  void init_stage3(const ParallelSection& p);
  // Sums the copies of tp-replicated tensors in g (flat [first, last) of the layout, at
  // g) over their tp ranks; returns the sum of squares of the parts this rank does not
  // count in the norm (copies other than 0).
  double tp_reduce(float* g, int64_t first, int64_t last, PhaseTimes* timers);
  // Sums a norm's square over the tp group (host).
  void tp_sum(double* sumsq);
  double step3(const OptimSection& o, double lr, PhaseTimes* timers);
  Slot& take_slot(int u, bool grad, bool act = false);
  Slot* find_slot(int u, bool grad, bool act = false);
  // Starts unit u's gather into a new slot (act: the act-dtype copy), and completes a
  // slot's gather (if started and not yet completed).
  Slot& start_gather(int u, bool act);
  static void complete_gather(Slot& s);
  // pshard_act_ = pshard_ in the act dtype (after every change of pshard_).
  void refresh_act_shard();
  // Completes the started reduce-scatter (if any): adds it to the gradient shard, frees
  // its slot.
  void finish_reduce();
  // ParamProvider (stage 3)
  const float* unit_params(int u) override;
  float* unit_grads(int u) override;
  void unit_done(int u, bool backward) override;
  const act_t* unit_act_params(int u) override;
  void prefetch(int u) override;
  bool collective() const override { return true; }

  Backend& be_;
  const ParamTable& table_;
  int stage_ = 0;
  Groups& groups_;
  ZeroPeers peers_;
  std::vector<TpReplicated> replicated_;  // tp > 1: the flat ranges held by several tp ranks
  FlatParams flat_;
  // stages 0-2
  // Communicators come from Groups::for_backend() for buffers and from the host set for
  // scalars (the gradient norm): with NCCL the two differ.
  Comm* shard_comm_ = nullptr;  // the optimizer shard group (world or node)
  Comm* shard_host_ = nullptr;  // the same group, host set
  int64_t padded_ = 0, begin_ = 0, end_ = 0, block_ = 0;
  Buffer<float> params_, grads_, scratch_;  // scratch_: one block, for the collectives
  // Stages 0-1 on several ranks: the full buffers, each unit's gradient all-reduce started
  // once the last micro-batch's backward is done with it.
  class ReducingFlat final : public ParamProvider {
   public:
    explicit ReducingFlat(ZeroOptimizer& z) : z_(z) {}
    const float* unit_params(int u) override { return z_.flat_.unit_params(u); }
    float* unit_grads(int u) override { return z_.flat_.unit_grads(u); }
    void unit_done(int u, bool backward) override;
    void begin_micro_batch(bool last) override;
    bool collective() const override { return true; }

   private:
    ZeroOptimizer& z_;
    bool last_ = false;
    std::vector<int> dones_;  // backward dones per unit in this micro-batch
  };
  ReducingFlat reducing_flat_{*this};
  std::vector<std::unique_ptr<CommRequest>> unit_reductions_;  // started this step
  std::unique_ptr<AdamW> adamw_;
  // stage 3
  Comm* pcomm_ = nullptr;      // parameter group (gradient reductions)
  Comm* pgather_ = nullptr;    // the same group over the parameter-gather communicators
  Comm* phost_ = nullptr;      // the same group, host set
  Comm* outer_ = nullptr;      // cross_node when the parameter group is the node, else null
  bool grad_node_ = false, optim_node_ = false;
  std::vector<Unit> units_;
  Buffer<float> pshard_, gshard_, scratch2_;  // scratch_: a param piece, scratch2_: a sub-piece
  // With bf16 activations: my param pieces in bf16, what the model's weights are gathered
  // from (half the bytes of an fp32 gather; the same values as casting after it).
  Buffer<unsigned char> pshard_act_;
  std::vector<Slot> slots_;
  int64_t slot_size_ = 0;
  struct Reduction {
    std::unique_ptr<CommRequest> req;  // null: none under way
    int unit = -1;
    size_t slot = 0;  // index into slots_ (which may grow meanwhile)
  } reducing_;
};

}  // namespace flexsp

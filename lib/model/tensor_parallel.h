// Tensor parallelism (Megatron-LM's, with sequence-sharded activations): what the model
// needs to know of it, apart from the communicator.
//
// tp ranks (consecutive ranks of one node) share one model replica. Column-parallel
// q/k/v/gate/up hold a block of output rows each (a rank computes heads/tp heads and
// ffn/tp of the MLP), row-parallel o/down the matching block of input columns; outside
// those regions the activations are cut along tokens over the tp ranks ("sequence
// parallelism"): all-gather before a column-parallel GEMM, reduce-scatter after a
// row-parallel one, so no activation is held twice. The embedding and lm_head are split
// along the vocabulary (padded to a multiple of tp), and the cross-entropy reduces its
// per-shard statistics across the group instead of gathering logits. kv heads are split
// over the ranks when tp divides them, otherwise each rank keeps the kv head of its q
// heads (tp / kv_heads ranks share one). Norm weights are whole on every rank; like the
// replicated kv heads, their gradients are partial per rank and summed over the group
// before the optimizer (lib/runtime/zero.h).
#pragma once

#include <cstdint>
#include <vector>

#include "lib/model/model_config.h"
#include "lib/model/params.h"

namespace flexsp {

class Comm;

// The tensor-parallel group as the model sees it: a communicator for backend buffers
// (nullptr when size == 1), its size and this rank's index.
struct TpGroup {
  Comm* comm = nullptr;
  int size = 1, rank = 0;
};

// Throws Error naming parallel.tp_size unless tp is 1, 2, 4 or 8 and divides the heads and
// the FFN width, and tp divides the kv heads or they divide it.
void tp_check(const ModelConfig& c, int tp);

// One rank's share of the shape: heads, kv_heads, ffn and vocab per rank (the vocabulary
// padded up to a multiple of tp); hidden, head_dim and the rest unchanged. c for tp = 1.
// (hidden then differs from heads x head_dim: the code keeps the two apart.)
ModelConfig tp_local_config(const ModelConfig& c, int tp);

// The vocabulary rows of rank r: [begin, begin + rows) of the padded vocabulary, of which
// the first `valid` are real tokens.
struct VocabShard {
  int64_t begin = 0, rows = 0, valid = 0;
};
VocabShard tp_vocab_shard(const ModelConfig& c, int tp, int r);

// Copies between a full flat buffer (the table of tp = 1) and a rank's block buffer
// (its table): extract fills every block element (vocabulary padding 0); insert writes
// the block's real elements into the full buffer. Host memory.
void tp_extract(const ParamTable& full, const float* src, const ParamTable& block, float* dst);
void tp_insert(const ParamTable& block, const float* src, const ParamTable& full, float* dst);

// Flat ranges of the block table whose tensors are replicated over tensor-parallel ranks
// (norms; k/v shared by several ranks), with the ranks' count: their gradients are
// partial on each rank and must be summed over those ranks.
struct TpReplicated {
  int64_t begin = 0, end = 0;
  int replicas = 1, replica = 0;
};
std::vector<TpReplicated> tp_replicated_ranges(const ParamTable& block);

}  // namespace flexsp

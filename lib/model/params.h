// Parameters in flat buffers: one table of named views into a single float buffer.
//
// The same table describes the weights, their gradients and the AdamW moments (four
// buffers of the same length), so the optimizer, gradient reduction and ZeRO sharding work
// on plain ranges of floats while checkpoints and the reference tests see HF names and
// shapes (docs/model.md). Order: model.embed_tokens.weight, then each layer's nine tensors
// contiguously (ZeRO-3 gathers a layer as one range), then model.norm.weight and
// lm_head.weight (absent when tied: the model reads the embedding instead). Each tensor
// starts at a multiple of kParamAlign elements; the padding between tensors stays zero
// in every buffer.
//
// Initialisation depends only on (seed, tensor index, element index) through a
// counter-based generator, so any rank can fill any shard of the buffer and get the same
// values as one process filling all of it.
//
// Tensor parallelism (lib/model/tensor_parallel.h): with tp ranks, each rank's table has
// the same tensors in the same order, but each view is this rank's block of the full
// tensor -- a block of rows (column-parallel q/k/v/gate/up, the vocabulary-parallel
// embedding and lm_head), a block of columns (row-parallel o/down), or the whole tensor
// (norms; k/v when there are fewer kv heads than ranks), possibly replicated over several
// ranks. The view records where its block sits (full shape, origin, replicas), so
// checkpoints keep the full shape, initialisation draws the full tensor's elements, and
// every tp size trains the same model. With tp = 1 every block is the whole tensor.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lib/model/model_config.h"

namespace flexsp {

constexpr int64_t kParamAlign = 16;  // elements (64 bytes)

enum class TensorKind : int {
  // per layer, in layout order
  attn_norm, q_proj, k_proj, v_proj, o_proj, mlp_norm, gate_proj, up_proj, down_proj,
  // outside the layers
  embed, final_norm, lm_head
};
constexpr int kTensorsPerLayer = 9;

struct ParamView {
  std::string name;      // HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
  TensorKind kind;
  int layer = -1;        // -1 outside the layers
  int64_t rows = 0;      // this rank's block [rows, cols] of HF [out, in]; 1-D: cols == 1
  int64_t cols = 0;
  bool is_1d = false;    // norms: shape [rows]; no weight decay
  int64_t offset = 0;    // first element in the flat buffer
  // The block in the full tensor: rows [row0, row0 + rows) and columns [col0, col0 +
  // cols) of [full_rows, full_cols]. Rows past full_rows pad a vocabulary that is not a
  // multiple of tp: zero, never predicted, never saved. tp_replicas ranks hold the same
  // block (this one is number tp_replica among them).
  int64_t full_rows = 0, full_cols = 0, row0 = 0, col0 = 0;
  int tp_replicas = 1, tp_replica = 0;
  int64_t numel() const { return rows * cols; }
  std::vector<int64_t> shape() const {  // the block's
    return is_1d ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols};
  }
  std::vector<int64_t> full_shape() const {  // the tensor's (HF)
    return is_1d ? std::vector<int64_t>{full_rows} : std::vector<int64_t>{full_rows, full_cols};
  }
  // Rows of the block inside the full tensor (the rest is vocabulary padding).
  int64_t valid_rows() const {
    return full_rows - row0 < rows ? (full_rows > row0 ? full_rows - row0 : 0) : rows;
  }
  // Element index in the full tensor of block element e (which must be a valid row's).
  int64_t full_index(int64_t e) const {
    return (row0 + e / cols) * full_cols + col0 + e % cols;
  }
  bool whole() const { return rows == full_rows && cols == full_cols; }
};

struct ParamTable {
  std::vector<ParamView> views;  // layout order; index = tensor index for init
  int64_t total = 0;             // flat length (views + padding)
  int layers = 0;
  bool tied = false;

  // A layer's tensor, or a global one (layer ignored).
  const ParamView& get(TensorKind kind, int layer = -1) const;
  // nullptr when no tensor has that name.
  const ParamView* find(const std::string& name) const;
  // [begin, end) of layer l's tensors in the flat buffer (padding included).
  int64_t layer_begin(int l) const;
  int64_t layer_end(int l) const;
};

// The table of tensor-parallel rank tp_rank of tp_size (1, 0: the whole model). The
// shape must allow tp_size (tp_check in tensor_parallel.h).
ParamTable make_param_table(const ModelConfig& c, int tp_size = 1, int tp_rank = 0);

// Fills out[0 .. end-begin) with elements [begin, end) of the initial flat parameter
// buffer: normal(0, init_std); o_proj and down_proj scaled by 1/sqrt(2 layers); norms 1;
// padding 0. Each element is the full tensor's element at its place (ParamView), so the
// tables of any tp size draw the same model. Host memory.
void init_params(const ModelConfig& c, const ParamTable& t, uint64_t seed, float* out,
                 int64_t begin, int64_t end);

// Flat ranges [first, second) of the parameter layout held by a rank, ascending, and how
// they are replicated: `replicas` ranks hold the same ranges (ZeRO, lib/runtime/zero.h: at
// stage 0 every rank; with shard groups inside a node one rank per node), this rank being
// number `replica` among them.
// Cutting every range into `replicas` near-equal parts and keeping part `replica` gives
// this rank's share of a partition of the layout over all ranks (checkpoints write and
// checksum exactly that share).
struct ShardRanges {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int replica = 0, replicas = 1;
  int64_t size() const {
    int64_t n = 0;
    for (const auto& r : ranges) n += r.second - r.first;
    return n;
  }
};

}  // namespace flexsp

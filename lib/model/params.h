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
#pragma once

#include <cstdint>
#include <string>
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
  int64_t rows = 0;      // [rows, cols] = HF [out, in]; a 1-D tensor has cols == 1
  int64_t cols = 0;
  bool is_1d = false;    // norms: shape [rows]; no weight decay
  int64_t offset = 0;    // first element in the flat buffer
  int64_t numel() const { return rows * cols; }
  std::vector<int64_t> shape() const {
    return is_1d ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols};
  }
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

ParamTable make_param_table(const ModelConfig& c);

// Fills out[0 .. end-begin) with elements [begin, end) of the initial flat parameter
// buffer: normal(0, init_std); o_proj and down_proj scaled by 1/sqrt(2 layers); norms 1;
// padding 0. Host memory.
void init_params(const ModelConfig& c, const ParamTable& t, uint64_t seed, float* out,
                 int64_t begin, int64_t end);

}  // namespace flexsp

// The resolved model configuration: a preset's shape with the [model] keys the user set
// applied on top (docs/commands.md, docs/model.md). Everything that sizes buffers or counts
// FLOPs reads this struct, never the raw ModelSection.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "lib/config/config.h"

namespace flexsp {

struct ModelConfig {
  std::string preset;
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  int head_dim = 0;  // hidden / heads (set by resolve_model_config)
  double rope_theta = 10000, norm_eps = 1e-5;
  // RoPE scaling, HF's rope_scaling (lib/model/rope.h). The factors matter only for the
  // type that uses them (linear: factor).
  RopeScaling rope_scaling = RopeScaling::none;
  double rope_scaling_factor = 1, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  int rope_original_max_position = 8192;
  bool tie_embeddings = false;
  bool checkpoint_activations = false;
  double init_std = 0.02;
  // Layers and the loss run over chunks of this many local tokens (train.token_chunk,
  // lib/model/chunked_layer.h; 0: whole micro-batches).
  int64_t token_chunk = 0;
  // Activation offload (train.offload, lib/model/offload.h): the layers' saved blocks go to
  // host memory and come back offload_ahead layers before their backward.
  bool offload = false;
  int offload_ahead = 2;
  // With offload: the most tokens per device of a micro-batch that keeps its blocks on the
  // device instead (MicroBatch::offload false: the planner's choice under train.offload =
  // auto); 0: every micro-batch offloads.
  int64_t offload_plain_tokens = 0;

  int q_dim() const { return heads * head_dim; }      // width of q and of attention output
  int kv_dim() const { return kv_heads * head_dim; }  // width of k and v
};

// Names of the presets, smallest first: tiny, small, 125m, 350m, 1.3b, 7b, 13b, 30b, 65b.
std::vector<std::string> model_preset_names();

// Preset, then every field the user gave: a field is taken from `m` when its key
// ("model.hidden", ...) is in set_keys or its value is non-zero (shape fields default to
// 0 = "the preset's"). vocab: model.vocab if given, else dataset_vocab if > 0, else the
// preset's (32000 for the LLaMA-size presets; tiny and small have none). Validates the
// result; throws Error naming the offending key.
ModelConfig resolve_model_config(const ModelSection& m, const std::set<std::string>& set_keys,
                                 int dataset_vocab);

// Throws Error naming the key when the shape is not runnable (see model_config.cpp).
void validate_model_config(const ModelConfig& c);

// Number of parameters (lm_head counted once when tied).
int64_t model_num_params(const ModelConfig& c);

// Training FLOPs (forward + backward, no activation recompute) of the dense part per
// token: 6 x (parameters in matrix products, lm_head included even when tied).
double model_dense_flops_per_token(const ModelConfig& c);
// Training FLOPs of causal attention scores and weighted sums for one sequence of s tokens:
// 3 (fwd + bwd) x 4 x heads x head_dim x s(s+1)/2 per layer.
double model_attention_flops(const ModelConfig& c, int64_t s);
// Both, for a batch of sequences.
double model_train_flops(const ModelConfig& c, const std::vector<int64_t>& seqlens);

// One line for logs: "hidden 64, layers 2, heads 4 (kv 2), ffn 176, vocab 300, 0.10M params".
std::string model_config_summary(const ModelConfig& c);

}  // namespace flexsp

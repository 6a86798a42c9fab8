// Importing a HuggingFace LlamaForCausalLM folder into a flexsp weights file (`flexsp
// import`): DIR/config.json and DIR/model.safetensors, or the shards listed by
// DIR/model.safetensors.index.json (bf16, fp16 or fp32) -> the weights layout of
// io/weights (/model/<HF name>, float32) that `train --load-weights`, `eval` and
// `export` read. The inverse of app/cmd_export.cpp: export then import is bit-exact in
// fp32, and exact in bf16 to the bf16 values.
//
// Everything is checked before anything is written, and every mismatch is one Error
// naming the file and the key or tensor: an architecture other than LlamaForCausalLM, an
// activation other than silu, biases, head_dim != hidden/heads, a RoPE scaling other
// than linear / llama3, a missing or extra tensor (or one in two shards, or not where
// the index says), a shape the config contradicts, a truncated or malformed file. The
// one tolerance: `*.rotary_emb.inv_freq` buffers some old checkpoints carry are skipped
// (derived from rope_theta, not parameters), and a tied model's lm_head.weight is
// accepted when it equals the embedding.
//
// rope_theta and rope_scaling are recorded in the weights file's /model attributes, so a
// run started from it keeps the model's RoPE unless its config changes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lib/model/model_config.h"

namespace flexsp {

struct HfConfig {
  ModelConfig model;
  int64_t max_position_embeddings = 0;  // 0: not given
  std::string torch_dtype;              // as given ("" if absent)
};

// Reads DIR/config.json. Throws Error naming the file and key.
HfConfig read_hf_config(const std::string& dir);

struct HfImportResult {
  HfConfig config;
  std::vector<std::string> files;  // the safetensors files read
  int64_t tensors = 0;             // tensors written
  std::vector<std::string> notes;  // what was skipped, and why
};

// Reads DIR and writes the weights file `out` (temporary name, renamed when complete; an
// error leaves `out` as it was). Throws Error naming the file and the tensor.
HfImportResult import_hf(const std::string& dir, const std::string& out);

}  // namespace flexsp

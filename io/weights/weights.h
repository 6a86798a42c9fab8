// Model weights in HDF5 with HF names and full logical shapes (docs/checkpoints.md's /model
// group; root attributes schema = "flexsp.weights", schema_version = 1):
//   /model/<HF name>   float32, shape [out, in] or [n]
//   attributes of /model: hidden, layers, heads, kv_heads, ffn, vocab (int),
//                         rope_theta, norm_eps (float64), tie_embeddings (int 0/1),
//                         rope_scaling (string: none, linear, llama3),
//                         rope_scaling_factor, rope_low_freq_factor,
//                         rope_high_freq_factor (float64), rope_original_max_position
//                         (int); a file without rope_scaling means none
// Used to exchange weights with the PyTorch reference now; checkpoints reuse the same
// layout (and write_tensors/read_tensors for /optimizer/exp_avg etc.).
//
// Buffers here are host memory in the flat layout of a ParamTable (padding untouched);
// the caller copies to and from the backend. Serial I/O (one process); the parallel
// checkpoint writer writes the same datasets collectively.
#pragma once

#include <hdf5.h>

#include <functional>
#include <string>
#include <vector>

#include "lib/model/model_config.h"
#include "lib/model/params.h"

namespace flexsp {

// Writes path (truncating) with /model attributes and every tensor of t from params.
void dump_weights(const std::string& path, const ModelConfig& c, const ParamTable& t,
                  const float* params);
// The same, asking fill(view, out) for each tensor's v.numel() float32 values in turn:
// memory holds one tensor at a time (flexsp import). Written under a temporary name and
// renamed; on any error the temporary file is removed and the Error rethrown.
void write_weights(const std::string& path, const ModelConfig& c, const ParamTable& t,
                   const std::function<void(const ParamView&, float*)>& fill);
// Reads every tensor of t into params after checking that the file's /model attributes
// match c. Throws Error naming the file and the differing field, or the missing or
// misshapen tensor.
void load_weights(const std::string& path, const ModelConfig& c, const ParamTable& t,
                  float* params);
// The model configuration stored in a weights file (preset "file").
ModelConfig read_weights_config(const std::string& path);

// Lower level, for checkpoints and tools: the attributes and tensors of one group.
void write_model_attrs(hid_t group, const ModelConfig& c);
ModelConfig read_model_attrs(hid_t group);
// Throws naming `what` (e.g. "ckpt.h5: model.hidden") when the configs differ in shape or
// norm_eps (RoPE settings may differ: see rope.h's adopt_file_rope).
void check_model_attrs(const ModelConfig& file, const ModelConfig& run, const std::string& what);
void write_tensors(hid_t group, const ParamTable& t, const float* buf);
void read_tensors(hid_t group, const ParamTable& t, float* buf, const std::string& what);
// One float32 dataset of the given shape (1-D or 2-D) under loc.
void write_f32(hid_t loc, const std::string& name, const float* data,
               const std::vector<int64_t>& shape);

}  // namespace flexsp

// RoPE frequencies, once, on the host (docs/model.md: context extension).
//
// The rotation angle of pair i (i < head_dim/2) at position p is p * inv_freq[i]. With
// no scaling inv_freq[i] = theta^(-2i/head_dim). A model whose context is extended may
// use a larger theta and/or a scaling of the frequencies, with HF's definitions
// (transformers' rope_scaling, config.json):
//   linear  inv_freq /= factor (positions divided by factor);
//   llama3  wavelength w = 2 pi / inv_freq, L = original_max_position:
//           w < L / high_freq_factor   kept;
//           w > L / low_freq_factor    divided by factor;
//           otherwise                  (1 - s) inv_freq / factor + s inv_freq,
//                                      s = (L / w - low_freq_factor) / (high - low).
// Neither changes the attention scale (HF's attention_factor is 1 for both).
//
// The table is computed here in double and handed to the rope ops (Backend::rope_*), so
// the CPU kernel and the CUDA kernel use the very same numbers (they are twins by
// construction). Positions still restart at 0 in every sequence; nothing here knows them.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "lib/model/model_config.h"

namespace flexsp {

// inv_freq[i], i < head_dim/2, of c's rope_theta and rope scaling.
std::vector<double> rope_inv_freq(const ModelConfig& c);

// The RoPE fields of `file` (a weights file or checkpoint the run starts from) replace
// those of `run` whose [model] key the user did not set ("model.rope_theta", ...): an
// imported model keeps its RoPE unless the config extends it. Returns a note for the log
// when the run's RoPE differs from the file's, else "".
std::string adopt_file_rope(ModelConfig& run, const ModelConfig& file,
                            const std::set<std::string>& set_keys);

// "rope_theta 500000, llama3 (factor 8, low 1, high 4, original 8192)" or
// "rope_theta 10000, no scaling".
std::string rope_summary(const ModelConfig& c);

}  // namespace flexsp

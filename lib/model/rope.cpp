// See rope.h for the definitions (HF's rope_scaling types "linear" and "llama3").
#include "lib/model/rope.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "kernels/cpu/cpu_kernels.h"
#include "lib/util/error.h"

namespace flexsp {

std::vector<double> rope_inv_freq(const ModelConfig& c) {
  std::vector<double> f = cpu::rope_default_inv_freq(c.head_dim, c.rope_theta);
  if (c.rope_scaling == RopeScaling::linear) {
    for (double& x : f) x /= c.rope_scaling_factor;
  } else if (c.rope_scaling == RopeScaling::llama3) {
    const double L = c.rope_original_max_position, lo = c.rope_low_freq_factor,
                 hi = c.rope_high_freq_factor, factor = c.rope_scaling_factor;
    const double low_freq_wavelen = L / lo, high_freq_wavelen = L / hi;
    for (double& x : f) {
      const double w = 2 * std::numbers::pi / x;
      if (w < high_freq_wavelen) continue;  // high frequencies: kept
      if (w > low_freq_wavelen) {           // low frequencies: interpolated by factor
        x /= factor;
        continue;
      }
      const double s = (L / w - lo) / (hi - lo);  // in between: a smooth blend
      x = (1 - s) * x / factor + s * x;
    }
  }
  return f;
}

std::string adopt_file_rope(ModelConfig& run, const ModelConfig& file,
                            const std::set<std::string>& set_keys) {
  auto unset = [&](const char* key) { return set_keys.count(std::string("model.") + key) == 0; };
  if (unset("rope_theta")) run.rope_theta = file.rope_theta;
  if (unset("rope_scaling")) run.rope_scaling = file.rope_scaling;
  if (unset("rope_scaling_factor")) run.rope_scaling_factor = file.rope_scaling_factor;
  if (unset("rope_low_freq_factor")) run.rope_low_freq_factor = file.rope_low_freq_factor;
  if (unset("rope_high_freq_factor")) run.rope_high_freq_factor = file.rope_high_freq_factor;
  if (unset("rope_original_max_position"))
    run.rope_original_max_position = file.rope_original_max_position;
  validate_model_config(run);
  const std::string a = rope_summary(file), b = rope_summary(run);
  return a == b ? "" : fmt::format("RoPE changes from the file's {} to {}", a, b);
}

std::string rope_summary(const ModelConfig& c) {
  std::string s = fmt::format("rope_theta {}", c.rope_theta);
  if (c.rope_scaling == RopeScaling::linear) return s + fmt::format(", linear (factor {})", c.rope_scaling_factor);
  if (c.rope_scaling == RopeScaling::llama3)
    return s + fmt::format(", llama3 (factor {}, low {}, high {}, original {})", c.rope_scaling_factor,
                           c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_original_max_position);
  return s + ", no scaling";
}

}  // namespace flexsp

// Presets and resolution of the [model] section. The LLaMA presets use the published
// shapes (7b/13b/30b/65b); 125m/350m/1.3b follow GPT-3's widths and depths with a SwiGLU
// width of 8/3 x hidden rounded up to a multiple of 256 (LLaMA's rule). tiny and small
// are for tests and CPU demos.
#include "lib/model/model_config.h"

#include <fmt/format.h>

#include "lib/util/error.h"

namespace flexsp {
namespace {

struct Preset {
  const char* name;
  int hidden, layers, heads, kv_heads, ffn, vocab;
};

constexpr Preset kPresets[] = {
    {"tiny", 64, 2, 4, 2, 176, 0},
    {"small", 256, 4, 8, 4, 768, 0},
    {"125m", 768, 12, 12, 12, 2048, 32000},
    {"350m", 1024, 24, 16, 16, 2816, 32000},
    {"1.3b", 2048, 24, 32, 32, 5632, 32000},
    {"7b", 4096, 32, 32, 32, 11008, 32000},
    {"13b", 5120, 40, 40, 40, 13824, 32000},
    {"30b", 6656, 60, 52, 52, 17920, 32000},
    {"65b", 8192, 80, 64, 64, 22016, 32000},
};

const Preset* find_preset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return &p;
  return nullptr;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

ModelConfig resolve_model_config(const ModelSection& m, const std::set<std::string>& set_keys,
                                 int dataset_vocab) {
  const Preset* p = find_preset(m.preset);
  FLEXSP_CHECK(p != nullptr, "model.preset: unknown preset '{}' (expected one of {})", m.preset,
               fmt::join(model_preset_names(), ", "));
  auto given = [&](const char* key, double value) {
    return value != 0 || set_keys.count(std::string("model.") + key) != 0;
  };
  ModelConfig c;
  c.preset = m.preset;
  c.hidden = given("hidden", m.hidden) ? m.hidden : p->hidden;
  c.layers = given("layers", m.layers) ? m.layers : p->layers;
  c.heads = given("heads", m.heads) ? m.heads : p->heads;
  c.kv_heads = given("kv_heads", m.kv_heads) ? m.kv_heads : p->kv_heads;
  c.ffn = given("ffn", m.ffn) ? m.ffn : p->ffn;
  c.rope_theta = given("rope_theta", m.rope_theta) ? m.rope_theta : 10000.0;
  c.norm_eps = given("norm_eps", m.norm_eps) ? m.norm_eps : 1e-5;
  c.rope_scaling = m.rope_scaling;
  c.rope_scaling_factor = m.rope_scaling_factor;
  c.rope_low_freq_factor = m.rope_low_freq_factor;
  c.rope_high_freq_factor = m.rope_high_freq_factor;
  c.rope_original_max_position = m.rope_original_max_position;
  c.tie_embeddings = m.tie_embeddings;
  c.checkpoint_activations = m.checkpoint_activations;
  c.init_std = m.init_std;
  if (given("vocab", m.vocab)) {
    c.vocab = m.vocab;
    FLEXSP_CHECK(dataset_vocab <= 0 || c.vocab >= dataset_vocab,
                 "model.vocab: {} is smaller than the dataset's vocabulary size {}", c.vocab,
                 dataset_vocab);
  } else if (dataset_vocab > 0) {
    c.vocab = dataset_vocab;
  } else {
    FLEXSP_CHECK(p->vocab > 0,
                 "model.vocab: not given and no dataset to take it from (preset '{}' has none)",
                 m.preset);
    c.vocab = p->vocab;
  }
  if (c.heads > 0) c.head_dim = c.hidden / c.heads;
  validate_model_config(c);
  return c;
}

void validate_model_config(const ModelConfig& c) {
  auto positive = [](const char* key, double v) {
    FLEXSP_CHECK(v > 0, "model.{}: must be positive, got {}", key, v);
  };
  positive("hidden", c.hidden);
  positive("layers", c.layers);
  positive("heads", c.heads);
  positive("kv_heads", c.kv_heads);
  positive("ffn", c.ffn);
  positive("vocab", c.vocab);
  positive("rope_theta", c.rope_theta);
  positive("norm_eps", c.norm_eps);
  positive("init_std", c.init_std);
  FLEXSP_CHECK(c.hidden % c.heads == 0, "model.heads: {} does not divide model.hidden {}",
               c.heads, c.hidden);
  FLEXSP_CHECK(c.heads % c.kv_heads == 0, "model.kv_heads: {} does not divide model.heads {}",
               c.kv_heads, c.heads);
  const int hd = c.hidden / c.heads;
  FLEXSP_CHECK(hd % 2 == 0,
               "model.heads: head_dim = hidden/heads = {}/{} = {} must be even (RoPE rotates pairs)",
               c.hidden, c.heads, hd);
  FLEXSP_CHECK(c.vocab <= (1 << 30), "model.vocab: {} is too large", c.vocab);
  if (c.rope_scaling != RopeScaling::none)
    FLEXSP_CHECK(c.rope_scaling_factor >= 1, "model.rope_scaling_factor: must be >= 1, got {}",
                 c.rope_scaling_factor);
  if (c.rope_scaling == RopeScaling::llama3) {
    positive("rope_low_freq_factor", c.rope_low_freq_factor);
    positive("rope_original_max_position", c.rope_original_max_position);
    FLEXSP_CHECK(c.rope_high_freq_factor > c.rope_low_freq_factor,
                 "model.rope_high_freq_factor: {} must be larger than model.rope_low_freq_factor {}",
                 c.rope_high_freq_factor, c.rope_low_freq_factor);
  }
  FLEXSP_CHECK(c.head_dim == hd, "model: head_dim {} is not hidden/heads = {}", c.head_dim, hd);
}

int64_t model_num_params(const ModelConfig& c) {
  const int64_t h = c.hidden, hd = c.hidden / c.heads;
  const int64_t qd = c.heads * hd, kvd = c.kv_heads * hd;
  const int64_t layer = 2 * h + h * qd + 2 * h * kvd + qd * h + 3 * h * c.ffn;
  return static_cast<int64_t>(c.vocab) * h * (c.tie_embeddings ? 1 : 2) + c.layers * layer + h;
}

double model_dense_flops_per_token(const ModelConfig& c) {
  const double h = c.hidden, hd = static_cast<double>(c.hidden) / c.heads;
  const double qd = c.heads * hd, kvd = c.kv_heads * hd;
  const double matmul = c.layers * (h * qd + 2 * h * kvd + qd * h + 3 * h * c.ffn) +
                        static_cast<double>(c.vocab) * h;
  return 6.0 * matmul;
}

double model_attention_flops(const ModelConfig& c, int64_t s) {
  const double hd = static_cast<double>(c.hidden) / c.heads;
  const double pairs = static_cast<double>(s) * static_cast<double>(s + 1) / 2.0;
  return 12.0 * c.layers * c.heads * hd * pairs;
}

double model_train_flops(const ModelConfig& c, const std::vector<int64_t>& seqlens) {
  double f = 0;
  for (int64_t s : seqlens)
    f += model_dense_flops_per_token(c) * static_cast<double>(s) + model_attention_flops(c, s);
  return f;
}

std::string model_config_summary(const ModelConfig& c) {
  return fmt::format("{}: hidden {}, layers {}, heads {} (kv {}), ffn {}, vocab {}{}, {:.2f}M params",
                     c.preset, c.hidden, c.layers, c.heads, c.kv_heads, c.ffn, c.vocab,
                     c.tie_embeddings ? " (tied)" : "", model_num_params(c) / 1e6);
}

}  // namespace flexsp

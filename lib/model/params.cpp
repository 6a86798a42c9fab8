// Flat parameter layout and the shard-independent seeded initialisation (see params.h).
// The generator is splitmix64 used as a hash of (seed, tensor, counter) and Box-Muller for
// the normal: element e of a tensor uses counters 2*(e/2) and 2*(e/2)+1 and takes the
// cosine branch when e is even, the sine branch when odd. No std::normal_distribution:
// its algorithm differs between standard libraries.
#include "lib/model/params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "lib/util/error.h"

namespace flexsp {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Element e of a tensor whose stream key is `key`: one standard normal.
double normal_at(uint64_t key, int64_t e) {
  const uint64_t pair = static_cast<uint64_t>(e / 2);
  const uint64_t r1 = mix64(key + (2 * pair + 1) * kGolden);
  const uint64_t r2 = mix64(key + (2 * pair + 2) * kGolden);
  const double u1 = (static_cast<double>(r1 >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(r2 >> 11) * 0x1.0p-53;          // [0, 1)
  const double rad = std::sqrt(-2.0 * std::log(u1));
  const double ang = 2.0 * std::numbers::pi * u2;
  return (e % 2 == 0) ? rad * std::cos(ang) : rad * std::sin(ang);
}

int64_t align_up(int64_t x) { return (x + kParamAlign - 1) / kParamAlign * kParamAlign; }

}  // namespace

ParamTable make_param_table(const ModelConfig& c, int tp_size, int tp_rank) {
  FLEXSP_ASSERT(tp_size >= 1 && tp_rank >= 0 && tp_rank < tp_size);
  ParamTable t;
  t.layers = c.layers;
  t.tied = c.tie_embeddings;
  const int64_t h = c.hidden, qd = c.q_dim(), kvd = c.kv_dim(), f = c.ffn, v = c.vocab;
  const int64_t tp = tp_size, r = tp_rank, hd = c.head_dim;
  FLEXSP_ASSERT(qd > 0 && kvd > 0 && qd % tp == 0 && f % tp == 0 &&
                (c.kv_heads % tp == 0 || tp % c.kv_heads == 0));
  // Blocks of this rank: a row block (or the whole tensor, replicated `reps` times) of
  // [full_rows, full_cols]; a column block for row-parallel weights.
  auto add = [&](std::string name, TensorKind kind, int layer, int64_t full_rows,
                 int64_t full_cols, bool is_1d, int64_t rows, int64_t row0, int64_t cols,
                 int64_t col0, int reps = 1) {
    ParamView pv{std::move(name), kind, layer, rows, cols, is_1d, t.total};
    pv.full_rows = full_rows, pv.full_cols = full_cols, pv.row0 = row0, pv.col0 = col0;
    pv.tp_replicas = reps, pv.tp_replica = static_cast<int>(r % reps);
    t.total = align_up(t.total + rows * cols);
    t.views.push_back(std::move(pv));
  };
  auto rows_split = [&](std::string name, TensorKind kind, int layer, int64_t R, int64_t C) {
    add(std::move(name), kind, layer, R, C, false, R / tp, r * (R / tp), C, 0);
  };
  auto cols_split = [&](std::string name, TensorKind kind, int layer, int64_t R, int64_t C) {
    add(std::move(name), kind, layer, R, C, false, R, 0, C / tp, r * (C / tp));
  };
  auto replicated = [&](std::string name, TensorKind kind, int layer) {
    add(std::move(name), kind, layer, h, 1, true, h, 0, 1, 0, tp_size);
  };
  // k and v: split by kv heads, or (fewer kv heads than ranks) the kv head of this
  // rank's q heads, on tp / kv_heads ranks each.
  auto kv = [&](std::string name, TensorKind kind, int layer) {
    if (c.kv_heads % tp == 0) return rows_split(std::move(name), kind, layer, kvd, h);
    const int64_t reps = tp / c.kv_heads;
    add(std::move(name), kind, layer, kvd, h, false, hd, (r / reps) * hd, h, 0,
        static_cast<int>(reps));
  };
  const int64_t vl = (v + tp - 1) / tp;  // vocabulary rows per rank, the last padded
  add("model.embed_tokens.weight", TensorKind::embed, -1, v, h, false, vl, r * vl, h, 0);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    replicated(p + "input_layernorm.weight", TensorKind::attn_norm, l);
    rows_split(p + "self_attn.q_proj.weight", TensorKind::q_proj, l, qd, h);
    kv(p + "self_attn.k_proj.weight", TensorKind::k_proj, l);
    kv(p + "self_attn.v_proj.weight", TensorKind::v_proj, l);
    cols_split(p + "self_attn.o_proj.weight", TensorKind::o_proj, l, h, qd);
    replicated(p + "post_attention_layernorm.weight", TensorKind::mlp_norm, l);
    rows_split(p + "mlp.gate_proj.weight", TensorKind::gate_proj, l, f, h);
    rows_split(p + "mlp.up_proj.weight", TensorKind::up_proj, l, f, h);
    cols_split(p + "mlp.down_proj.weight", TensorKind::down_proj, l, h, f);
  }
  replicated("model.norm.weight", TensorKind::final_norm, -1);
  if (!c.tie_embeddings)
    add("lm_head.weight", TensorKind::lm_head, -1, v, h, false, vl, r * vl, h, 0);
  return t;
}

const ParamView& ParamTable::get(TensorKind kind, int layer) const {
  size_t i = 0;
  switch (kind) {
    case TensorKind::embed: i = 0; break;
    case TensorKind::final_norm: i = 1 + static_cast<size_t>(layers) * kTensorsPerLayer; break;
    case TensorKind::lm_head:
      FLEXSP_ASSERT(!tied);
      i = 2 + static_cast<size_t>(layers) * kTensorsPerLayer;
      break;
    default:
      FLEXSP_ASSERT(layer >= 0 && layer < layers);
      i = 1 + static_cast<size_t>(layer) * kTensorsPerLayer + static_cast<size_t>(kind);
  }
  FLEXSP_ASSERT(i < views.size() && views[i].kind == kind);
  return views[i];
}

const ParamView* ParamTable::find(const std::string& name) const {
  for (const ParamView& v : views)
    if (v.name == name) return &v;
  return nullptr;
}

int64_t ParamTable::layer_begin(int l) const { return get(TensorKind::attn_norm, l).offset; }

int64_t ParamTable::layer_end(int l) const {
  return l + 1 < layers ? layer_begin(l + 1) : get(TensorKind::final_norm).offset;
}

void init_params(const ModelConfig& c, const ParamTable& t, uint64_t seed, float* out,
                 int64_t begin, int64_t end) {
  FLEXSP_ASSERT(0 <= begin && begin <= end && end <= t.total);
  std::fill(out, out + (end - begin), 0.0f);
  const double resid_scale = 1.0 / std::sqrt(2.0 * c.layers);
  for (size_t i = 0; i < t.views.size(); ++i) {
    const ParamView& v = t.views[i];
    const int64_t lo = std::max(begin, v.offset), hi = std::min(end, v.offset + v.numel());
    if (lo >= hi) continue;
    float* dst = out + (lo - begin);
    if (v.is_1d) {
      std::fill(dst, dst + (hi - lo), 1.0f);
      continue;
    }
    double std = c.init_std;
    if (v.kind == TensorKind::o_proj || v.kind == TensorKind::down_proj) std *= resid_scale;
    const uint64_t key = mix64(mix64(seed + kGolden) ^ (static_cast<uint64_t>(i) * kGolden));
    const int64_t valid = v.valid_rows() * v.cols;  // the rest pads the vocabulary: 0
#pragma omp parallel for schedule(static) if (hi - lo > 65536)
    for (int64_t e = lo; e < hi; ++e) {
      const int64_t b = e - v.offset;
      dst[e - lo] = b < valid ? static_cast<float>(std * normal_at(key, v.full_index(b))) : 0.0f;
    }
  }
}

}  // namespace flexsp

#include "lib/train/pipeline_stage.h"

#include <algorithm>

#include "lib/model/cut_costs.h"
#include "lib/model/llama.h"
#include "lib/plan/pipeline_schedule.h"
#include "lib/util/error.h"

namespace flexsp {

PipelineStage pipeline_stage_create(int stage, int stages, const RunConfig& cfg,
                                    const ModelConfig& mc) {
  PipelineStage p;
  p.stages = stages;
  p.stage = stage;
  double first = 0, last = 0;
  pipeline_edge_costs(mc, &first, &last);
  p.layers = pipeline_layers(mc.layers, p.stages, pp_layers_parse(cfg.parallel.pp_layers), first, last);
  for (int s = 0; s < p.stage; ++s) p.first_layer += p.layers[static_cast<size_t>(s)];
  p.model = mc;
  p.model.layers = p.layers[static_cast<size_t>(p.stage)];
  return p;
}

namespace {

// The whole model's unit for stage unit u.
int full_unit(const PipelineStage& p, const ParamTable& stage, const ParamTable& full, int u) {
  if (u == 0) return 0;
  if (u == stage.layers + 1) return full.layers + 1;
  return u + p.first_layer;
}

bool owns(const PipelineStage& p, const ParamTable& stage, int u) {
  if (u == 0) return p.first();
  if (u == stage.layers + 1) return p.last();
  return true;
}

template <class F>
void each_unit(const PipelineStage& p, const ParamTable& stage, const ParamTable& full, F f) {
  for (int u = 0; u < param_units(stage); ++u) {
    const int v = full_unit(p, stage, full, u);
    const int64_t sb = param_unit_begin(stage, u), n = param_unit_end(stage, u) - sb;
    const int64_t fb = param_unit_begin(full, v);
    FLEXSP_ASSERT(n == param_unit_end(full, v) - fb);
    f(u, sb, fb, n);
  }
}

}  // namespace

void pipeline_from_full(const PipelineStage& p, const ParamTable& full, const float* src,
                        const ParamTable& stage, float* dst) {
  each_unit(p, stage, full, [&](int, int64_t sb, int64_t fb, int64_t n) {
    std::copy_n(src + fb, n, dst + sb);
  });
}

void pipeline_to_full(const PipelineStage& p, const ParamTable& stage, const float* src,
                      const ParamTable& full, float* dst) {
  each_unit(p, stage, full, [&](int u, int64_t sb, int64_t fb, int64_t n) {
    if (owns(p, stage, u)) std::copy_n(src + sb, n, dst + fb);
  });
}

namespace {

// f(full_first, full_last, offset of the part in data over s, offset in packed data) for
// every part of s inside an owned unit, in order.
template <class F>
void each_part(const PipelineStage& p, const ParamTable& stage, const ParamTable& full,
               const ShardRanges& s, F f) {
  int64_t concat = 0, packed = 0;
  for (const auto& [a, b] : s.ranges) {
    each_unit(p, stage, full, [&](int u, int64_t sb, int64_t fb, int64_t n) {
      const int64_t lo = std::max(a, sb), hi = std::min(b, sb + n);
      if (lo >= hi || !owns(p, stage, u)) return;
      f(fb + (lo - sb), fb + (hi - sb), concat + (lo - a), packed);
      packed += hi - lo;
    });
    concat += b - a;
  }
}

}  // namespace

ShardRanges pipeline_shards(const PipelineStage& p, const ParamTable& stage, const ParamTable& full,
                            const ShardRanges& s) {
  ShardRanges out;
  out.replica = s.replica;
  out.replicas = s.replicas;
  each_part(p, stage, full, s, [&](int64_t lo, int64_t hi, int64_t, int64_t) {
    out.ranges.emplace_back(lo, hi);
  });
  return out;
}

void pipeline_pack(const PipelineStage& p, const ParamTable& stage, const ParamTable& full,
                   const ShardRanges& s, const float* src, float* dst) {
  each_part(p, stage, full, s, [&](int64_t lo, int64_t hi, int64_t c, int64_t k) {
    std::copy_n(src + c, hi - lo, dst + k);
  });
}

void pipeline_unpack(const PipelineStage& p, const ParamTable& stage, const ParamTable& full,
                     const ShardRanges& s, const float* src, float* dst) {
  each_part(p, stage, full, s, [&](int64_t lo, int64_t hi, int64_t c, int64_t k) {
    std::copy_n(src + k, hi - lo, dst + c);
  });
}

void pipeline_tied_restore(const PipelineStage& p, const ParamTable& stage, Comm* tied, Comm& dp,
                           const ShardRanges& param, const ShardRanges& state, float* params,
                           float* m, float* v) {
  if (tied == nullptr) return;
  const int64_t E = param_unit_end(stage, 0);
  int64_t held_params = 0;  // the embedding's part of params: a prefix (ranges ascend)
  for (const auto& [a, b] : param.ranges) held_params += std::max<int64_t>(0, std::min(b, E) - a);
  tied->all_reduce(params, params, static_cast<size_t>(held_params), DType::f32, ReduceOp::sum);
  // The moments: the first stage's shards assembled over its data-parallel ranks (each
  // part counted once however many ranks hold it), then summed into the last stage's zeros.
  std::vector<float> em(static_cast<size_t>(E)), ev(em), held(em);
  auto each = [&](auto f) {
    int64_t c = 0;
    for (const auto& [a, b] : state.ranges) {
      for (int64_t i = a; i < std::min(b, E); ++i) f(i, c + (i - a));
      c += b - a;
    }
  };
  if (p.first()) {
    each([&](int64_t i, int64_t k) {
      em[i] = m[k];
      ev[i] = v[k];
      held[i] = 1;
    });
    for (std::vector<float>* x : {&em, &ev, &held})
      dp.all_reduce(x->data(), x->data(), x->size(), DType::f32, ReduceOp::sum);
    for (int64_t i = 0; i < E; ++i)
      if (held[i] > 1) em[i] /= held[i], ev[i] /= held[i];
  }
  for (std::vector<float>* x : {&em, &ev})
    tied->all_reduce(x->data(), x->data(), x->size(), DType::f32, ReduceOp::sum);
  if (p.last()) each([&](int64_t i, int64_t k) {
    m[k] = em[i];
    v[k] = ev[i];
  });
}

}  // namespace flexsp

#include "lib/model/tensor_parallel.h"

#include <algorithm>
#include <cstring>

#include "lib/util/error.h"

namespace flexsp {

void tp_check(const ModelConfig& c, int tp) {
  FLEXSP_CHECK(tp == 1 || tp == 2 || tp == 4 || tp == 8,
               "parallel.tp_size: must be 1, 2, 4 or 8, got {}", tp);
  FLEXSP_CHECK(c.heads % tp == 0,
               "parallel.tp_size: {} does not divide the model's {} attention heads", tp, c.heads);
  FLEXSP_CHECK(c.ffn % tp == 0, "parallel.tp_size: {} does not divide the model's FFN width {}",
               tp, c.ffn);
  FLEXSP_CHECK(c.kv_heads % tp == 0 || tp % c.kv_heads == 0,
               "parallel.tp_size: {} neither divides the model's {} kv heads nor is a multiple "
               "of them", tp, c.kv_heads);
}

ModelConfig tp_local_config(const ModelConfig& c, int tp) {
  ModelConfig l = c;
  l.heads = c.heads / tp;
  l.kv_heads = c.kv_heads % tp == 0 ? c.kv_heads / tp : 1;
  l.ffn = c.ffn / tp;
  l.vocab = (c.vocab + tp - 1) / tp;
  return l;
}

VocabShard tp_vocab_shard(const ModelConfig& c, int tp, int r) {
  VocabShard s;
  s.rows = (c.vocab + tp - 1) / tp;
  s.begin = r * s.rows;
  s.valid = std::clamp<int64_t>(c.vocab - s.begin, 0, s.rows);
  return s;
}

namespace {

// Calls f(block element e, full flat index) for every real element of every block view,
// row by row (a block row is contiguous in both buffers).
template <class F>
void for_rows(const ParamTable& full, const ParamTable& block, F&& f) {
  FLEXSP_ASSERT(full.views.size() == block.views.size());
  for (size_t i = 0; i < block.views.size(); ++i) {
    const ParamView& b = block.views[i];
    const ParamView& w = full.views[i];
    FLEXSP_ASSERT(b.kind == w.kind && b.layer == w.layer && w.whole());
    for (int64_t r = 0; r < b.valid_rows(); ++r)
      f(b.offset + r * b.cols, w.offset + b.full_index(r * b.cols), b.cols);
  }
}

}  // namespace

void tp_extract(const ParamTable& full, const float* src, const ParamTable& block, float* dst) {
  std::fill(dst, dst + block.total, 0.0f);
  for_rows(full, block, [&](int64_t be, int64_t fe, int64_t n) {
    std::memcpy(dst + be, src + fe, static_cast<size_t>(n) * sizeof(float));
  });
}

void tp_insert(const ParamTable& block, const float* src, const ParamTable& full, float* dst) {
  for_rows(full, block, [&](int64_t be, int64_t fe, int64_t n) {
    std::memcpy(dst + fe, src + be, static_cast<size_t>(n) * sizeof(float));
  });
}

std::vector<TpReplicated> tp_replicated_ranges(const ParamTable& block) {
  std::vector<TpReplicated> out;
  for (const ParamView& v : block.views)
    if (v.tp_replicas > 1) out.push_back({v.offset, v.offset + v.numel(), v.tp_replicas, v.tp_replica});
  return out;
}

}  // namespace flexsp

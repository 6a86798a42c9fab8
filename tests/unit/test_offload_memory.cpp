// The memory model against the allocator for one long sequence, with and without
// activation offload: the device's high-water mark with offload is at most the model's
// prediction + 10% and clearly below the run without, whose prediction holds too. The
// activation figure comes from the profile's own probe (measure_activation_bytes_per_token
// at two short lengths, without offload), as `flexsp profile` would write it.
//
// CI runs it at 4096 tokens of an 8-layer tiny model; bench/offload_memory.sh runs the
// 64K-token measurement through the same test with these variables:
//   FLEXSP_OFFLOAD_TOKENS, FLEXSP_OFFLOAD_LAYERS, FLEXSP_OFFLOAD_HIDDEN (heads = hidden / 16),
//   FLEXSP_OFFLOAD_AHEAD, FLEXSP_OFFLOAD_CKPT (1/0).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "lib/planner/cost/memory_model.h"
#include "lib/runtime/sequence_probe.h"
#include "test_model_common.h"

namespace flexsp::testing {
namespace {

int64_t env_or(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoll(v) : fallback;
}

// The allocator's peak growth over building and running one sequence of T tokens.
double held_bytes(Backend& be, const ModelConfig& c, ProbeWeights& w, int64_t T) {
  be.synchronize();
  const size_t before = be.allocated_bytes();
  be.reset_peak_allocated_bytes();
  {
    SequenceProbe p(be, c, T, nullptr);
    p.run(w);
    be.synchronize();
  }
  return static_cast<double>(be.peak_allocated_bytes() - before);
}

TEST(OffloadMemory, PredictionHoldsForOneLongSequence) {
  const int64_t T = env_or("FLEXSP_OFFLOAD_TOKENS", 4096);
  ModelConfig c = tiny_config(97, 2, false, env_or("FLEXSP_OFFLOAD_CKPT", 1) != 0);
  c.layers = static_cast<int>(env_or("FLEXSP_OFFLOAD_LAYERS", 8));
  c.hidden = static_cast<int>(env_or("FLEXSP_OFFLOAD_HIDDEN", 64));
  c.heads = c.hidden / 16;
  c.kv_heads = c.heads % 2 == 0 ? c.heads / 2 : c.heads;
  c.head_dim = 16;
  c.ffn = 3 * c.hidden;
  c.offload_ahead = static_cast<int>(env_or("FLEXSP_OFFLOAD_AHEAD", 2));
  auto be = make_cpu_backend();
  ProbeWeights w(*be, c);
  // The profile's figure: the slope between two short lengths, without offload.
  CostModel cm;
  cm.model_hidden = c.hidden;
  cm.model_layers = c.layers;
  cm.bytes_per_element = static_cast<double>(be->act_size());
  const double slope = measure_activation_bytes_per_token(*be, c, nullptr, 256, 512);
  (c.checkpoint_activations ? cm.activation_mb_per_token_ckpt : cm.activation_mb_per_token) = slope / 1e6;
  auto predicted = [&](const ModelConfig& m) {
    return memory_estimate(cm, m, MemoryLayout{1, 1, ZeroLayout{0, 1, 1, 1}}).activation_per_token *
           static_cast<double>(T);
  };
  ModelConfig off = c, on = c;
  off.offload = false;
  on.offload = true;
  const double held_off = held_bytes(*be, off, w, T), held_on = held_bytes(*be, on, w, T);
  const double pred_off = predicted(off), pred_on = predicted(on);
  std::printf("one sequence of %lld tokens, %d layers, hidden %d, checkpointing %s, offload_ahead %d:\n"
              "  without offload: measured %.2f MB, predicted %.2f MB (%+.1f%%)\n"
              "  with offload:    measured %.2f MB, predicted %.2f MB (%+.1f%%); %.2fx below the run without\n",
              static_cast<long long>(T), c.layers, c.hidden, c.checkpoint_activations ? "on" : "off",
              c.offload_ahead, held_off / 1e6, pred_off / 1e6, 100 * (held_off / pred_off - 1), held_on / 1e6,
              pred_on / 1e6, 100 * (held_on / pred_on - 1), held_off / held_on);
  EXPECT_LE(held_off, 1.10 * pred_off);
  EXPECT_LE(held_on, 1.10 * pred_on);
  EXPECT_GE(held_on, 0.80 * pred_on);  // the prediction is not merely loose
  if (LayerOffload::useful(c.layers, c.offload_ahead)) {
    EXPECT_LT(held_on, 0.95 * held_off);
  }
}

}  // namespace
}  // namespace flexsp::testing

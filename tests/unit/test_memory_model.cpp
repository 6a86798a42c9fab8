// The memory model's arithmetic (lib/planner/memory_model.h) on the 7B shape: which
// buffers each ZeRO stage keeps whole and which it shards, tp's block, checkpointing's
// activations, the tokens a rank can hold, and the refusal line. Its agreement with the
// CPU allocator is tests/mpi/test_memory_model.cpp.
#include <gtest/gtest.h>

#include "lib/model/model_config.h"
#include "lib/model/params.h"
#include "lib/planner/memory_model.h"

namespace flexsp {
namespace {

ModelConfig preset7b(bool ckpt = false) {
  ModelSection s;
  s.preset = "7b";
  s.checkpoint_activations = ckpt;
  return resolve_model_config(s, {"model.checkpoint_activations"}, 32000);
}

TEST(MemoryModel, StagesShardWhatTheRuntimeShards) {
  CostModel cm = cost_model_default();
  cm.param_bytes = 4, cm.grad_bytes = 4, cm.optim_bytes = 8;  // the runtime's fp32 buffers
  const ModelConfig m = preset7b();
  const double P = static_cast<double>(make_param_table(m).total);
  const MemoryEstimate s0 = memory_estimate(cm, m, {1, 64, {0, 1, 1, 1}});
  EXPECT_DOUBLE_EQ(s0.params + s0.grads + s0.optim, 16 * P);
  EXPECT_DOUBLE_EQ(s0.buffers, 0);
  const MemoryEstimate s1 = memory_estimate(cm, m, {1, 64, {1, 64, 64, 64}});
  EXPECT_NEAR(s1.params + s1.grads, 8 * P, 8 * 64);
  EXPECT_NEAR(s1.optim, 8 * P / 64, 8);
  EXPECT_NEAR(s1.buffers, 4 * P / 64, 4);  // the collective scratch block
  // Stage 2 keeps the full gradient buffer in this runtime: the same memory as stage 1.
  const MemoryEstimate s2 = memory_estimate(cm, m, {1, 64, {2, 64, 64, 64}});
  EXPECT_DOUBLE_EQ(s2.fixed(), s1.fixed());
  const MemoryEstimate s3 = memory_estimate(cm, m, {1, 64, {3, 64, 64, 64}});
  EXPECT_NEAR(s3.params + s3.grads + s3.optim, 16 * P / 64, 16 * 64 * 40);
  // Four slots of the largest unit (a layer: 4 h^2 + 3 h ffn + 2 h parameters), fp32.
  const double layer = 4.0 * 4096 * 4096 + 3.0 * 4096 * 11008 + 2 * 4096;
  EXPECT_GT(s3.buffers, 4 * 4 * layer);
  EXPECT_LT(s3.buffers, 4 * 4 * layer * 1.05);
  // Node parameter groups: params over the node's 8, gradients and optimizer over 64.
  const MemoryEstimate n3 = memory_estimate(cm, m, {1, 64, {3, 8, 64, 64}});
  EXPECT_NEAR(n3.params / s3.params, 8, 0.01);
  EXPECT_DOUBLE_EQ(n3.grads, s3.grads);
  // tp = 2 halves (about) every state and the activations per token.
  const MemoryEstimate t3 = memory_estimate(cm, m, {2, 32, {3, 32, 32, 32}});
  EXPECT_NEAR(t3.params / s3.params, 1.0, 0.02);  // P / 2 over 32 = P over 64
  EXPECT_DOUBLE_EQ(t3.activation_per_token, s3.activation_per_token / 2);
}

TEST(MemoryModel, CheckpointingTokensAndTheRefusalLine) {
  const CostModel cm = cost_model_default();
  const MemoryEstimate off = memory_estimate(cm, preset7b(false), {1, 64, {3, 64, 64, 64}});
  const MemoryEstimate on = memory_estimate(cm, preset7b(true), {1, 64, {3, 64, 64, 64}});
  EXPECT_DOUBLE_EQ(off.activation_per_token, 4.48e6);
  EXPECT_DOUBLE_EQ(on.activation_per_token, 0.40e6);
  const int64_t E = memory_tokens_per_rank(off, cm, 80);
  EXPECT_LE(off.total(E), 80e9);
  EXPECT_GT(off.total(E + 1), 80e9);
  EXPECT_EQ(memory_tokens_per_rank(off, cm, off.fixed() / 1e9), 0);
  const std::string line = memory_describe(off, cm, 20000, 80);
  EXPECT_NE(line.find("20000 tokens"), std::string::npos) << line;
  EXPECT_NE(line.find("planner.mem_per_gpu_gb"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
}

}  // namespace
}  // namespace flexsp

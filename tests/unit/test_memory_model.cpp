// The memory model's arithmetic (lib/planner/cost/memory_model.h) on the 7B shape: which
// buffers each ZeRO stage keeps whole and which it shards, tp's block, checkpointing's
// activations, the tokens a rank can hold, and the refusal line. Its agreement with the
// CPU allocator is tests/mpi/test_memory_model.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "lib/model/model_config.h"
#include "lib/model/params.h"
#include "lib/planner/cost/memory_model.h"
#include "lib/plan/pipeline_schedule.h"
#include "lib/model/cut_costs.h"
#include "lib/plan/seq_chunk_cuts.h"
#include "lib/runtime/seq_chunks.h"

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

// Seq1F1B's first stage as the runtime runs it: the schedule's units in flight and the
// largest chunk of the equal-causal-cost cut; checked against the activation bytes
// measured per stage in bench/results/2026-11-25-pipeline.md (model small with 8 layers,
// 1024-token pieces, fp32): stage 0 held 2.88 (pp 4 x 2), 2.08 (pp 4 x 4), 1.82 (pp 2 x 2)
// and 1.55 (pp 2 x 4) times a 1F1B micro-batch slot. The model must not be below them.
// Token chunks: a device's first C tokens cost what they cost without chunks, each one
// after them its checkpoints and keys only (less with the local attention, whose q stays a
// chunk's, than where another attention op runs); the tokens a rank holds invert total().
TEST(MemoryModel, TokenChunksSaveTheTemporariesPastTheChunk) {
  const CostModel cm = cost_model_default();
  ModelConfig m = preset7b(true);
  const MemoryEstimate whole = memory_estimate(cm, m, {1, 8, {3, 8, 8, 8}});
  m.token_chunk = 8192;
  const MemoryEstimate local = memory_estimate(cm, m, {1, 8, {3, 8, 8, 8}});
  MemoryExtras sp;
  sp.whole_q = true;
  const MemoryEstimate other = memory_estimate(cm, m, {1, 8, {3, 8, 8, 8}}, sp);
  const double b = cm.bytes_per_element;
  EXPECT_DOUBLE_EQ(local.chunk_saving_per_token,
                   b * (3.0 * m.hidden + 5.0 * m.ffn + 4.0 * m.q_dim() + m.vocab) + 8);
  EXPECT_DOUBLE_EQ(local.chunk_saving_per_token - other.chunk_saving_per_token, b * 4.0 * m.q_dim());
  EXPECT_DOUBLE_EQ(local.activations(8192), whole.activations(8192));
  EXPECT_LT(local.activations(131072), 0.5 * whole.activations(131072));
  EXPECT_LT(local.activations(131072), other.activations(131072));
  EXPECT_GT(local.buffers, whole.buffers);  // the chunk attention's
  for (const double gb : {40.0, 80.0, 141.0}) {
    const int64_t n = memory_tokens_per_rank(local, cm, gb), w = memory_tokens_per_rank(whole, cm, gb);
    const double avail = (gb - cm.reserve_gb) * 1e9;
    EXPECT_LE(local.total(n), avail) << gb;
    EXPECT_GT(local.total(n + 1), avail) << gb;
    EXPECT_GT(n, 2 * w) << gb;
  }
}

TEST(MemoryModel, Seq1F1BInFlightFollowsTheRuntime) {
  for (int pp : {2, 4, 8})
    for (int k : {1, 2, 4}) {
      const PipelineLayout p{pp, k == 1 ? PpSchedule::one_f_one_b : PpSchedule::seq1f1b, k, 0};
      EXPECT_EQ(pp_slots(p), pipeline_in_flight(pp, 0, 16, k)) << pp << " x " << k;
      EXPECT_EQ(pp_slots(p), pp + k - 1);
    }
  ModelSection ms;
  ms.preset = "small";
  ms.layers = 8;
  const ModelConfig m = resolve_model_config(ms, {"model.layers"}, 257);
  double lin = 0, att = 0;
  seq_chunk_costs(m, &lin, &att);
  const PipelineLayout two{4, PpSchedule::seq1f1b, 2, 0}, four{4, PpSchedule::seq1f1b, 4, 0};
  // The first chunk is the largest; its share grows with the length, to 1/sqrt(chunks).
  EXPECT_DOUBLE_EQ(pp_chunk_share(two, m, 1024), seq_chunk_bounds(1024, 2, lin, att)[1] / 1024.0);
  EXPECT_GT(pp_chunk_share(two, m, 1024), 0.55);
  EXPECT_LT(pp_chunk_share(two, m, 64), pp_chunk_share(two, m, 1024));
  EXPECT_NEAR(pp_chunk_share(two, m, 0), 1 / std::sqrt(2.0), 1e-12);
  EXPECT_GT(pp_chunk_share(two, m, int64_t{1} << 30), 0.7);
  EXPECT_DOUBLE_EQ(pp_chunk_share({4, PpSchedule::one_f_one_b, 1, 0}, m, 1024), 1);
  // A mixed micro-batch: every chunk of the cut holds at most share(longest) of its tokens.
  HostMicroBatch mb;
  mb.cu_seqlens = {0};
  for (int64_t n : {1024, 700, 90, 3, 512}) {
    for (int64_t i = 0; i < n; ++i) mb.ids.push_back(1), mb.positions.push_back(int32_t(i)), mb.targets.push_back(1);
    mb.cu_seqlens.push_back(static_cast<int32_t>(mb.ids.size()));
  }
  std::vector<HostMicroBatch> chunks;
  seq_chunks_cut(mb, 4, lin, att, chunks);
  for (const HostMicroBatch& c : chunks)
    EXPECT_LE(static_cast<double>(c.ids.size()), pp_chunk_share(four, m, 1024) * mb.ids.size() + 5);

  // Against the bench: a cost model whose activations are one 1F1B slot per token of the
  // stage's layers, fp32; the ratio of stage 0 to that slot.
  struct Row {
    int pp, chunks;
    double measured;
  };
  for (const Row& r : {Row{4, 2, 260.7 / 90.4}, Row{4, 4, 187.9 / 90.4}, Row{2, 2, 264.1 / 145.1},
                       Row{2, 4, 224.7 / 145.1}}) {
    CostModel cm;
    cm.bytes_per_element = 4;
    cm.model_hidden = m.hidden, cm.model_layers = m.layers / r.pp;
    cm.activation_mb_per_token = (r.pp == 4 ? 90.4 : 145.1) / 2048;
    const PipelineLayout p{r.pp, PpSchedule::seq1f1b, r.chunks, 0};
    const MemoryEstimate e = memory_estimate(cm, m, {1, 1, {0, 1, 1, 1}}, {p, 0, 1025, 0});
    const double ratio = e.activation_per_token / (cm.activation_mb_per_token * 1e6);
    EXPECT_GE(ratio, r.measured) << r.pp << " x " << r.chunks;
    EXPECT_LE(ratio, 1.25 * r.measured) << r.pp << " x " << r.chunks;
  }
}

}  // namespace
}  // namespace flexsp

// Token-chunked layers (lib/model/chunked_layer.h) against the whole-batch model on random
// inputs, fp32: loss and every gradient equal to rounding for chunk sizes that divide the
// tokens and that do not, with sequences that cross chunk boundaries, through the local
// attention (query chunks against key blocks, log-sum-exp merged) and through another
// AttentionOp (whole q, k, v); bf16 to its tolerance; bit-identical when the chunk covers
// the micro-batch; the settings that cannot run are refused naming the key; and the
// workspace shrinks.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "lib/model/chunked_layer.h"
#include "lib/util/error.h"
#include "test_model_common.h"

namespace flexsp {
namespace {

using testing::ModelFixture;
using testing::pack;
using testing::PackedBatch;
using testing::random_tokens;
using testing::Rng;
using testing::tiny_config;

// The local attention behind the AttentionOp interface: the model cannot tell it from
// Ulysses, so it runs the chunked layer's whole-q path.
class OpaqueAttention final : public AttentionOp {
 public:
  OpaqueAttention(Backend& be, const ModelConfig& c, const PackedBatch& b)
      : inner_(be, c, static_cast<int64_t>(b.ids.size())) {
    inner_.set_layout(b.cu.data(), static_cast<int>(b.cu.size()) - 1, static_cast<int64_t>(b.ids.size()));
  }
  void forward(int l, const act_t* q, const act_t* k, const act_t* v, act_t* out) override {
    inner_.forward(l, q, k, v, out);
  }
  void backward(int l, const act_t* dout, const act_t* q, const act_t* k, const act_t* v,
                const act_t* out, act_t* dq, act_t* dk, act_t* dv) override {
    inner_.backward(l, dout, q, k, v, out, dq, dk, dv);
  }

 private:
  LocalAttention inner_;
};

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

Result run(ModelConfig c, int64_t chunk, const PackedBatch& b, int64_t max_tokens, bool opaque = false,
           DType act = DType::f32) {
  c.token_chunk = chunk;
  ModelFixture f(c, max_tokens, 7, make_cpu_backend(act));
  std::unique_ptr<OpaqueAttention> op;
  if (opaque) op = std::make_unique<OpaqueAttention>(*f.be, f.model->local_config(), b);
  const int64_t T = static_cast<int64_t>(b.ids.size());
  f.be->zero(f.grads.get(), f.grads.bytes());
  Result r;
  r.loss = f.model->forward(f.params.get(), b.mb(), op.get()).loss_sum;
  f.model->backward(f.params.get(), f.grads.get(), 1.0 / static_cast<double>(T));
  r.grads = f.grad_vec();
  return r;
}

// Sequences of 1 to 150 tokens (430 in all): every chunk size below crosses some of them.
PackedBatch batch(const ModelConfig& c) {
  Rng r(5);
  std::vector<std::vector<int32_t>> seqs;
  for (int n : {37, 150, 1, 55, 2, 120, 65}) seqs.push_back(random_tokens(r, n, c.vocab));
  return pack(seqs);
}

void expect_close(const Result& a, const Result& b, const char* what) {
  EXPECT_NEAR(a.loss, b.loss, 1e-5 * std::fabs(b.loss)) << what;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  double gmax = 0, worst = 0;
  for (float g : b.grads) gmax = std::max(gmax, static_cast<double>(std::fabs(g)));
  for (size_t i = 0; i < a.grads.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(a.grads[i]) - b.grads[i]));
  // fp32 sums taken in another order: a few ulps of the largest gradient.
  EXPECT_LT(worst, 2e-5 * gmax) << what << ": largest gradient " << gmax;
  EXPECT_GT(worst, 0) << what << ": chunks that change nothing test nothing";
}

TEST(TokenChunk, EqualsWholeBatchWithinRounding) {
  for (const bool tie : {false, true}) {
    ModelConfig c = tiny_config(97, 2, tie, /*checkpoint=*/true);
    c.init_std = 0.25;  // attention far from uniform
    const PackedBatch b = batch(c);
    const Result whole = run(c, 0, b, 512);
    for (const int64_t chunk : {3, 64, 100, 429}) {
      const std::string what = "chunk " + std::to_string(chunk) + (tie ? ", tied" : "");
      expect_close(run(c, chunk, b, 512), whole, what.c_str());
      if (chunk == 100) expect_close(run(c, chunk, b, 512, /*opaque=*/true), whole, (what + ", another op").c_str());
    }
  }
}

TEST(TokenChunk, OneLongSequenceOverManyKeyBlocks) {
  ModelConfig c = tiny_config(97, 1, false, true);
  c.init_std = 0.25;
  Rng r(9);
  const PackedBatch b = pack({random_tokens(r, 301, c.vocab)});
  const Result whole = run(c, 0, b, 301);
  for (const int64_t chunk : {7, 32, 300}) expect_close(run(c, chunk, b, 301), whole, "one sequence");
}

// bf16 activations (the CPU's emulation): the chunked layer's casts and merges round like
// the whole batch's, to bf16 tolerance.
TEST(TokenChunk, Bf16WithinBf16Rounding) {
  ModelConfig c = tiny_config(97, 2, false, true);
  c.init_std = 0.25;
  const PackedBatch b = batch(c);
  const Result whole = run(c, 0, b, 512, false, DType::bf16);
  const Result chunked = run(c, 64, b, 512, false, DType::bf16);
  EXPECT_NEAR(chunked.loss, whole.loss, 1e-2 * std::fabs(whole.loss));
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < whole.grads.size(); ++i) {
    dot += static_cast<double>(chunked.grads[i]) * whole.grads[i];
    na += static_cast<double>(chunked.grads[i]) * chunked.grads[i];
    nb += static_cast<double>(whole.grads[i]) * whole.grads[i];
  }
  EXPECT_GT(dot / std::sqrt(na * nb), 0.999) << "gradient directions differ";
  std::printf("bf16: loss %.7g vs %.7g, gradient cosine %.6f, norm ratio %.5f\n", chunked.loss, whole.loss,
              dot / std::sqrt(na * nb), std::sqrt(na / nb));
  EXPECT_NEAR(std::sqrt(na / nb), 1.0, 1e-2);
}

TEST(TokenChunk, ChunkCoveringTheBatchIsBitIdentical) {
  const ModelConfig c = tiny_config(97, 2, false, true);
  const PackedBatch b = batch(c);
  const Result whole = run(c, 0, b, 512);
  for (const int64_t chunk : {430, 431, 512, 4096}) {
    const Result r = run(c, chunk, b, 512);
    EXPECT_EQ(std::memcmp(&r.loss, &whole.loss, sizeof(double)), 0) << chunk;
    ASSERT_EQ(r.grads.size(), whole.grads.size());
    EXPECT_EQ(std::memcmp(r.grads.data(), whole.grads.data(), r.grads.size() * sizeof(float)), 0) << chunk;
  }
}

TEST(TokenChunk, RefusesWhatCannotRun) {
  ModelConfig c = tiny_config(97, 2, false, true);
  auto refused = [](const ModelConfig& m, int tp, const char* why) {
    try {
      chunk_check(m, tp);
    } catch (const Error& e) {
      const std::string s = e.what();
      EXPECT_NE(s.find("train.token_chunk"), std::string::npos) << s;
      EXPECT_NE(s.find(why), std::string::npos) << s;
      return;
    }
    ADD_FAILURE() << "accepted: " << why;
  };
  c.token_chunk = -1;
  refused(c, 1, ">= 0");
  c.token_chunk = 64;
  EXPECT_NO_THROW(chunk_check(c, 1));
  refused(c, 2, "tensor parallelism");
  c.checkpoint_activations = false;
  refused(c, 1, "model.checkpoint_activations");
}

TEST(TokenChunk, WorkspaceGrowsWithTheChunk) {
  const ModelConfig c = tiny_config(97, 2, false, true);
  auto bytes = [&](int64_t chunk) {
    ModelConfig m = c;
    m.token_chunk = chunk;
    auto be = make_cpu_backend();
    return Llama(*be, m, 8192).workspace_bytes();
  };
  const size_t whole = bytes(0), small = bytes(256);
  EXPECT_LT(small, whole / 2) << whole;
  EXPECT_LT(bytes(128), small);
}

}  // namespace
}  // namespace flexsp

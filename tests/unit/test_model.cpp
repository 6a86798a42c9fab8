// The model as a whole on the CPU backend: gradients against finite differences for every
// tensor kind (tied and untied), no leakage between packed sequences, activation
// checkpointing changes nothing, gradient accumulation, determinism, and a 32K-token
// sequence in linear memory.
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>

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

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Fourth-order central differences of the fp32 loss sum, for the largest-gradient and a few
// random elements of every tensor. init_std is raised so attention is far from uniform and
// every gradient is well above fp32 noise.
void check_model_gradients(bool tie) {
  ModelConfig c = tiny_config(97, 2, tie);
  c.init_std = 0.25;
  Rng r(10 + tie);
  PackedBatch b = pack({random_tokens(r, 9, c.vocab), random_tokens(r, 1, c.vocab),
                        random_tokens(r, 20, c.vocab), random_tokens(r, 70, c.vocab)});
  ModelFixture f(c, 128, 3);
  f.loss_and_grad(b);
  const std::vector<float> g = f.grad_vec();
  float* w = f.params.get();
  double worst = 0;
  for (const ParamView& v : f.table().views) {
    std::vector<int64_t> idx(v.numel());
    for (int64_t i = 0; i < v.numel(); ++i) idx[i] = v.offset + i;
    std::partial_sort(idx.begin(), idx.begin() + 3, idx.end(),
                      [&](int64_t a, int64_t bb) { return std::fabs(g[a]) > std::fabs(g[bb]); });
    idx.resize(3);
    for (int k = 0; k < 3; ++k) idx.push_back(v.offset + r.below(static_cast<int>(v.numel())));
    const double gmax = std::fabs(g[idx[0]]);
    for (int64_t i : idx) {
      const float w0 = w[i];
      const float h = 1e-2f;
      auto at = [&](float d) {
        w[i] = w0 + d;
        return f.loss(b);
      };
      const double fd = (-at(2 * h) + 8 * at(h) - 8 * at(-h) + at(-2 * h)) / (12.0 * h);
      w[i] = w0;
      const double err = std::fabs(fd - g[i]) / gmax;
      worst = std::max(worst, err);
      EXPECT_LT(err, 2e-3) << v.name << " element " << i - v.offset << ": fd " << fd
                           << " analytic " << g[i] << " (largest in tensor " << gmax << ")";
    }
  }
  std::printf("finite differences (%s): worst error %.2e of the tensor's largest gradient\n",
              tie ? "tied" : "untied", worst);
}

TEST(Model, GradientsMatchFiniteDifferences) { check_model_gradients(false); }
TEST(Model, TiedGradientsMatchFiniteDifferences) { check_model_gradients(true); }

// A sequence packed between two others (whose targets are dropped) gives the same loss,
// logits and gradients as alone, and changing the other sequences changes nothing.
TEST(Model, PackedSequencesDoNotInteract) {
  const ModelConfig c = tiny_config(97, 2);
  Rng r(20);
  const auto A = random_tokens(r, 70, c.vocab), B = random_tokens(r, 30, c.vocab),
             C = random_tokens(r, 5, c.vocab);
  ModelFixture f(c, 128, 5);
  PackedBatch alone = pack({A});
  PackedBatch packed = pack({B, A, C});
  for (int t = 0; t < 30; ++t) packed.tgt[t] = -1;
  for (int t = 100; t < 105; ++t) packed.tgt[t] = -1;

  std::vector<float> la(70 * c.vocab), lp(105 * c.vocab);
  f.be->zero(f.grads.get(), f.grads.bytes());
  const auto ra = f.model->forward(f.params.get(), alone.mb(), nullptr, la.data());
  f.model->backward(f.params.get(), f.grads.get(), 1.0);
  const auto ga = f.grad_vec();
  f.be->zero(f.grads.get(), f.grads.bytes());
  const auto rp = f.model->forward(f.params.get(), packed.mb(), nullptr, lp.data());
  f.model->backward(f.params.get(), f.grads.get(), 1.0);
  const auto gp = f.grad_vec();

  EXPECT_EQ(ra.predictions, 69);
  EXPECT_EQ(rp.predictions, 69);
  EXPECT_NEAR(rp.loss_sum, ra.loss_sum, 1e-6 * ra.loss_sum);
  const std::vector<float> lpa(lp.begin() + 30 * c.vocab, lp.begin() + 100 * c.vocab);
  EXPECT_LE(max_diff(lpa, la), 1e-6 * max_abs(la));
  EXPECT_LE(max_diff(gp, ga), 1e-5 * max_abs(ga));

  // Other sequences' tokens do not reach A.
  for (auto& t : packed.ids) t = (t + 1) % c.vocab;
  for (int t = 30; t < 100; ++t) packed.ids[t] = A[t - 30];
  std::vector<float> lp2(105 * c.vocab);
  const auto rp2 = f.model->forward(f.params.get(), packed.mb(), nullptr, lp2.data());
  EXPECT_EQ(rp2.loss_sum, rp.loss_sum);
  for (int64_t i = 30 * c.vocab; i < 100 * c.vocab; ++i) ASSERT_EQ(lp2[i], lp[i]) << i;
}

// Checkpointing recomputes the same operations on the same inputs: bit-identical results.
TEST(Model, ActivationCheckpointingChangesNothing) {
  for (bool tie : {false, true}) {
    Rng r(30);
    const PackedBatch b = pack({random_tokens(r, 65, 97), random_tokens(r, 3, 97),
                                random_tokens(r, 130, 97)});
    ModelFixture plain(tiny_config(97, 2, tie, false), 256, 7);
    ModelFixture ckpt(tiny_config(97, 2, tie, true), 256, 7);
    EXPECT_LT(ckpt.model->workspace_bytes(), plain.model->workspace_bytes());
    const double l1 = plain.loss_and_grad(b, 0.01), l2 = ckpt.loss_and_grad(b, 0.01);
    EXPECT_EQ(l1, l2);
    EXPECT_EQ(plain.grad_vec(), ckpt.grad_vec());
  }
}

// backward accumulates: two micro-batches give the sum of their gradients; a repeated run
// is bit-identical.
TEST(Model, GradientsAccumulateOverMicroBatchesDeterministically) {
  const ModelConfig c = tiny_config(97, 1);
  Rng r(40);
  const PackedBatch b1 = pack({random_tokens(r, 40, c.vocab), random_tokens(r, 7, c.vocab)});
  const PackedBatch b2 = pack({random_tokens(r, 90, c.vocab)});
  ModelFixture f(c, 128, 9);
  f.loss_and_grad(b1, 0.5);
  const auto g1 = f.grad_vec();
  f.loss_and_grad(b2, 0.5);
  const auto g2 = f.grad_vec();
  f.loss_and_grad(b1, 0.5);
  EXPECT_EQ(f.grad_vec(), g1);  // deterministic
  f.model->forward(f.params.get(), b2.mb());
  f.model->backward(f.params.get(), f.grads.get(), 0.5);  // accumulate onto g1
  const auto acc = f.grad_vec();
  std::vector<float> sum(g1.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = g1[i] + g2[i];
  EXPECT_LE(max_diff(acc, sum), 1e-6 * max_abs(sum));
}

TEST(Model, RejectsOutOfRangeTokensAndOversizedBatches) {
  ModelFixture f(tiny_config(97, 2), 16);
  PackedBatch b = pack({{1, 2, 3}});
  b.ids[1] = 97;
  try {
    f.model->forward(f.params.get(), b.mb());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
  Rng r(1);
  EXPECT_THROW(f.model->forward(f.params.get(), pack({random_tokens(r, 17, 97)}).mb()), Error);
}

// Attention memory is linear in tokens: a 32K-token sequence trains in well under 1 GB.
TEST(Model, LongSequenceInLinearMemory) {
  const int T = 32768;
  const ModelConfig c = tiny_config(300, 2, false, false);
  Rng r(50);
  const PackedBatch b = pack({random_tokens(r, T, c.vocab)});
  ModelFixture f(c, T, 11);
  const auto t0 = std::chrono::steady_clock::now();
  const double loss = f.loss_and_grad(b, 1.0 / (T - 1)) / (T - 1);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double rss_mb = ru.ru_maxrss / 1024.0;
  std::printf("32K tokens: loss %.4f, %.1f s, workspace %.0f MB, peak RSS %.0f MB\n", loss, secs,
              f.model->workspace_bytes() / 1e6, rss_mb);
  EXPECT_NEAR(loss, std::log(300.0), 0.5);
  EXPECT_TRUE(std::isfinite(max_abs(f.grad_vec())));
#if !defined(__SANITIZE_ADDRESS__)  // AddressSanitizer's shadow memory and redzones add to it
  EXPECT_LT(rss_mb, 1024.0);
#endif
}

}  // namespace
}  // namespace flexsp

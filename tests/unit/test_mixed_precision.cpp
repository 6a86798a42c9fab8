// Mixed precision on the CPU backend: bf16 rounding on the host, the bf16
// emulation of every backend op, and the model in bf16 against the model in fp32.
//
// The emulation's contract (lib/backend/backend.h) is "compute in fp32 from the bf16
// inputs, round each output once", so each op in bf16 mode must equal, bit for bit, the
// fp32 op run on the same (bf16-representable) inputs with its outputs rounded. That pins
// down the plumbing (which arguments are activations, which outputs accumulate) that the
// CUDA bf16 kernels are later compared against within bf16 tolerance.
#include <cmath>
#include <limits>

#include "lib/platform/backend_factory.h"
#include "lib/util/dtype.h"
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

TEST(Bf16Host, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f), 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(round_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);  // above half: up
  EXPECT_TRUE(std::isinf(round_bf16(std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(round_bf16(std::numeric_limits<float>::max()),  // beyond bf16's largest: overflows
            std::numeric_limits<float>::infinity());
  for (float x : {0.1f, -7.77f, 1e-30f, 12345.678f})
    EXPECT_LE(std::fabs(round_bf16(x) - x), std::fabs(x) * 0x1p-8f) << x;
}

// One activation array on both backends: fp32 values that bf16 represents exactly.
struct Act {
  std::vector<float> f;      // the fp32 backend's buffer (host memory)
  std::vector<uint16_t> h;   // the bf16 backend's buffer
};

Act act(Rng& r, size_t n, double lo = -1, double hi = 1) {
  Act a{std::vector<float>(n), std::vector<uint16_t>(n)};
  for (size_t i = 0; i < n; ++i) {
    a.h[i] = float_to_bf16(static_cast<float>(r.uniform(lo, hi)));
    a.f[i] = bf16_to_float(a.h[i]);
  }
  return a;
}

// The bf16 result must be the fp32 result rounded, bit for bit.
void expect_rounded(const Act& a, const char* what) {
  size_t bad = 0;
  for (size_t i = 0; i < a.f.size(); ++i)
    if (float_to_bf16(a.f[i]) != a.h[i] && ++bad <= 3)
      ADD_FAILURE() << what << "[" << i << "]: fp32 " << a.f[i] << " rounds to "
                    << bf16_to_float(float_to_bf16(a.f[i])) << ", bf16 mode gave "
                    << bf16_to_float(a.h[i]);
  EXPECT_EQ(bad, 0u) << what;
}

struct Backends {
  std::unique_ptr<Backend> f = make_cpu_backend(DType::f32), h = make_cpu_backend(DType::bf16);
};

TEST(CpuBf16, ReportsItsPrecision) {
  Backends b;
  EXPECT_EQ(b.f->act_dtype(), DType::f32);
  EXPECT_EQ(b.h->act_dtype(), DType::bf16);
  EXPECT_EQ(b.h->act_size(), 2u);
  EXPECT_EQ(make_backend({BackendKind::cpu, Precision::automatic})->act_dtype(), DType::f32);
  EXPECT_EQ(make_backend({BackendKind::cpu, Precision::bf16})->act_dtype(), DType::bf16);
}

TEST(CpuBf16, CastAndAxpy) {
  Backends b;
  Rng r(1);
  std::vector<float> x(1000);
  for (auto& v : x) v = static_cast<float>(r.uniform(-3, 3));
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  b.h->cast(h.data(), DType::bf16, x.data(), DType::f32, static_cast<int64_t>(x.size()));
  b.h->cast(back.data(), DType::f32, h.data(), DType::bf16, static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(back[i], round_bf16(x[i]));
  EXPECT_THROW(b.h->cast(x.data(), DType::bf16, x.data(), DType::f32, 4), Error);
  Act y = act(r, 1000), z = act(r, 1000);
  b.f->axpy_act(y.f.data(), z.f.data(), 1000, 0.3f);
  b.h->axpy_act(y.h.data(), z.h.data(), 1000, 0.3f);
  expect_rounded(y, "axpy_act");
}

TEST(CpuBf16, GemmActEveryLayout) {
  Backends b;
  Rng r(2);
  const int64_t m = 37, n = 29, k = 53;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (float beta : {0.0f, 1.0f}) {
        Act a = act(r, m * k), bb = act(r, k * n);
        const int64_t lda = ta ? m : k, ldb = tb ? k : n;
        // C in bf16 (forward, input gradients).
        Act c = act(r, m * n);
        b.f->gemm_act(ta, tb, m, n, k, 0.7f, a.f.data(), lda, bb.f.data(), ldb, beta,
                      c.f.data(), DType::f32, n);
        b.h->gemm_act(ta, tb, m, n, k, 0.7f, a.h.data(), lda, bb.h.data(), ldb, beta,
                      c.h.data(), DType::bf16, n);
        expect_rounded(c, "gemm_act, C bf16");
        // C in fp32 (weight gradients): the same product, unrounded.
        std::vector<float> c32(m * n, 0.5f), c32h(m * n, 0.5f);
        b.f->gemm_act(ta, tb, m, n, k, 1.0f, a.f.data(), lda, bb.f.data(), ldb, beta,
                      c32.data(), DType::f32, n);
        b.h->gemm_act(ta, tb, m, n, k, 1.0f, a.h.data(), lda, bb.h.data(), ldb, beta,
                      c32h.data(), DType::f32, n);
        EXPECT_EQ(c32, c32h);
      }
  std::vector<float> c(4);
  EXPECT_THROW(b.f->gemm_act(false, false, 2, 2, 2, 1, c.data(), 2, c.data(), 2, 0, c.data(),
                             DType::bf16, 2),
               Error);
}

TEST(CpuBf16, ElementwiseOps) {
  Backends b;
  Rng r(3);
  const int64_t T = 19, dim = 24, vocab = 31;
  // Embedding: a gather (exact), and its fp32 gradient.
  Act table = act(r, vocab * dim), e = act(r, T * dim);
  std::vector<int32_t> ids(T), pos(T);
  for (int64_t t = 0; t < T; ++t) {
    ids[t] = r.below(vocab);
    pos[t] = static_cast<int32_t>(t % 7);
  }
  b.f->embedding_forward(e.f.data(), table.f.data(), ids.data(), T, dim);
  b.h->embedding_forward(e.h.data(), table.h.data(), ids.data(), T, dim);
  expect_rounded(e, "embedding_forward");
  std::vector<float> dt(vocab * dim, 0.25f), dth = dt;
  b.f->embedding_backward(dt.data(), e.f.data(), ids.data(), T, dim);
  b.h->embedding_backward(dth.data(), e.h.data(), ids.data(), T, dim);
  EXPECT_EQ(dt, dth);
  // RMSNorm forward and backward (dx accumulates in bf16, dw in fp32).
  Act x = act(r, T * dim), w = act(r, dim, 0.5, 1.5), y = act(r, T * dim);
  std::vector<float> rstd(T), rstdh(T);
  b.f->rmsnorm_forward(y.f.data(), rstd.data(), x.f.data(), w.f.data(), T, dim, 1e-5);
  b.h->rmsnorm_forward(y.h.data(), rstdh.data(), x.h.data(), w.h.data(), T, dim, 1e-5);
  expect_rounded(y, "rmsnorm_forward");
  EXPECT_EQ(rstd, rstdh);
  Act dy = act(r, T * dim), dx = act(r, T * dim);
  std::vector<float> dw(dim, 0.1f), dwh = dw;
  b.f->rmsnorm_backward(dx.f.data(), dw.data(), dy.f.data(), x.f.data(), w.f.data(),
                        rstd.data(), T, dim);
  b.h->rmsnorm_backward(dx.h.data(), dwh.data(), dy.h.data(), x.h.data(), w.h.data(),
                        rstdh.data(), T, dim);
  expect_rounded(dx, "rmsnorm_backward dx");
  EXPECT_EQ(dw, dwh);
  // RoPE in place, both directions.
  Act q = act(r, T * 4 * 6);
  const std::vector<double> inv = cpu::rope_default_inv_freq(6, 10000.0);  // host = CPU memory
  b.f->rope_forward(q.f.data(), pos.data(), T, 4, 6, inv.data());
  b.h->rope_forward(q.h.data(), pos.data(), T, 4, 6, inv.data());
  expect_rounded(q, "rope_forward");
  q = act(r, T * 4 * 6);
  b.f->rope_backward(q.f.data(), pos.data(), T, 4, 6, inv.data());
  b.h->rope_backward(q.h.data(), pos.data(), T, 4, 6, inv.data());
  expect_rounded(q, "rope_backward");
  // SwiGLU, with dgate aliasing dout as the model calls it.
  Act g = act(r, T * dim, -3, 3), u = act(r, T * dim), s = act(r, T * dim);
  b.f->swiglu_forward(s.f.data(), g.f.data(), u.f.data(), T * dim);
  b.h->swiglu_forward(s.h.data(), g.h.data(), u.h.data(), T * dim);
  expect_rounded(s, "swiglu_forward");
  for (size_t i = 0; i < s.f.size(); ++i) s.f[i] = bf16_to_float(s.h[i]);  // same dout
  Act du = act(r, T * dim);
  b.f->swiglu_backward(s.f.data(), du.f.data(), s.f.data(), g.f.data(), u.f.data(), T * dim);
  b.h->swiglu_backward(s.h.data(), du.h.data(), s.h.data(), g.h.data(), u.h.data(), T * dim);
  expect_rounded(s, "swiglu_backward dgate");
  expect_rounded(du, "swiglu_backward dup");
  // Cross-entropy: fp32 loss and lse from bf16 logits; dlogits over the logits in place.
  Act logits = act(r, T * vocab, -4, 4);
  std::vector<int32_t> tgt(T);
  for (int64_t t = 0; t < T; ++t) tgt[t] = t % 5 == 4 ? -1 : r.below(vocab);
  std::vector<float> loss(T), lse(T), lossh(T), lseh(T);
  b.f->cross_entropy_forward(loss.data(), lse.data(), logits.f.data(), tgt.data(), T, vocab);
  b.h->cross_entropy_forward(lossh.data(), lseh.data(), logits.h.data(), tgt.data(), T, vocab);
  EXPECT_EQ(loss, lossh);
  EXPECT_EQ(lse, lseh);
  b.f->cross_entropy_backward(logits.f.data(), logits.f.data(), lse.data(), tgt.data(), T,
                              vocab, 0.01);
  b.h->cross_entropy_backward(logits.h.data(), logits.h.data(), lseh.data(), tgt.data(), T,
                              vocab, 0.01);
  expect_rounded(logits, "cross_entropy_backward");
}

TEST(CpuBf16, Attention) {
  Backends b;
  Rng r(4);
  const std::vector<int32_t> cu = {0, 1, 18, 20, 85};  // a 1-token sequence among others
  const int T = cu.back(), heads = 4, kv = 2, hd = 8;
  AttnShape s{cu.data(), static_cast<int>(cu.size()) - 1, heads, kv, hd, 1.0 / std::sqrt(8.0)};
  Act q = act(r, T * heads * hd, -2, 2), k = act(r, T * kv * hd, -2, 2), v = act(r, T * kv * hd),
      o = act(r, T * heads * hd);
  std::vector<float> lse(T * heads), lseh(T * heads);
  b.f->attention_forward(o.f.data(), lse.data(), q.f.data(), k.f.data(), v.f.data(), s);
  b.h->attention_forward(o.h.data(), lseh.data(), q.h.data(), k.h.data(), v.h.data(), s);
  expect_rounded(o, "attention_forward");
  EXPECT_EQ(lse, lseh);
  // Backward from the bf16 forward's output (both backends see the same inputs).
  for (size_t i = 0; i < o.f.size(); ++i) o.f[i] = bf16_to_float(o.h[i]);
  Act dout = act(r, T * heads * hd), dq = act(r, T * heads * hd), dk = act(r, T * kv * hd),
      dv = act(r, T * kv * hd);
  b.f->attention_backward(dq.f.data(), dk.f.data(), dv.f.data(), dout.f.data(), q.f.data(),
                          k.f.data(), v.f.data(), o.f.data(), lseh.data(), s);
  b.h->attention_backward(dq.h.data(), dk.h.data(), dv.h.data(), dout.h.data(), q.h.data(),
                          k.h.data(), v.h.data(), o.h.data(), lseh.data(), s);
  expect_rounded(dq, "attention_backward dq");
  expect_rounded(dk, "attention_backward dk");
  expect_rounded(dv, "attention_backward dv");
}

// ---- the model ---------------------------------------------------------------------------

// ||a - b|| / ||b|| over one tensor's range.
double rel_norm(const std::vector<float>& a, const std::vector<float>& b, int64_t off,
                int64_t n) {
  double num = 0, den = 1e-30;
  for (int64_t i = off; i < off + n; ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

struct Bf16Fixture : ModelFixture {
  Bf16Fixture(const ModelConfig& c, int64_t max_tokens)
      : ModelFixture(c, max_tokens, 1, make_cpu_backend(DType::bf16)) {}
};

// bf16 activations and weights for compute, fp32 master weights and gradients: the loss
// within 1% of fp32 and every tensor's gradient within 5% (relative norm) on a tiny model.
void check_bf16_close_to_fp32(bool tie, bool checkpoint) {
  ModelConfig c = tiny_config(97, 2, tie, checkpoint);
  Rng r(20 + tie);
  PackedBatch b = pack({random_tokens(r, 40, c.vocab), random_tokens(r, 1, c.vocab),
                        random_tokens(r, 77, c.vocab), random_tokens(r, 9, c.vocab)});
  ModelFixture f32(c, 160);
  Bf16Fixture h(c, 160);
  const double lf = f32.loss_and_grad(b, 1.0 / 123), lh = h.loss_and_grad(b, 1.0 / 123);
  EXPECT_NEAR(lh, lf, 1e-2 * lf);
  const std::vector<float> gf = f32.grad_vec(), gh = h.grad_vec();
  double worst = 0;
  for (const ParamView& v : f32.table().views) {
    const double e = rel_norm(gh, gf, v.offset, v.numel());
    EXPECT_LT(e, 5e-2) << v.name;
    worst = std::max(worst, e);
  }
  std::printf("bf16 vs fp32 (tie %d, checkpoint %d): loss %.6f vs %.6f, worst gradient %.2e\n",
              tie, checkpoint, lh, lf, worst);
}

TEST(ModelBf16, CloseToFp32Untied) { check_bf16_close_to_fp32(false, false); }
TEST(ModelBf16, CloseToFp32TiedCheckpointed) { check_bf16_close_to_fp32(true, true); }

// Recomputing activations in bf16 repeats the same roundings: checkpointing changes
// nothing, bit for bit, as in fp32.
TEST(ModelBf16, CheckpointingIsExact) {
  Rng r(5);
  ModelConfig c = tiny_config();
  PackedBatch b = pack({random_tokens(r, 50, c.vocab), random_tokens(r, 30, c.vocab)});
  Bf16Fixture plain(c, 96);
  c.checkpoint_activations = true;
  Bf16Fixture ckpt(c, 96);
  EXPECT_EQ(plain.loss_and_grad(b), ckpt.loss_and_grad(b));
  EXPECT_EQ(plain.grad_vec(), ckpt.grad_vec());
}

// Logits handed to the host are fp32 (widened from the bf16 logits).
TEST(ModelBf16, LogitsToHost) {
  Rng r(6);
  ModelConfig c = tiny_config();
  PackedBatch b = pack({random_tokens(r, 12, c.vocab)});
  ModelFixture f32(c, 16);
  Bf16Fixture h(c, 16);
  std::vector<float> lf(12 * c.vocab), lh(12 * c.vocab);
  f32.model->forward(f32.params.get(), b.mb(), nullptr, lf.data());
  h.model->forward(h.params.get(), b.mb(), nullptr, lh.data());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < lf.size(); ++i) {
    EXPECT_EQ(lh[i], round_bf16(lh[i]));
    worst = std::max(worst, std::fabs(static_cast<double>(lh[i]) - lf[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(lf[i])));
  }
  EXPECT_LT(worst, 2e-2 * scale);
}

}  // namespace
}  // namespace flexsp

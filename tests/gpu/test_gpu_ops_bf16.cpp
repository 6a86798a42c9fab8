// bf16 mixed precision: every op of the CUDA backend with DType::bf16
// activations against the CPU backend's bf16 emulation (make_cpu_backend(DType::bf16):
// widen, fp32 reference kernel, round once) on identical inputs: host values rounded to
// bf16 first (random_bf16), then uploaded to both. Backward passes take the CPU's saved
// statistics (rstd, lse) on both sides, so each op is checked alone.
// Tolerances: bf16 outputs rel_err <= 1e-2 (kBf16Tol: one bf16 ulp where the fp32 values
// straddle a rounding boundary); fp32 outputs computed from identical bf16 inputs (rstd,
// lse, loss, weight gradients) are held to the fp32 tolerance 1e-5. Also: cast rounds
// exactly as lib/util/dtype.h's float_to_bf16 (bit for bit, ties to even, denormals,
// overflow, NaN), gemm_act with C bf16 or f32, beta 0 or 1, every transpose combination,
// and the errors for types a backend does not take. Without a CUDA device every test skips.
#include <cstring>
#include <string>

#include "gpu_test_common.h"
#include "lib/util/error.h"

namespace flexsp::testing {
namespace {

std::string kv(const char* key, int64_t v) {
  return std::string(" ") + key + "=" + std::to_string(v);
}

class GpuBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    FLEXSP_REQUIRE_GPU();
    gpu = make_cuda_backend(DType::bf16);
    cpu = make_cpu_backend(DType::bf16);
    ASSERT_EQ(gpu->act_dtype(), DType::bf16);
    ASSERT_EQ(cpu->act_dtype(), DType::bf16);
  }

  // The same host values in both backends' memory (g: CUDA, c: CPU).
  struct Acts {
    ActBuffer g, c;
  };
  struct F32s {
    Buffer<float> g, c;
  };
  struct Ints {
    Buffer<int32_t> g, c;
  };
  Acts acts(const std::vector<float>& v) { return {upload_act(*gpu, v), upload_act(*cpu, v)}; }
  F32s f32s(const std::vector<float>& v) { return {upload(*gpu, v), upload(*cpu, v)}; }
  Ints ints(const std::vector<int32_t>& v) { return {upload(*gpu, v), upload(*cpu, v)}; }

  void check(const Acts& a, const std::string& what) {
    expect_close(download_act(*gpu, a.g), download_act(*cpu, a.c), kBf16Tol, what);
  }
  void check(const F32s& a, const std::string& what, double tol) {
    expect_close(download(*gpu, a.g), download(*cpu, a.c), tol, what);
  }

  std::unique_ptr<Backend> gpu, cpu;
};

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST_F(GpuBf16, CastRoundsLikeTheHost) {
  // Ties both ways, just off ties, denormals (and ties among them), the largest floats
  // (rounding up to infinity), signed zeros, infinities, quiet and signalling NaNs.
  const uint32_t special[] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F807FFFu, 0xBF818000u,
                              0x00000001u, 0x00008000u, 0x00018000u, 0x807FFFFFu, 0x7F7FFFFFu,
                              0xFF7FFFFFu, 0x7F7F7FFFu, 0x00000000u, 0x80000000u, 0x7F800000u,
                              0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFC00001u};
  std::vector<float> x;
  for (uint32_t u : special) x.push_back(bits_float(u));
  Rng r(21);
  for (int i = 0; i < 100003; ++i)  // magnitudes 2^-140 .. 2^127: normals and denormals
    x.push_back(static_cast<float>(r.uniform(-1, 1) * std::ldexp(1.0, r.below(268) - 140)));
  const int64_t n = static_cast<int64_t>(x.size());
  auto src = upload(*gpu, x);
  Buffer<uint16_t> h(*gpu, x.size());
  Buffer<float> back(*gpu, x.size());
  gpu->cast(h.get(), DType::bf16, src.get(), DType::f32, n);
  gpu->cast(back.get(), DType::f32, h.get(), DType::bf16, n);
  const std::vector<uint16_t> got = download(*gpu, h);
  const std::vector<float> widened = download(*gpu, back);
  size_t bad = 0, bad_back = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t want = float_to_bf16(x[i]);
    const bool nan = std::isnan(x[i]);
    if (nan ? !std::isnan(bf16_to_float(got[i])) : got[i] != want) {
      if (bad++ < 5)
        ADD_FAILURE() << "f32 -> bf16 of 0x" << std::hex << float_bits(x[i]) << ": got 0x"
                      << got[i] << ", want 0x" << want << std::dec;
    }
    const float w = bf16_to_float(got[i]);  // bf16 -> f32 is exact: the bits shifted up
    if (nan ? !std::isnan(widened[i]) : float_bits(widened[i]) != float_bits(w)) ++bad_back;
  }
  EXPECT_EQ(bad, 0u) << "f32 -> bf16 differs from float_to_bf16";
  EXPECT_EQ(bad_back, 0u) << "bf16 -> f32 is not exact";
  // Equal types: a copy (any type); in place: nothing to do.
  Buffer<float> copy(*gpu, x.size());
  gpu->cast(copy.get(), DType::f32, src.get(), DType::f32, n);
  const std::vector<float> copied = download(*gpu, copy);
  EXPECT_EQ(std::memcmp(copied.data(), x.data(), x.size() * sizeof(float)), 0);
  Buffer<uint16_t> h2(*gpu, x.size());
  gpu->cast(h2.get(), DType::bf16, h.get(), DType::bf16, n);
  gpu->cast(h2.get(), DType::bf16, h2.get(), DType::bf16, n);
  EXPECT_EQ(download(*gpu, h2), got);
  gpu->cast(h2.get(), DType::bf16, src.get(), DType::f32, 0);  // n = 0: nothing
  EXPECT_EQ(download(*gpu, h2), got);
  // Unsupported conversions, and a conversion in place, are errors.
  EXPECT_THROW(gpu->cast(copy.get(), DType::i32, src.get(), DType::f32, n), Error);
  EXPECT_THROW(gpu->cast(copy.get(), DType::bf16, copy.get(), DType::f32, n), Error);
}

TEST_F(GpuBf16, AxpyAct) {
  Rng r(22);
  for (int64_t n : {1, 7, 1000, 65537}) {
    auto x = acts(random_bf16(r, n)), y = acts(random_bf16(r, n));
    gpu->axpy_act(y.g.get(), x.g.get(), n, -0.37f);
    cpu->axpy_act(y.c.get(), x.c.get(), n, -0.37f);
    check(y, "axpy_act" + kv("n", n));
    gpu->axpy_act(y.g.get(), x.g.get(), n, 3.0f);  // accumulates: reads the bf16 y back
    cpu->axpy_act(y.c.get(), x.c.get(), n, 3.0f);
    check(y, "axpy_act twice" + kv("n", n));
  }
}

TEST_F(GpuBf16, GemmAct) {
  Rng r(23);
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {64, 97, 33}, {130, 3, 257}, {1, 300, 64}};
  for (const auto& sh : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (DType ct : {DType::bf16, DType::f32})
          for (float beta : {0.0f, 1.0f}) {
            const int64_t m = sh[0], n = sh[1], k = sh[2];
            // Padded leading dimensions check the stride handling.
            const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 1, ldc = n + 2;
            auto a = acts(random_bf16(r, (ta ? k : m) * lda));
            auto b = acts(random_bf16(r, (tb ? n : k) * ldb));
            const auto c0 = random_bf16(r, m * ldc);
            const std::string what = "gemm_act" + kv("m", m) + kv("n", n) + kv("k", k) +
                                     kv("ta", ta) + kv("tb", tb) + " C " + dtype_name(ct) +
                                     " beta=" + std::to_string(beta);
            if (ct == DType::bf16) {
              auto c = acts(c0);
              gpu->gemm_act(ta, tb, m, n, k, 0.7f, a.g.get(), lda, b.g.get(), ldb, beta,
                            c.g.get(), ct, ldc);
              cpu->gemm_act(ta, tb, m, n, k, 0.7f, a.c.get(), lda, b.c.get(), ldb, beta,
                            c.c.get(), ct, ldc);
              check(c, what);
            } else {  // fp32 C (weight gradients): accumulated without bf16 rounding
              auto c = f32s(c0);
              gpu->gemm_act(ta, tb, m, n, k, 0.7f, a.g.get(), lda, b.g.get(), ldb, beta,
                            c.g.get(), ct, ldc);
              cpu->gemm_act(ta, tb, m, n, k, 0.7f, a.c.get(), lda, b.c.get(), ldb, beta,
                            c.c.get(), ct, ldc);
              check(c, what, kBf16Tol);
            }
          }
  // C must be the activation type or f32.
  Buffer<double> d(*gpu, 4);
  auto x = acts(random_bf16(r, 4));
  EXPECT_THROW(gpu->gemm_act(false, false, 2, 2, 2, 1.0f, x.g.get(), 2, x.g.get(), 2, 0.0f,
                             d.get(), DType::f64, 2),
               Error);
}

TEST_F(GpuBf16, Embedding) {
  Rng r(24);
  for (int64_t n : {1, 5, 333})
    for (int64_t dim : {1, 64, 100}) {
      const int vocab = 17;  // few rows: many repeated ids in backward
      std::vector<int32_t> hid(n);
      for (auto& i : hid) i = r.below(vocab + 2) - 2;  // negative: zero rows
      auto ids = ints(hid);
      auto table = acts(random_bf16(r, vocab * dim)), out = acts(poison(n * dim));
      auto dout = acts(random_bf16(r, n * dim));
      auto dtable = f32s(random_floats(r, vocab * dim));
      const std::string what = kv("n", n) + kv("dim", dim);
      gpu->embedding_forward(out.g.get(), table.g.get(), ids.g.get(), n, dim);
      cpu->embedding_forward(out.c.get(), table.c.get(), ids.c.get(), n, dim);
      expect_close(download_act(*gpu, out.g), download_act(*cpu, out.c), 0.0,
                   "embedding fwd (a copy)" + what);
      gpu->embedding_backward(dtable.g.get(), dout.g.get(), ids.g.get(), n, dim);
      cpu->embedding_backward(dtable.c.get(), dout.c.get(), ids.c.get(), n, dim);
      check(dtable, "embedding bwd (fp32 dtable +=)" + what, kFp32Tol);
    }
}

TEST_F(GpuBf16, RmsNorm) {
  Rng r(25);
  for (int64_t n : {1, 3, 257, 600})
    for (int64_t dim : {1, 64, 97, 1000}) {
      auto x = acts(random_bf16(r, n * dim)), w = acts(random_bf16(r, dim, 0.5, 1.5));
      auto out = acts(poison(n * dim));
      auto rstd = f32s(poison(n));
      const std::string what = kv("n", n) + kv("dim", dim);
      gpu->rmsnorm_forward(out.g.get(), rstd.g.get(), x.g.get(), w.g.get(), n, dim, 1e-5);
      cpu->rmsnorm_forward(out.c.get(), rstd.c.get(), x.c.get(), w.c.get(), n, dim, 1e-5);
      check(out, "rmsnorm out" + what);
      check(rstd, "rmsnorm rstd (fp32)" + what, kFp32Tol);
      // Backward from the CPU's rstd on both sides; dx accumulates into bf16, dw into fp32.
      const std::vector<float> rs = download(*cpu, rstd.c);
      auto rs_g = upload(*gpu, rs);
      auto dout = acts(random_bf16(r, n * dim)), dx = acts(random_bf16(r, n * dim));
      auto dw = f32s(random_floats(r, dim));
      gpu->rmsnorm_backward(dx.g.get(), dw.g.get(), dout.g.get(), x.g.get(), w.g.get(),
                            rs_g.get(), n, dim);
      cpu->rmsnorm_backward(dx.c.get(), dw.c.get(), dout.c.get(), x.c.get(), w.c.get(),
                            rstd.c.get(), n, dim);
      check(dx, "rmsnorm dx (+=)" + what);
      check(dw, "rmsnorm dw (fp32 +=)" + what, kFp32Tol);
    }
}

TEST_F(GpuBf16, Rope) {
  Rng r(26);
  for (int64_t n : {1, 37})
    for (int heads : {1, 4})
      for (int hd : {2, 16, 64, 128})
        for (const std::vector<double>& table : rope_tables(hd)) {
          std::vector<int32_t> hpos(n);
          for (auto& p : hpos) p = r.below(5000);
          auto pos = ints(hpos);
          auto ginv = upload(*gpu, table), cinv = upload(*cpu, table);
          const auto x0 = random_bf16(r, n * heads * hd);
          auto f = acts(x0), b = acts(x0);
          gpu->rope_forward(f.g.get(), pos.g.get(), n, heads, hd, ginv.get());
          cpu->rope_forward(f.c.get(), pos.c.get(), n, heads, hd, cinv.get());
          gpu->rope_backward(b.g.get(), pos.g.get(), n, heads, hd, ginv.get());
          cpu->rope_backward(b.c.get(), pos.c.get(), n, heads, hd, cinv.get());
          const std::string what = kv("n", n) + kv("heads", heads) + kv("hd", hd) +
                                   " inv_freq[last]=" + std::to_string(table.back());
          check(f, "rope fwd (in place)" + what);
          check(b, "rope bwd (in place)" + what);
        }
}

TEST_F(GpuBf16, SwiGlu) {
  Rng r(27);
  for (int64_t n : {1, 7, 1000, 65537}) {
    auto g = acts(random_bf16(r, n, -6, 6)), u = acts(random_bf16(r, n));
    auto d = acts(random_bf16(r, n));
    auto out = acts(poison(n)), du = acts(poison(n));
    gpu->swiglu_forward(out.g.get(), g.g.get(), u.g.get(), n);
    cpu->swiglu_forward(out.c.get(), g.c.get(), u.c.get(), n);
    // dgate aliases dout, as in the model.
    gpu->swiglu_backward(d.g.get(), du.g.get(), d.g.get(), g.g.get(), u.g.get(), n);
    cpu->swiglu_backward(d.c.get(), du.c.get(), d.c.get(), g.c.get(), u.c.get(), n);
    const std::string what = kv("n", n);
    check(out, "swiglu fwd" + what);
    check(d, "swiglu dgate (aliasing dout)" + what);
    check(du, "swiglu dup" + what);
  }
}

TEST_F(GpuBf16, CrossEntropy) {
  Rng r(28);
  for (int64_t n : {1, 9, 130})
    for (int64_t vocab : {2, 97, 5000}) {
      std::vector<int32_t> htg(n);
      for (auto& t : htg) t = r.below(4) == 0 ? -1 : r.below(static_cast<int>(vocab));
      auto tg = ints(htg);
      auto z = acts(random_bf16(r, n * vocab, -8, 8));
      auto loss = f32s(poison(n)), lse = f32s(poison(n));
      gpu->cross_entropy_forward(loss.g.get(), lse.g.get(), z.g.get(), tg.g.get(), n, vocab);
      cpu->cross_entropy_forward(loss.c.get(), lse.c.get(), z.c.get(), tg.c.get(), n, vocab);
      const std::string what = kv("n", n) + kv("vocab", vocab);
      check(loss, "ce loss (fp32)" + what, kFp32Tol);
      check(lse, "ce lse (fp32)" + what, kFp32Tol);
      // In place over the logits, from the CPU's lse on both sides.
      auto lse_g = upload(*gpu, download(*cpu, lse.c));
      gpu->cross_entropy_backward(z.g.get(), z.g.get(), lse_g.get(), tg.g.get(), n, vocab, 0.25);
      cpu->cross_entropy_backward(z.c.get(), z.c.get(), lse.c.get(), tg.c.get(), n, vocab, 0.25);
      check(z, "ce dlogits (in place)" + what);
    }
}

TEST_F(GpuBf16, CrossEntropyShards) {
  Rng r(29);
  for (int64_t n : {1, 130})
    for (int64_t w : {2, 97, 1700}) {
      std::vector<int32_t> htg(n);
      for (auto& t : htg) t = r.below(4) == 0 ? -1 : (r.below(2) ? r.below(static_cast<int>(w) - 1) : 1 << 30);
      auto tg = ints(htg);
      auto z = acts(random_bf16(r, n * w, -8, 8));
      auto st = f32s(poison(n * 3));
      gpu->cross_entropy_shard_stats(st.g.get(), z.g.get(), tg.g.get(), n, w, w - 1);
      cpu->cross_entropy_shard_stats(st.c.get(), z.c.get(), tg.c.get(), n, w, w - 1);
      const std::string what = kv("n", n) + kv("w", w);
      check(st, "shard stats (fp32)" + what, kFp32Tol);
      auto loss = f32s(poison(n)), lse = f32s(poison(n));
      cpu->cross_entropy_shard_loss(loss.c.get(), lse.c.get(), st.c.get(), 1, tg.c.get(), n);
      auto lse_g = upload(*gpu, download(*cpu, lse.c));
      gpu->cross_entropy_shard_backward(z.g.get(), z.g.get(), lse_g.get(), tg.g.get(), n, w, w - 1, 0.25);
      cpu->cross_entropy_shard_backward(z.c.get(), z.c.get(), lse.c.get(), tg.c.get(), n, w, w - 1, 0.25);
      check(z, "shard dlogits (in place)" + what);
    }
}

TEST_F(GpuBf16, AddF32) {
  Rng r(31);
  for (int64_t n : {1, 1000, 100003}) {
    auto y = acts(random_bf16(r, n));
    auto x = f32s(random_floats(r, n));
    gpu->add_f32(y.g.get(), x.g.get(), n);
    cpu->add_f32(y.c.get(), x.c.get(), n);
    check(y, "add_f32" + kv("n", n));
  }
}

TEST_F(GpuBf16, OnlyF32OrBf16Activations) {
  EXPECT_THROW(CudaBackend(0, DType::f64, false, CudaAttention::automatic), Error);
  EXPECT_EQ(make_cuda_backend(DType::f32)->act_dtype(), DType::f32);
  EXPECT_EQ(make_cuda_backend()->act_dtype(), DType::bf16);  // the default
}

}  // namespace
}  // namespace flexsp::testing

// AdamW update against PyTorch's formula computed in double, GEMM transposes against a
// naive product, and the double-accumulating reductions.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "test_kernels_common.h"

namespace flexsp {
namespace {

using testing::random_vec;
using testing::Rng;

TEST(KernelAdamW, ThreeStepsMatchTorchFormula) {
  Rng r(1);
  const int64_t n = 33;
  auto p0 = random_vec(r, n);
  std::vector<float> p(p0.begin(), p0.end()), m(n, 0), v(n, 0);
  std::vector<double> pd = p0, md(n, 0), vd(n, 0);
  cpu::AdamWArgs a;
  a.lr = 1e-2f;
  a.beta1 = 0.9f;
  a.beta2 = 0.95f;
  a.eps = 1e-8f;
  a.weight_decay = 0.1f;
  a.grad_scale = 0.5f;
  for (int step = 1; step <= 3; ++step) {
    auto gd = random_vec(r, n);
    std::vector<float> g(gd.begin(), gd.end());
    a.step = step;
    cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, a);
    const double b1 = a.beta1, b2 = a.beta2, lr = a.lr;
    for (int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(g[i]) * a.grad_scale;
      pd[i] *= 1 - lr * static_cast<double>(a.weight_decay);
      md[i] = b1 * md[i] + (1 - b1) * gi;
      vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
      const double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
      pd[i] -= lr / bc1 * md[i] / (std::sqrt(vd[i]) / std::sqrt(bc2) + a.eps);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(p[i], pd[i], 1e-6) << i;
    EXPECT_NEAR(m[i], md[i], 1e-6) << i;
    EXPECT_NEAR(v[i], vd[i], 1e-7) << i;
  }
}

TEST(KernelGemm, AllTransposesWithAlphaBeta) {
  Rng r(2);
  const int64_t M = 5, N = 7, K = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      auto ad = random_vec(r, M * K), bd = random_vec(r, K * N), cd = random_vec(r, M * N);
      std::vector<float> a(ad.begin(), ad.end()), b(bd.begin(), bd.end()), c(cd.begin(), cd.end());
      // A stored [M,K] or [K,M]; B stored [K,N] or [N,K].
      cpu::gemm(ta, tb, M, N, K, 2.0f, a.data(), ta ? M : K, b.data(), tb ? K : N, 0.5f, c.data(), N);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += static_cast<double>(ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
          EXPECT_NEAR(c[i * N + j], 2 * s + 0.5 * static_cast<float>(cd[i * N + j]), 1e-5);
        }
    }
}

TEST(KernelVector, SumsAccumulateInDouble) {
  std::vector<float> x(200000, 0.1f);
  x[0] = 1e8f;
  const double want = 1e8 + 199999 * static_cast<double>(0.1f);
  // In float, 0.1 added to 1e8 is lost (error ~2e4); in double the error is ~1e-3.
  EXPECT_NEAR(cpu::sum(x.data(), static_cast<int64_t>(x.size())), want, 1e-2);
  std::vector<float> y = {3, 4};
  EXPECT_EQ(cpu::sum_squares(y.data(), 2), 25.0);
  cpu::scale(y.data(), 2, 0.5f);
  EXPECT_EQ(y[1], 2.0f);
  cpu::axpy(y.data(), y.data(), 2, 1.0f);
  EXPECT_EQ(y[0], 3.0f);
}

}  // namespace
}  // namespace flexsp

// RMSNorm, RoPE, SwiGLU, embedding and cross-entropy reference kernels: backward against
// finite differences in double, forward against direct formulas, float against double.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "test_kernels_common.h"

namespace flexsp {
namespace {

using testing::cast_vec;
using testing::check_fd;
using testing::dot;
using testing::random_vec;
using testing::rel_err;
using testing::Rng;

TEST(KernelRmsNorm, BackwardMatchesFiniteDifferences) {
  Rng r(1);
  const int64_t n = 5, dim = 12;
  auto x = random_vec(r, n * dim), w = random_vec(r, dim, 0.5, 1.5), R = random_vec(r, n * dim);
  const double eps = 1e-5;
  auto loss = [&]() {
    std::vector<double> out(n * dim), rstd(n);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, dim, eps);
    return dot(out, R);
  };
  std::vector<double> out(n * dim), rstd(n), dx(n * dim, 0.25), dw(dim, -0.5);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, dim, eps);
  cpu::rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), n, dim);
  for (double& v : dx) v -= 0.25;  // both gradients accumulate into what was there
  for (double& v : dw) v += 0.5;
  check_fd(loss, x, dx, 1e-7, "dx");
  check_fd(loss, w, dw, 1e-7, "dw");
  // Forward against the formula, and the float instantiation against double.
  for (int64_t t = 0; t < n; ++t) {
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += x[t * dim + j] * x[t * dim + j];
    const double rr = 1 / std::sqrt(ss / dim + eps);
    for (int64_t j = 0; j < dim; ++j) EXPECT_NEAR(out[t * dim + j], w[j] * x[t * dim + j] * rr, 1e-14);
  }
  auto xf = cast_vec<float>(x), wf = cast_vec<float>(w);
  std::vector<float> of(n * dim), rf(n);
  cpu::rmsnorm_forward(of.data(), rf.data(), xf.data(), wf.data(), n, dim, eps);
  EXPECT_LT(rel_err(cast_vec<double>(of), out), 1e-6);
}

// HF: q_embed = q * cos + rotate_half(q) * sin, rotate_half(x) = cat(-x2, x1).
TEST(KernelRope, ForwardIsHfRotateHalfAndBackwardIsItsTranspose) {
  Rng r(2);
  const int64_t n = 6;
  const int heads = 3, hd = 8;
  const double theta = 10000;
  std::vector<int32_t> pos = {0, 1, 2, 0, 7, 1000};
  auto x = random_vec(r, n * heads * hd), R = random_vec(r, n * heads * hd);
  std::vector<double> y = x;
  const std::vector<double> inv = cpu::rope_default_inv_freq(hd, theta);
  cpu::rope_forward(y.data(), pos.data(), n, heads, hd, inv.data());
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd; ++i) {
        const int k = i % (hd / 2);
        const double a = pos[t] * std::pow(theta, -2.0 * k / hd);
        const double* xr = &x[(t * heads + h) * hd];
        const double rot = i < hd / 2 ? -xr[i + hd / 2] : xr[i - hd / 2];
        EXPECT_NEAR(y[(t * heads + h) * hd + i], xr[i] * std::cos(a) + rot * std::sin(a), 1e-12);
      }
  auto loss = [&]() {
    std::vector<double> z = x;
    cpu::rope_forward(z.data(), pos.data(), n, heads, hd, inv.data());
    return dot(z, R);
  };
  std::vector<double> dx = R;
  cpu::rope_backward(dx.data(), pos.data(), n, heads, hd, inv.data());
  check_fd(loss, x, dx, 1e-8, "dx");
  // Position 0 is the identity; backward undoes forward.
  for (int i = 0; i < heads * hd; ++i) EXPECT_EQ(y[i], x[i]);
  cpu::rope_backward(y.data(), pos.data(), n, heads, hd, inv.data());
  EXPECT_LT(rel_err(y, x), 1e-14);
}

TEST(KernelSwiGlu, BackwardMatchesFiniteDifferencesAndMayAliasDout) {
  Rng r(3);
  const int64_t n = 40;
  auto g = random_vec(r, n, -6, 6), u = random_vec(r, n, -2, 2), R = random_vec(r, n);
  auto loss = [&]() {
    std::vector<double> out(n);
    cpu::swiglu_forward(out.data(), g.data(), u.data(), n);
    return dot(out, R);
  };
  std::vector<double> dg(n), du(n);
  cpu::swiglu_backward(dg.data(), du.data(), R.data(), g.data(), u.data(), n);
  check_fd(loss, g, dg, 1e-8, "dgate");
  check_fd(loss, u, du, 1e-8, "dup");
  std::vector<double> alias = R, du2(n);
  cpu::swiglu_backward(alias.data(), du2.data(), alias.data(), g.data(), u.data(), n);
  EXPECT_EQ(alias, dg);
  EXPECT_EQ(du2, du);
  std::vector<double> out(n);
  cpu::swiglu_forward(out.data(), g.data(), u.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-14);
}

TEST(KernelEmbedding, GatherAndScatterAddWithRepeatedIds) {
  Rng r(4);
  const int64_t vocab = 7, dim = 37, n = 9;  // dim not a multiple of the column block
  std::vector<int32_t> ids = {3, 0, 3, 6, 3, 1, 0, 6, 2};
  auto table = random_vec(r, vocab * dim), dout = random_vec(r, n * dim);
  std::vector<double> out(n * dim);
  cpu::embedding_forward(out.data(), table.data(), ids.data(), n, dim);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(out[t * dim + j], table[ids[t] * dim + j]);
  std::vector<double> dt(vocab * dim, 1.0), want(vocab * dim, 1.0);
  cpu::embedding_backward(dt.data(), dout.data(), ids.data(), n, dim);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < dim; ++j) want[ids[t] * dim + j] += dout[t * dim + j];
  EXPECT_EQ(dt, want);  // same order of additions: bit-identical
  // Negative ids (rows of another tensor-parallel rank): zero rows, no gradient.
  std::vector<int32_t> some = {3, -1, 0, -1};
  std::vector<double> o2(4 * dim, 7.0), dt2(vocab * dim, 1.0);
  cpu::embedding_forward(o2.data(), table.data(), some.data(), 4, dim);
  cpu::embedding_backward(dt2.data(), dout.data(), some.data(), 4, dim);
  for (int64_t j = 0; j < dim; ++j) {
    EXPECT_EQ(o2[1 * dim + j], 0.0);
    EXPECT_EQ(o2[3 * dim + j], 0.0);
    EXPECT_EQ(o2[2 * dim + j], table[j]);
    EXPECT_EQ(dt2[3 * dim + j], 1.0 + dout[j]);
    EXPECT_EQ(dt2[0 * dim + j], 1.0 + dout[2 * dim + j]);
  }
}

TEST(KernelCrossEntropy, LossAndGradientWithIgnoredTargets) {
  Rng r(5);
  const int64_t n = 6, vocab = 11;
  std::vector<int32_t> tgt = {3, -1, 0, 10, -1, 5};
  auto z = random_vec(r, n * vocab, -4, 4);
  z[3 * vocab + 2] = 80;  // a large logit: the max subtraction keeps it finite
  const double scale = 0.37;
  auto loss = [&]() {
    std::vector<double> l(n), lse(n);
    cpu::cross_entropy_forward(l.data(), lse.data(), z.data(), tgt.data(), n, vocab);
    double s = 0;
    for (double v : l) s += v;
    return scale * s;
  };
  std::vector<double> l(n), lse(n), dz(n * vocab);
  cpu::cross_entropy_forward(l.data(), lse.data(), z.data(), tgt.data(), n, vocab);
  for (int64_t t = 0; t < n; ++t) {
    double mx = -1e300, s = 0;
    for (int64_t j = 0; j < vocab; ++j) mx = std::max(mx, z[t * vocab + j]);
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(z[t * vocab + j] - mx);
    EXPECT_NEAR(lse[t], mx + std::log(s), 1e-12);
    EXPECT_NEAR(l[t], tgt[t] < 0 ? 0.0 : lse[t] - z[t * vocab + tgt[t]], 1e-12);
  }
  cpu::cross_entropy_backward(dz.data(), z.data(), lse.data(), tgt.data(), n, vocab, scale);
  check_fd(loss, z, dz, 1e-7, "dlogits");
  for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(dz[1 * vocab + j], 0.0);
  // In place (dlogits aliasing logits) gives the same numbers.
  std::vector<double> zz = z;
  cpu::cross_entropy_backward(zz.data(), zz.data(), lse.data(), tgt.data(), n, vocab, scale);
  EXPECT_EQ(zz, dz);
  // float against double
  auto zf = cast_vec<float>(z);
  std::vector<float> lf(n), lsef(n);
  cpu::cross_entropy_forward(lf.data(), lsef.data(), zf.data(), tgt.data(), n, vocab);
  EXPECT_LT(rel_err(cast_vec<double>(lf), l), 1e-6);
}

// The vocabulary-shard forms (tensor parallelism) against the whole rows: a vocabulary of
// 11 split into 1..4 shards of ceil(11 / parts) columns, the last padded with large
// garbage logits that must not count; targets on every shard, ignored rows included.
TEST(KernelCrossEntropy, ShardsEqualWholeRows) {
  Rng r(6);
  const int64_t n = 7, vocab = 11;
  const std::vector<int32_t> tgt = {3, -1, 0, 10, 5, 9, 1};
  auto zd = random_vec(r, n * vocab, -4, 4);
  zd[2 * vocab + 7] = 60;
  const std::vector<float> z = cast_vec<float>(zd);
  std::vector<float> loss(n), lse(n), dz(n * vocab);
  cpu::cross_entropy_forward(loss.data(), lse.data(), z.data(), tgt.data(), n, vocab);
  cpu::cross_entropy_backward(dz.data(), z.data(), lse.data(), tgt.data(), n, vocab, 0.3);
  for (int parts = 1; parts <= 4; ++parts) {
    const int64_t w = (vocab + parts - 1) / parts;
    std::vector<float> stats(static_cast<size_t>(parts * n * 3));
    std::vector<std::vector<float>> shard(parts, std::vector<float>(n * w, 1e4f));
    std::vector<std::vector<int32_t>> stg(parts, std::vector<int32_t>(n));
    for (int p = 0; p < parts; ++p) {
      const int64_t v0 = p * w, valid = std::max<int64_t>(0, std::min(w, vocab - v0));
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < valid; ++j) shard[p][t * w + j] = z[t * vocab + v0 + j];
        const int32_t g = tgt[t];
        stg[p][t] = g < 0 ? -1 : (g >= v0 && g < v0 + valid ? g - static_cast<int32_t>(v0) : INT32_MAX);
      }
      cpu::cross_entropy_shard_stats(stats.data() + p * n * 3, shard[p].data(), stg[p].data(), n,
                                     w, valid);
    }
    std::vector<float> l2(n), lse2(n);
    cpu::cross_entropy_shard_loss(l2.data(), lse2.data(), stats.data(), parts, tgt.data(), n);
    for (int64_t t = 0; t < n; ++t) {
      EXPECT_NEAR(lse2[t], lse[t], 1e-5) << parts << " parts, row " << t;
      EXPECT_NEAR(l2[t], loss[t], 1e-5) << parts << " parts, row " << t;
    }
    for (int p = 0; p < parts; ++p) {
      const int64_t v0 = p * w, valid = std::max<int64_t>(0, std::min(w, vocab - v0));
      cpu::cross_entropy_shard_backward(shard[p].data(), shard[p].data(), lse.data(),
                                        stg[p].data(), n, w, valid, 0.3);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < w; ++j) {
          const float want = j < valid ? dz[t * vocab + v0 + j] : 0.0f;
          EXPECT_NEAR(shard[p][t * w + j], want, 1e-6) << parts << " parts " << t << "," << j;
        }
    }
  }
}

}  // namespace
}  // namespace flexsp

// Varlen causal GQA attention: the blockwise kernel against a naive O(s^2) implementation
// written here (forward, lse and backward), for lengths around the tile size, 1-token and
// many short sequences, GQA ratios 1:1, 2:1 and 4:1; the naive backward itself against
// finite differences; the float kernel against double.
#include <cmath>
#include <numeric>

#include "kernels/cpu/cpu_kernels.h"
#include "test_kernels_common.h"

namespace flexsp {
namespace {

using testing::cast_vec;
using testing::dot;
using testing::random_vec;
using testing::rel_err;
using testing::Rng;

struct Case {
  std::vector<int> lens;
  int heads, kv_heads, d;
};

struct Tensors {
  std::vector<double> q, k, v, dout;
};

// The textbook algorithm, one sequence and head at a time, full probability matrix.
void naive(const Case& c, const std::vector<int32_t>& cu, const Tensors& in, std::vector<double>& out,
           std::vector<double>& lse, std::vector<double>& dq, std::vector<double>& dk,
           std::vector<double>& dv) {
  const int T = cu.back(), H = c.heads, d = c.d, g = c.heads / c.kv_heads;
  const double sc = 1 / std::sqrt(static_cast<double>(d));
  out.assign(static_cast<size_t>(T) * H * d, 0);
  lse.assign(static_cast<size_t>(T) * H, 0);
  dq.assign(out.size(), 0);
  dk.assign(static_cast<size_t>(T) * c.kv_heads * d, 0);
  dv.assign(dk.size(), 0);
  auto Q = [&](int t, int h) { return &in.q[(static_cast<size_t>(t) * H + h) * d]; };
  auto K = [&](const std::vector<double>& x, int t, int h) {
    return &x[(static_cast<size_t>(t) * c.kv_heads + h) * d];
  };
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    const int b = cu[s], n = cu[s + 1] - cu[s];
    for (int h = 0; h < H; ++h) {
      const int kh = h / g;
      std::vector<double> P(static_cast<size_t>(n) * n, 0);
      for (int i = 0; i < n; ++i) {
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          double sij = 0;
          for (int e = 0; e < d; ++e) sij += Q(b + i, h)[e] * K(in.k, b + j, kh)[e];
          P[i * n + j] = sij * sc;
          mx = std::max(mx, P[i * n + j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(P[i * n + j] - mx);
        lse[(b + i) * H + h] = mx + std::log(sum);
        for (int j = 0; j <= i; ++j) P[i * n + j] = std::exp(P[i * n + j] - lse[(b + i) * H + h]);
        for (int j = 0; j <= i; ++j)
          for (int e = 0; e < d; ++e)
            out[((b + i) * H + h) * d + e] += P[i * n + j] * K(in.v, b + j, kh)[e];
      }
      for (int i = 0; i < n; ++i) {
        const double* go = &in.dout[((b + i) * H + h) * d];
        double Di = 0;
        for (int e = 0; e < d; ++e) Di += go[e] * out[((b + i) * H + h) * d + e];
        for (int j = 0; j <= i; ++j) {
          double dp = 0;
          for (int e = 0; e < d; ++e) dp += go[e] * K(in.v, b + j, kh)[e];
          const double ds = P[i * n + j] * (dp - Di) * sc;
          for (int e = 0; e < d; ++e) {
            dv[((b + j) * c.kv_heads + kh) * d + e] += P[i * n + j] * go[e];
            dq[((b + i) * H + h) * d + e] += ds * K(in.k, b + j, kh)[e];
            dk[((b + j) * c.kv_heads + kh) * d + e] += ds * Q(b + i, h)[e];
          }
        }
      }
    }
  }
}

std::vector<int32_t> cu_of(const std::vector<int>& lens) {
  std::vector<int32_t> cu(1, 0);
  for (int l : lens) cu.push_back(cu.back() + l);
  return cu;
}

Tensors random_inputs(const Case& c, int T, uint64_t seed) {
  Rng r(seed);
  Tensors t;
  t.q = random_vec(r, static_cast<size_t>(T) * c.heads * c.d, -2, 2);
  t.k = random_vec(r, static_cast<size_t>(T) * c.kv_heads * c.d, -2, 2);
  t.v = random_vec(r, static_cast<size_t>(T) * c.kv_heads * c.d);
  t.dout = random_vec(r, static_cast<size_t>(T) * c.heads * c.d);
  return t;
}

cpu::AttnShape shape_of(const Case& c, const std::vector<int32_t>& cu) {
  return {cu.data(), static_cast<int>(cu.size()) - 1, c.heads, c.kv_heads, c.d,
          1 / std::sqrt(static_cast<double>(c.d))};
}

void check_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "heads " << c.heads << " kv " << c.kv_heads << " d " << c.d
                                    << " seqs " << c.lens.size());
  const auto cu = cu_of(c.lens);
  const int T = cu.back();
  const Tensors in = random_inputs(c, T, seed);
  std::vector<double> out0, lse0, dq0, dk0, dv0;
  naive(c, cu, in, out0, lse0, dq0, dk0, dv0);
  const auto s = shape_of(c, cu);
  std::vector<double> out(out0.size()), lse(lse0.size()), dq(dq0.size()), dk(dk0.size()),
      dv(dv0.size());
  cpu::attention_forward(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s);
  cpu::attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(),
                          in.k.data(), in.v.data(), out.data(), lse.data(), s);
  EXPECT_LT(rel_err(out, out0), 1e-12);
  EXPECT_LT(rel_err(lse, lse0), 1e-12);
  // Gradients relative to their scale, but at least 0.1 (inputs are O(1)): dq and dk of a
  // 1-token sequence are exactly 0 in theory and rounding noise in practice.
  EXPECT_LT(rel_err(dq, dq0, 0.1), 1e-12);
  EXPECT_LT(rel_err(dk, dk0, 0.1), 1e-12);
  EXPECT_LT(rel_err(dv, dv0, 0.1), 1e-12);
  // float kernel against the double reference
  auto qf = cast_vec<float>(in.q), kf = cast_vec<float>(in.k), vf = cast_vec<float>(in.v),
       gf = cast_vec<float>(in.dout);
  std::vector<float> of(out.size()), lf(lse.size()), dqf(dq.size()), dkf(dk.size()),
      dvf(dv.size());
  cpu::attention_forward(of.data(), lf.data(), qf.data(), kf.data(), vf.data(), s);
  cpu::attention_backward(dqf.data(), dkf.data(), dvf.data(), gf.data(), qf.data(), kf.data(),
                          vf.data(), of.data(), lf.data(), s);
  EXPECT_LT(rel_err(cast_vec<double>(of), out0), 1e-5);
  EXPECT_LT(rel_err(cast_vec<double>(dqf), dq0, 0.1), 1e-5);
  EXPECT_LT(rel_err(cast_vec<double>(dkf), dk0, 0.1), 1e-5);
  EXPECT_LT(rel_err(cast_vec<double>(dvf), dv0, 0.1), 1e-5);
}

TEST(KernelAttention, LengthsAroundTheTileSize) {
  static_assert(cpu::kAttnTile == 64, "lengths below are chosen around a tile of 64");
  check_case({{1, 63, 64, 65, 130}, 4, 2, 8}, 11);
  check_case({{200}, 2, 1, 16}, 12);
}

TEST(KernelAttention, GqaRatios) {
  for (int kv : {4, 2, 1}) check_case({{17, 70, 5}, 4, kv, 6}, 20 + kv);
}

TEST(KernelAttention, OneTokenAndManyShortSequences) {
  check_case({{1}, 2, 2, 4}, 31);
  check_case({{1, 1, 1}, 4, 1, 4}, 32);
  std::vector<int> many;
  Rng r(33);
  for (int i = 0; i < 60; ++i) many.push_back(1 + r.below(6));
  check_case({many, 4, 2, 8}, 34);
  check_case({{0, 5, 0, 3}, 2, 1, 4}, 35);  // empty sequences are allowed
}

// The naive backward (and thus the kernel) against finite differences of
// L = sum(dout * out) with respect to q, k and v.
TEST(KernelAttention, BackwardMatchesFiniteDifferences) {
  const Case c{{3, 9, 1}, 4, 2, 4};
  const auto cu = cu_of(c.lens);
  Tensors in = random_inputs(c, cu.back(), 41);
  const auto s = shape_of(c, cu);
  std::vector<double> out(in.q.size()), lse(in.q.size() / c.d);
  auto loss = [&]() {
    cpu::attention_forward(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s);
    return dot(out, in.dout);
  };
  loss();
  std::vector<double> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
  cpu::attention_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(),
                          in.k.data(), in.v.data(), out.data(), lse.data(), s);
  testing::check_fd(loss, in.q, dq, 1e-7, "dq");
  testing::check_fd(loss, in.k, dk, 1e-7, "dk");
  testing::check_fd(loss, in.v, dv, 1e-7, "dv");
}

// Tokens of one sequence must not see another: changing sequence 0 leaves sequence 1's
// output unchanged.
TEST(KernelAttention, NoLeakageAcrossSequences) {
  const Case c{{70, 70}, 2, 1, 8};
  const auto cu = cu_of(c.lens);
  Tensors in = random_inputs(c, cu.back(), 51);
  const auto s = shape_of(c, cu);
  std::vector<double> o1(in.q.size()), o2(in.q.size()), lse(in.q.size() / c.d);
  cpu::attention_forward(o1.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s);
  for (size_t i = 0; i < 70u * c.kv_heads * c.d; ++i) in.k[i] += 1, in.v[i] -= 1;
  cpu::attention_forward(o2.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), s);
  for (size_t i = 70u * c.heads * c.d; i < o1.size(); ++i) ASSERT_EQ(o1[i], o2[i]);
}

}  // namespace
}  // namespace flexsp

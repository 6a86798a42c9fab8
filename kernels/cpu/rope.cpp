// Rotary position embedding, HF "rotate half" form, in place on [tokens, heads, head_dim].
// Positions are given per token (they restart at 0 in every packed sequence and are
// offset on sequence-parallel shards), so the angles cannot come from the row index.
// The frequencies come as a table (lib/model/rope.h: theta and HF's rope scaling), the
// one the CUDA twin reads too. Angles and their sines/cosines are computed in double
// once per token and shared by all heads; the backward is the same rotation by the
// opposite angle (its transpose).
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace flexsp::cpu {
namespace {

template <class T>
void rope_apply(T* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                const double* inv_freq, double sign) {
  const int half = head_dim / 2;
#pragma omp parallel if (n * heads * head_dim > 65536)
  {
    std::vector<T> cs(2 * half);  // cos then sin, per token
#pragma omp for schedule(static)
    for (int64_t t = 0; t < n; ++t) {
      for (int i = 0; i < half; ++i) {
        const double a = static_cast<double>(pos[t]) * inv_freq[i];
        cs[i] = static_cast<T>(std::cos(a));
        cs[half + i] = static_cast<T>(sign * std::sin(a));
      }
      for (int h = 0; h < heads; ++h) {
        T* r = x + (t * heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const T x1 = r[i], x2 = r[half + i], c = cs[i], s = cs[half + i];
          r[i] = x1 * c - x2 * s;
          r[half + i] = x2 * c + x1 * s;
        }
      }
    }
  }
}

}  // namespace

template <class T>
void rope_forward(T* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                  const double* inv_freq) {
  rope_apply(x, pos, n, heads, head_dim, inv_freq, 1.0);
}

template <class T>
void rope_backward(T* dx, const int32_t* pos, int64_t n, int heads, int head_dim,
                   const double* inv_freq) {
  rope_apply(dx, pos, n, heads, head_dim, inv_freq, -1.0);
}

std::vector<double> rope_default_inv_freq(int head_dim, double theta) {
  std::vector<double> f(static_cast<size_t>(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i)
    f[i] = 1.0 / std::pow(theta, 2.0 * i / static_cast<double>(head_dim));
  return f;
}

template void rope_forward<float>(float*, const int32_t*, int64_t, int, int, const double*);
template void rope_forward<double>(double*, const int32_t*, int64_t, int, int, const double*);
template void rope_backward<float>(float*, const int32_t*, int64_t, int, int, const double*);
template void rope_backward<double>(double*, const int32_t*, int64_t, int, int, const double*);

}  // namespace flexsp::cpu

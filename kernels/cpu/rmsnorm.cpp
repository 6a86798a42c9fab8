// RMSNorm (HF LlamaRMSNorm): out = w * (x * rstd), rstd = 1/sqrt(mean(x^2) + eps).
// Row statistics accumulate in double. The forward saves rstd per token so the backward
// needs no second reduction over x. The weight gradient is a reduction over tokens: each
// thread owns a block of columns and walks the tokens in order (thread-count independent).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace flexsp::cpu {

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t n, int64_t dim,
                     double eps) {
#pragma omp parallel for schedule(static) if (n * dim > 65536)
  for (int64_t t = 0; t < n; ++t) {
    const T* xr = x + t * dim;
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const T r = static_cast<T>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    rstd[t] = r;
    T* o = out + t * dim;
    for (int64_t j = 0; j < dim; ++j) o[j] = w[j] * (xr[j] * r);
  }
}

template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* w, const T* rstd,
                      int64_t n, int64_t dim) {
  // dx_j = r * w_j g_j - (r^3 / dim) * x_j * sum_k w_k g_k x_k
#pragma omp parallel for schedule(static) if (n * dim > 65536)
  for (int64_t t = 0; t < n; ++t) {
    const T* xr = x + t * dim;
    const T* g = dout + t * dim;
    double dot = 0;
    for (int64_t j = 0; j < dim; ++j) dot += static_cast<double>(w[j]) * g[j] * xr[j];
    const double r = rstd[t];
    const T c = static_cast<T>(r * r * r * dot / static_cast<double>(dim));
    const T rt = static_cast<T>(r);
    T* d = dx + t * dim;
    for (int64_t j = 0; j < dim; ++j) d[j] += rt * w[j] * g[j] - c * xr[j];
  }
  constexpr int64_t kCols = 32;
  const int64_t blocks = (dim + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (n * dim > 65536)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * kCols, j1 = std::min(dim, j0 + kCols);
    double acc[kCols] = {};
    for (int64_t t = 0; t < n; ++t) {
      const T* xr = x + t * dim;
      const T* g = dout + t * dim;
      const double r = rstd[t];
      for (int64_t j = j0; j < j1; ++j) acc[j - j0] += static_cast<double>(g[j]) * xr[j] * r;
    }
    for (int64_t j = j0; j < j1; ++j) dw[j] += static_cast<T>(acc[j - j0]);
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t,
                                     int64_t, double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t,
                                      int64_t, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int64_t, int64_t);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int64_t, int64_t);

}  // namespace flexsp::cpu

// Reductions and vector ops over flat buffers (gradient norm, loss sums, scaling).
// Sums accumulate in double: a gradient norm over a billion fp32 values stays exact to
// fp32 precision. OpenMP reductions make the summation order depend on the thread count;
// that is fine for a norm (used as a scalar) and is documented in cpu_kernels.h.
#include "kernels/cpu/cpu_kernels.h"

namespace flexsp::cpu {

double sum(const float* x, int64_t n) {
  double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

double sum_squares(const float* x, int64_t n) {
  double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

void scale(float* x, int64_t n, float alpha) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void axpy(float* y, const float* x, int64_t n, float alpha) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace flexsp::cpu

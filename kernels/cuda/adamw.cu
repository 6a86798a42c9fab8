// AdamW on the GPU, one fused pass over p, g, m, v. Twin: kernels/cpu/adamw.cpp.
// The bias corrections are computed on the host in double exactly as the CPU does, so
// the kernel sees the same four float constants; the per-element arithmetic follows the
// CPU's expression order (IEEE sqrtf and division: no fast math).
// adamw_update_ranges is the multi-tensor form: up to kAdamWRangesPerLaunch ranges (each
// with its own weight decay) per launch, passed by value as a kernel parameter (1.5 KB),
// blockIdx.y picking the range, so an optimizer step over a model's ~4 ranges per layer
// is a few launches instead of hundreds. Both kernels share the per-element update.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {
namespace {

// The update constants every element shares (bias corrections from the host, in double).
struct Consts {
  float b1, b2, eps, gs, step_size, bc2_sqrt;
};

Consts consts_of(const cpu::AdamWArgs& a) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step));
  return {a.beta1, a.beta2, a.eps, a.grad_scale, static_cast<float>(a.lr / bc1),
          static_cast<float>(std::sqrt(bc2))};
}

__device__ __forceinline__ void adamw_element(float* p, const float* g, float* m, float* v,
                                              int64_t i, const Consts& c, float decay) {
  const float gi = g[i] * c.gs;
  const float mi = c.b1 * m[i] + (1.0f - c.b1) * gi;
  const float vi = c.b2 * v[i] + (1.0f - c.b2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  p[i] = p[i] * decay - c.step_size * mi / (sqrtf(vi) / c.bc2_sqrt + c.eps);
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n,
                             Consts c, float decay) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    adamw_element(p, g, m, v, i, c, decay);
}

struct RangeTable {
  int64_t begin[kAdamWRangesPerLaunch], end[kAdamWRangesPerLaunch];
  float decay[kAdamWRangesPerLaunch];
};

__global__ void adamw_ranges_kernel(float* p, const float* g, float* m, float* v, RangeTable t,
                                    Consts c) {
  const int r = blockIdx.y;
  const int64_t end = t.end[r];
  const float decay = t.decay[r];
  for (int64_t i = t.begin[r] + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < end;
       i += int64_t(gridDim.x) * blockDim.x)
    adamw_element(p, g, m, v, i, c, decay);
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                  const cpu::AdamWArgs& a, cudaStream_t stream) {
  if (n <= 0) return;
  adamw_kernel<<<grid_for(n, 256), 256, 0, stream>>>(p, g, m, v, n, consts_of(a),
                                                     1.0f - a.lr * a.weight_decay);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void adamw_update_ranges(float* p, const float* g, float* m, float* v,
                         const cpu::AdamWRange* ranges, int count, const cpu::AdamWArgs& a,
                         cudaStream_t stream) {
  const Consts c = consts_of(a);
  for (int first = 0; first < count; first += kAdamWRangesPerLaunch) {
    const int n = count - first < kAdamWRangesPerLaunch ? count - first : kAdamWRangesPerLaunch;
    RangeTable t{};
    int64_t longest = 0;
    for (int r = 0; r < n; ++r) {
      const cpu::AdamWRange& x = ranges[first + r];
      t.begin[r] = x.begin;
      t.end[r] = x.end;
      t.decay[r] = 1.0f - a.lr * x.weight_decay;
      if (x.end - x.begin > longest) longest = x.end - x.begin;
    }
    if (longest <= 0) continue;
    // Blocks per range for the longest one, at most 16K blocks in all (short ranges' extra
    // blocks exit at once; the grid-stride loop covers long ones); gridDim.y = ranges.
    const int per_range = std::min(grid_for(longest, 256), std::max(1, 16384 / n));
    const dim3 grid(static_cast<unsigned>(per_range), static_cast<unsigned>(n));
    adamw_ranges_kernel<<<grid, 256, 0, stream>>>(p, g, m, v, t, c);
    FLEXSP_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace flexsp::cuda

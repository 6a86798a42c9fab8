// AdamW on the GPU, one fused pass over p, g, m, v. Twin: kernels/cpu/adamw.cpp.
// The bias corrections are computed on the host in double exactly as the CPU does, so
// the kernel sees the same four float constants; the per-element arithmetic follows the
// CPU's expression order (IEEE sqrtf and division: no fast math).
// Later: a multi-tensor version (one launch for all parameter ranges) and bf16 params.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {
namespace {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t n,
                             float b1, float b2, float eps, float gs, float step_size,
                             float bc2_sqrt, float decay) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                  const cpu::AdamWArgs& a, cudaStream_t stream) {
  if (n <= 0) return;
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step));
  const float step_size = static_cast<float>(a.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.0f - a.lr * a.weight_decay;
  adamw_kernel<<<grid_for(n, 256), 256, 0, stream>>>(p, g, m, v, n, a.beta1, a.beta2, a.eps,
                                                     a.grad_scale, step_size, bc2_sqrt, decay);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flexsp::cuda

// SwiGLU on the GPU: out = silu(gate) * up. Twin: kernels/cpu/swiglu.cpp.
// Element-wise grid-stride loops with the CPU's exact expression order; expf (not the
// fast-math __expf) so fp32 results stay within a few ulp of the CPU. In backward dgate
// may alias dout: each thread reads its element before writing it.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {
namespace {

__global__ void swiglu_forward_kernel(float* out, const float* gate, const float* up,
                                      int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dout,
                                       const float* gate, const float* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i], u = up[i], d = dout[i];
    const float s = 1.0f / (1.0f + expf(-g));
    dup[i] = d * g * s;
    dgate[i] = d * u * s * (1.0f + g * (1.0f - s));
  }
}

}  // namespace

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n,
                    cudaStream_t stream) {
  if (n <= 0) return;
  swiglu_forward_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, gate, up, n);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  swiglu_backward_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dgate, dup, dout, gate, up, n);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flexsp::cuda

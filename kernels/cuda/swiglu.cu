// SwiGLU on the GPU: out = silu(gate) * up. Twin: kernels/cpu/swiglu.cpp.
// Element-wise grid-stride loops with the CPU's exact expression order; expf (not the
// fast-math __expf) so fp32 results stay within a few ulp of the CPU. In backward dgate
// may alias dout: each thread reads its element before writing it.
// Mixed precision: every operand is an activation (T), read widened and written rounded
// once (act_io.cuh).
#include "kernels/cuda/act_io.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {
namespace {

template <class T>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = load(gate + i);
    store(out + i, g / (1.0f + expf(-g)) * load(up + i));
  }
}

template <class T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate,
                                       const T* up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = load(gate + i), u = load(up + i), d = load(dout + i);
    const float s = 1.0f / (1.0f + expf(-g));
    store(dup + i, d * g * s);
    store(dgate + i, d * u * s * (1.0f + g * (1.0f - s)));
  }
}

}  // namespace

void swiglu_forward(void* out, const void* gate, const void* up, int64_t n, DType act,
                    cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_act(act, "swiglu_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    swiglu_forward_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(gate), static_cast<const T*>(up), n);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                     const void* up, int64_t n, DType act, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_act(act, "swiglu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    swiglu_backward_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<T*>(dgate), static_cast<T*>(dup), static_cast<const T*>(dout),
        static_cast<const T*>(gate), static_cast<const T*>(up), n);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flexsp::cuda

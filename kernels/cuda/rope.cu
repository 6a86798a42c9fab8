// Rotary position embedding on the GPU, HF "rotate half", in place on
// [tokens, heads, head_dim]. Twin: kernels/cpu/rope.cpp.
// One thread per (token, frequency i): it computes the angle pos * inv_freq[i] and its
// cosine and sine in double, exactly as the CPU does (fp64 is cheap enough on data-center
// GPUs for n * head_dim / 2 angles), rounds them to float, and rotates the pair
// (i, i + head_dim/2) of every head. inv_freq is the host-computed table of
// lib/model/rope.h (theta and HF's RoPE scaling) copied to the device once per model, the
// same numbers the CPU reads. The backward is the same rotation with the sine negated
// (sign = -1), as on the CPU.
// Mixed precision: x is an activation (T); each pair is read widened, rotated in fp32
// and rounded once on store (act_io.cuh), the CPU emulation's widen-rotate-round.
#include "kernels/cuda/act_io.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {
namespace {

template <class T>
__global__ void rope_kernel(T* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                            const double* inv_freq, double sign) {
  const int half = head_dim / 2;
  const int64_t total = n * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / half;
    const int i = static_cast<int>(idx - t * half);
    const double a = static_cast<double>(pos[t]) * inv_freq[i];
    const float c = static_cast<float>(cos(a));
    const float s = static_cast<float>(sign * sin(a));
    for (int h = 0; h < heads; ++h) {
      T* r = x + (t * heads + h) * head_dim;
      const float x1 = load(r + i), x2 = load(r + half + i);
      store(r + i, x1 * c - x2 * s);
      store(r + half + i, x2 * c + x1 * s);
    }
  }
}

}  // namespace

void rope_apply(void* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                const double* inv_freq, double sign, DType act, cudaStream_t stream) {
  const int64_t total = n * (head_dim / 2);
  if (total <= 0 || heads <= 0) return;
  dispatch_act(act, "rope", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<T><<<grid_for(total, 256), 256, 0, stream>>>(static_cast<T*>(x), pos, n, heads,
                                                             head_dim, inv_freq, sign);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flexsp::cuda

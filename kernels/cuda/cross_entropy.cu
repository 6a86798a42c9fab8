// Softmax cross-entropy on the GPU, one row per token. Twin: kernels/cpu/cross_entropy.cpp.
// Forward: one block per row; the row max in float, then the sum of expf(z - max) in
// double (as the CPU: float exponentials accumulated in double), fixed-order tree
// reductions; lse = max + log(sum); loss = lse - z[target], 0 for ignored rows (-1).
// Backward: element-wise over [n, vocab] (grid rows x column blocks), in place allowed
// (dlogits may alias logits: each element is read, then written by the same thread);
// the target element gets sc*p - sc exactly as the CPU's two steps.
// Mixed precision: logits and dlogits are activations (T), read widened, every sum and
// exponential in fp32/double, each dlogit rounded once on store (act_io.cuh); lse and
// loss stay fp32. In place is still safe: a thread reads its element fully before
// writing it, and no other thread touches that element.
// Later: fuse with the lm_head GEMM over vocab chunks.
#include <cfloat>

#include "kernels/cuda/act_io.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void ce_forward_kernel(float* loss, float* lse, const T* logits,
                                  const int32_t* targets, int64_t vocab) {
  __shared__ float smax[kThreads];
  __shared__ double ssum[kThreads];
  const int64_t t = blockIdx.x;
  const T* z = logits + t * vocab;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float zj = load(z + j);
    mx = zj > mx ? zj : mx;
  }
  smax[threadIdx.x] = mx;
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    __syncthreads();
    if (threadIdx.x < w) {
      const float o = smax[threadIdx.x + w];
      smax[threadIdx.x] = o > smax[threadIdx.x] ? o : smax[threadIdx.x];
    }
  }
  __syncthreads();
  mx = smax[0];
  double s = 0;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) s += expf(load(z + j) - mx);
  ssum[threadIdx.x] = s;
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    __syncthreads();
    if (threadIdx.x < w) ssum[threadIdx.x] += ssum[threadIdx.x + w];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const double l = static_cast<double>(mx) + log(ssum[0]);
    lse[t] = static_cast<float>(l);
    const int32_t tg = targets[t];
    loss[t] = tg < 0 ? 0.0f : static_cast<float>(l - static_cast<double>(load(z + tg)));
  }
}

// grid (rows, column blocks).
template <class T>
__global__ void ce_backward_kernel(T* dlogits, const T* logits, const float* lse,
                                   const int32_t* targets, int64_t vocab, float sc) {
  const int64_t t = blockIdx.x;
  const int32_t tg = targets[t];
  const float l = lse[t];
  const T* z = logits + t * vocab;
  T* d = dlogits + t * vocab;
  for (int64_t j = blockIdx.y * int64_t(blockDim.x) + threadIdx.x; j < vocab;
       j += int64_t(gridDim.y) * blockDim.x) {
    if (tg < 0) {
      store(d + j, 0.0f);
      continue;
    }
    float v = sc * expf(load(z + j) - l);
    if (j == tg) v -= sc;
    store(d + j, v);
  }
}

}  // namespace

void cross_entropy_forward(float* loss, float* lse, const void* logits,
                           const int32_t* targets, int64_t n, int64_t vocab, DType act,
                           cudaStream_t stream) {
  if (n <= 0) return;
  FLEXSP_CHECK(n <= 0x7fffffff, "cross_entropy_forward: {} rows exceed the grid", n);
  dispatch_act(act, "cross_entropy_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ce_forward_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
        loss, lse, static_cast<const T*>(logits), targets, vocab);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_backward(void* dlogits, const void* logits, const float* lse,
                            const int32_t* targets, int64_t n, int64_t vocab, double scale,
                            DType act, cudaStream_t stream) {
  if (n <= 0 || vocab <= 0) return;
  FLEXSP_CHECK(n <= 0x7fffffff, "cross_entropy_backward: {} rows exceed the grid", n);
  int64_t cols = (vocab + kThreads - 1) / kThreads;
  if (cols > 64) cols = 64;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(cols));
  dispatch_act(act, "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ce_backward_kernel<T><<<grid, kThreads, 0, stream>>>(
        static_cast<T*>(dlogits), static_cast<const T*>(logits), lse, targets, vocab,
        static_cast<float>(scale));
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flexsp::cuda

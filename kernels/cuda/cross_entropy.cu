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
// Shard forms (tensor parallelism, vocabulary split over ranks): stats per row of a shard,
// the loss from all shards' stats, the shard's gradient; the same reductions in the same
// precisions as the whole-row kernels, and as their CPU twins.
// Later: fuse with the lm_head GEMM over vocab chunks.
#include <cfloat>

#include "kernels/cuda/act_io.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {
namespace {

constexpr int kThreads = 256;

// A row's max (float) and sum of expf(z - max) (double) over its first n columns, by the
// whole block in fixed-order tree reductions; every thread gets both. Called by every
// thread of the block (it synchronises).
template <class T>
__device__ void row_max_sumexp(const T* z, int64_t n, float* mx_out, double* sum_out) {
  __shared__ float smax[kThreads];
  __shared__ double ssum[kThreads];
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
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
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(load(z + j) - mx);
  ssum[threadIdx.x] = s;
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    __syncthreads();
    if (threadIdx.x < w) ssum[threadIdx.x] += ssum[threadIdx.x + w];
  }
  __syncthreads();
  *mx_out = mx;
  *sum_out = ssum[0];
}

template <class T>
__global__ void ce_forward_kernel(float* loss, float* lse, const T* logits,
                                  const int32_t* targets, int64_t vocab) {
  const int64_t t = blockIdx.x;
  const T* z = logits + t * vocab;
  float mx;
  double sum;
  row_max_sumexp(z, vocab, &mx, &sum);
  if (threadIdx.x == 0) {
    const double l = static_cast<double>(mx) + log(sum);
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

// Shard stats: one block per row over the `valid` columns; the same reductions as the
// forward kernel, then (max, sum, target logit).
template <class T>
__global__ void ce_shard_stats_kernel(float* stats, const T* logits, const int32_t* targets,
                                      int64_t vocab, int64_t valid) {
  const int64_t t = blockIdx.x;
  const T* z = logits + t * vocab;
  float mx;
  double sum;
  row_max_sumexp(z, valid, &mx, &sum);
  if (threadIdx.x == 0) {
    const int32_t tg = targets[t];
    stats[t * 3] = mx;
    stats[t * 3 + 1] = static_cast<float>(sum);
    stats[t * 3 + 2] = tg >= 0 && tg < valid ? load(z + tg) : 0.0f;
  }
}

// One thread per row: combine the parts' stats in part order (as the CPU).
__global__ void ce_shard_loss_kernel(float* loss, float* lse, const float* stats, int parts,
                                     const int32_t* targets, int64_t n) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
       t += int64_t(gridDim.x) * blockDim.x) {
    float mx = -INFINITY;
    for (int r = 0; r < parts; ++r) {
      const float m = stats[(r * n + t) * 3];
      mx = m > mx ? m : mx;
    }
    double s = 0, zt = 0;
    for (int r = 0; r < parts; ++r) {
      const float* st = stats + (r * n + t) * 3;
      if (st[1] > 0) s += static_cast<double>(st[1]) * exp(static_cast<double>(st[0]) - mx);
      zt += st[2];
    }
    const double l = static_cast<double>(mx) + log(s);
    lse[t] = static_cast<float>(l);
    loss[t] = targets[t] < 0 ? 0.0f : static_cast<float>(l - zt);
  }
}

// grid (rows, column blocks), as ce_backward_kernel; padding columns get 0.
template <class T>
__global__ void ce_shard_backward_kernel(T* dlogits, const T* logits, const float* lse,
                                         const int32_t* targets, int64_t vocab, int64_t valid,
                                         float sc) {
  const int64_t t = blockIdx.x;
  const int32_t tg = targets[t];
  const float l = lse[t];
  const T* z = logits + t * vocab;
  T* d = dlogits + t * vocab;
  for (int64_t j = blockIdx.y * int64_t(blockDim.x) + threadIdx.x; j < vocab;
       j += int64_t(gridDim.y) * blockDim.x) {
    if (tg < 0 || j >= valid) {
      store(d + j, 0.0f);
      continue;
    }
    float v = sc * expf(load(z + j) - l);
    if (j == tg) v -= sc;
    store(d + j, v);
  }
}

dim3 backward_grid(int64_t n, int64_t vocab) {
  int64_t cols = (vocab + kThreads - 1) / kThreads;
  if (cols > 64) cols = 64;
  return dim3(static_cast<unsigned>(n), static_cast<unsigned>(cols));
}

}  // namespace

void cross_entropy_shard_stats(float* stats, const void* logits, const int32_t* targets,
                               int64_t n, int64_t vocab, int64_t valid, DType act,
                               cudaStream_t stream) {
  if (n <= 0) return;
  FLEXSP_CHECK(n <= 0x7fffffff, "cross_entropy_shard_stats: {} rows exceed the grid", n);
  dispatch_act(act, "cross_entropy_shard_stats", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ce_shard_stats_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
        stats, static_cast<const T*>(logits), targets, vocab, valid);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_shard_loss(float* loss, float* lse, const float* stats, int parts,
                              const int32_t* targets, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  ce_shard_loss_kernel<<<grid_for(n, 256), 256, 0, stream>>>(loss, lse, stats, parts, targets, n);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_shard_backward(void* dlogits, const void* logits, const float* lse,
                                  const int32_t* targets, int64_t n, int64_t vocab,
                                  int64_t valid, double scale, DType act, cudaStream_t stream) {
  if (n <= 0 || vocab <= 0) return;
  FLEXSP_CHECK(n <= 0x7fffffff, "cross_entropy_shard_backward: {} rows exceed the grid", n);
  dispatch_act(act, "cross_entropy_shard_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ce_shard_backward_kernel<T><<<backward_grid(n, vocab), kThreads, 0, stream>>>(
        static_cast<T*>(dlogits), static_cast<const T*>(logits), lse, targets, vocab, valid,
        static_cast<float>(scale));
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

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
  const dim3 grid = backward_grid(n, vocab);
  dispatch_act(act, "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ce_backward_kernel<T><<<grid, kThreads, 0, stream>>>(
        static_cast<T*>(dlogits), static_cast<const T*>(logits), lse, targets, vocab,
        static_cast<float>(scale));
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flexsp::cuda

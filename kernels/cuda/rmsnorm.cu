// RMSNorm on the GPU (HF LlamaRMSNorm). Twin: kernels/cpu/rmsnorm.cpp.
// Forward and the dx part of backward: one block per row, the row statistic accumulated
// in double (as the CPU does) with a fixed-order tree reduction, then an element-wise pass
// in float with the CPU's expression order. dx ACCUMULATES (dx +=), like the CPU twin.
// dw (a reduction over tokens) is deterministic without atomics: pass 1 gives each block
// 32 columns and a fixed chunk of rows and writes per-chunk partial sums (double) to
// scratch; pass 2 adds the chunks in order and accumulates into dw (dw +=).
// Mixed precision: x, w, out, dout and dx are activations (T, bf16 or float), read
// widened to float and written rounded once (act_io.cuh); rstd and dw stay fp32. The
// accumulating dx reads its bf16 value, adds in fp32 and rounds once, like the CPU
// emulation.
#include "kernels/cuda/act_io.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {
namespace {

constexpr int kRowThreads = 128;
constexpr int kCols = 32;          // dw pass 1: columns per block (one warp wide)
constexpr int kRowsPerThread = 8;  // dw pass 1: blockDim.y
constexpr int kChunkRows = 256;    // dw pass 1: rows per chunk

__device__ double block_sum(double v, double* s) {
  s[threadIdx.x] = v;
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    __syncthreads();
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
  }
  __syncthreads();
  const double r = s[0];
  __syncthreads();  // s may be reused by the caller
  return r;
}

template <class T>
__global__ void rmsnorm_forward_kernel(T* out, float* rstd, const T* x, const T* w, int64_t dim,
                                       double eps) {
  __shared__ double s[kRowThreads];
  const int64_t t = blockIdx.x;
  const T* xr = x + t * dim;
  double ss = 0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    const double xv = load(xr + j);
    ss += xv * xv;
  }
  ss = block_sum(ss, s);
  const float r = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(dim) + eps));
  if (threadIdx.x == 0) rstd[t] = r;
  T* o = out + t * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    store(o + j, load(w + j) * (load(xr + j) * r));
}

template <class T>
__global__ void rmsnorm_dx_kernel(T* dx, const T* dout, const T* x, const T* w,
                                  const float* rstd, int64_t dim) {
  __shared__ double s[kRowThreads];
  const int64_t t = blockIdx.x;
  const T* xr = x + t * dim;
  const T* g = dout + t * dim;
  double dot = 0;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
    dot += static_cast<double>(load(w + j)) * load(g + j) * load(xr + j);
  dot = block_sum(dot, s);
  const double r = rstd[t];
  const float c = static_cast<float>(r * r * r * dot / static_cast<double>(dim));
  const float rt = static_cast<float>(r);
  T* d = dx + t * dim;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    float v = load(d + j);
    v += rt * load(w + j) * load(g + j) - c * load(xr + j);
    store(d + j, v);
  }
}

// grid (column blocks, chunks), block (kCols, kRowsPerThread).
template <class T>
__global__ void rmsnorm_dw_partial(double* partial, const T* dout, const T* x,
                                   const float* rstd, int64_t n, int64_t dim) {
  __shared__ double s[kRowsPerThread][kCols];
  const int64_t j = blockIdx.x * int64_t(kCols) + threadIdx.x;
  const int64_t t0 = blockIdx.y * int64_t(kChunkRows);
  const int64_t t1 = t0 + kChunkRows < n ? t0 + kChunkRows : n;
  double acc = 0;
  if (j < dim)
    for (int64_t t = t0 + threadIdx.y; t < t1; t += kRowsPerThread)
      acc += static_cast<double>(load(dout + t * dim + j)) * load(x + t * dim + j) *
             static_cast<double>(rstd[t]);
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < dim) {
    double a = 0;
    for (int r = 0; r < kRowsPerThread; ++r) a += s[r][threadIdx.x];
    partial[blockIdx.y * dim + j] = a;
  }
}

__global__ void rmsnorm_dw_final(float* dw, const double* partial, int chunks, int64_t dim) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < dim;
       j += int64_t(gridDim.x) * blockDim.x) {
    double a = 0;
    for (int c = 0; c < chunks; ++c) a += partial[c * dim + j];
    dw[j] += static_cast<float>(a);
  }
}

}  // namespace

void rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int64_t n,
                     int64_t dim, double eps, DType act, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  FLEXSP_CHECK(n <= 0x7fffffff, "rmsnorm_forward: {} rows exceed the grid", n);
  dispatch_act(act, "rmsnorm_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rmsnorm_forward_kernel<T><<<static_cast<unsigned>(n), kRowThreads, 0, stream>>>(
        static_cast<T*>(out), rstd, static_cast<const T*>(x), static_cast<const T*>(w), dim,
        eps);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x, const void* w,
                      const float* rstd, int64_t n, int64_t dim, DType act, Scratch& scratch,
                      cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  FLEXSP_CHECK(n <= 0x7fffffff, "rmsnorm_backward: {} rows exceed the grid", n);
  const int64_t chunks = (n + kChunkRows - 1) / kChunkRows;
  FLEXSP_CHECK(chunks <= 65535, "rmsnorm_backward: {} rows exceed the dw grid", n);
  dispatch_act(act, "rmsnorm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = static_cast<const T*>(dout);
    const T* xt = static_cast<const T*>(x);
    rmsnorm_dx_kernel<T><<<static_cast<unsigned>(n), kRowThreads, 0, stream>>>(
        static_cast<T*>(dx), g, xt, static_cast<const T*>(w), rstd, dim);
    FLEXSP_CUDA_CHECK(cudaGetLastError());
    auto* partial = static_cast<double*>(scratch.acquire(chunks * dim * sizeof(double)));
    const dim3 grid(static_cast<unsigned>((dim + kCols - 1) / kCols),
                    static_cast<unsigned>(chunks));
    rmsnorm_dw_partial<T><<<grid, dim3(kCols, kRowsPerThread), 0, stream>>>(partial, g, xt,
                                                                            rstd, n, dim);
    FLEXSP_CUDA_CHECK(cudaGetLastError());
    rmsnorm_dw_final<<<grid_for(dim, 256), 256, 0, stream>>>(dw, partial,
                                                             static_cast<int>(chunks), dim);
    FLEXSP_CUDA_CHECK(cudaGetLastError());
    scratch.release(partial);
  });
}

}  // namespace flexsp::cuda

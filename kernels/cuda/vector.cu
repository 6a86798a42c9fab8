// Reductions and vector ops on the GPU. Twin: kernels/cpu/vector.cpp.
// sum / sum_squares accumulate in double and are deterministic: a fixed grid that depends
// only on n (not on the device) writes one partial per block (pass 1: grid-stride loop,
// then a block tree reduction in a fixed order), and one block adds the partials in a
// fixed order (pass 2). No atomics, so the same input gives the same bits on every run
// and every GPU. The result goes to the host, so these two synchronize the stream.
// scale / axpy are plain grid-stride loops. Mixed precision adds two more on activations
// (act_io.cuh): axpy_act and add_f32 (fp32 arithmetic, y rounded once) and cast between f32 and
// bf16 (round to nearest even one way, exact the other; equal types are a plain copy).
#include "kernels/cuda/act_io.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {

int grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  // Enough blocks to fill any current GPU several times over; loops stride beyond that.
  return static_cast<int>(blocks < 8192 ? (blocks < 1 ? 1 : blocks) : 8192);
}

namespace {

constexpr int kSumThreads = 256;
constexpr int kSumMaxBlocks = 1024;

// Tree reduction of one double per thread in shared memory; the result is in s[0].
__device__ void block_reduce(double* s) {
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    __syncthreads();
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
  }
  __syncthreads();
}

__global__ void sum_pass1(const float* x, int64_t n, bool squares, double* partial) {
  __shared__ double s[kSumThreads];
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double v = x[i];
    acc += squares ? v * v : v;
  }
  s[threadIdx.x] = acc;
  block_reduce(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

__global__ void sum_pass2(const double* partial, int count, double* result) {
  __shared__ double s[kSumThreads];
  double acc = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  s[threadIdx.x] = acc;
  block_reduce(s);
  if (threadIdx.x == 0) *result = s[0];
}

__global__ void scale_kernel(float* x, int64_t n, float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= alpha;
}

__global__ void axpy_kernel(float* y, const float* x, int64_t n, float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] += alpha * x[i];
}

template <class T>
__global__ void axpy_act_kernel(T* y, const T* x, int64_t n, float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store(y + i, load(y + i) + alpha * load(x + i));
}

template <class T>
__global__ void add_f32_kernel(T* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store(y + i, load(y + i) + x[i]);
}

template <class D, class S>
__global__ void cast_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store(dst + i, load(src + i));
}

}  // namespace

void sum(const float* x, int64_t n, bool squares, double* result_host, Scratch& scratch,
         cudaStream_t stream) {
  if (n <= 0) {
    *result_host = 0;
    return;
  }
  int64_t blocks = (n + kSumThreads * 8 - 1) / (kSumThreads * 8);  // >= 8 elements a thread
  if (blocks > kSumMaxBlocks) blocks = kSumMaxBlocks;
  auto* partial = static_cast<double*>(scratch.acquire((blocks + 1) * sizeof(double)));
  sum_pass1<<<static_cast<int>(blocks), kSumThreads, 0, stream>>>(x, n, squares, partial);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
  sum_pass2<<<1, kSumThreads, 0, stream>>>(partial, static_cast<int>(blocks), partial + blocks);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
  FLEXSP_CUDA_CHECK(cudaMemcpyAsync(result_host, partial + blocks, sizeof(double),
                                    cudaMemcpyDeviceToHost, stream));
  FLEXSP_CUDA_CHECK(cudaStreamSynchronize(stream));
  scratch.release(partial);
}

void scale(float* x, int64_t n, float alpha, cudaStream_t stream) {
  if (n <= 0) return;
  scale_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, n, alpha);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void axpy(float* y, const float* x, int64_t n, float alpha, cudaStream_t stream) {
  if (n <= 0) return;
  axpy_kernel<<<grid_for(n, 256), 256, 0, stream>>>(y, x, n, alpha);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void axpy_act(void* y, const void* x, int64_t n, float alpha, DType act, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_act(act, "axpy_act", [&](auto tag) {
    using T = typename decltype(tag)::type;
    axpy_act_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(
        static_cast<T*>(y), static_cast<const T*>(x), n, alpha);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void add_f32(void* y, const float* x, int64_t n, DType act, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_act(act, "add_f32", [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_f32_kernel<T><<<grid_for(n, 256), 256, 0, stream>>>(static_cast<T*>(y), x, n);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n,
          cudaStream_t stream) {
  const auto ok = [](DType t) { return t == DType::f32 || t == DType::bf16; };
  FLEXSP_CHECK(ok(dst_type) && ok(src_type), "cast: {} -> {} is not supported (f32 and bf16 only)",
               dtype_name(src_type), dtype_name(dst_type));
  if (n <= 0) return;
  if (dst_type == src_type) {
    if (dst != src)
      FLEXSP_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dst_type),
                                        cudaMemcpyDeviceToDevice, stream));
    return;
  }
  FLEXSP_CHECK(dst != src, "cast: {} -> {} cannot run in place", dtype_name(src_type),
               dtype_name(dst_type));
  if (dst_type == DType::bf16)  // from f32
    cast_kernel<<<grid_for(n, 256), 256, 0, stream>>>(static_cast<__nv_bfloat16*>(dst),
                                                      static_cast<const float*>(src), n);
  else  // f32 from bf16
    cast_kernel<<<grid_for(n, 256), 256, 0, stream>>>(static_cast<float*>(dst),
                                                      static_cast<const __nv_bfloat16*>(src), n);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flexsp::cuda

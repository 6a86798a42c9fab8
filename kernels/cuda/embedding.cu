// Token embedding on the GPU. Twin: kernels/cpu/embedding.cpp.
// Forward: a row gather, one grid-stride loop over all n*dim outputs (coalesced along dim);
// the table is the activation-type copy of the weights (bf16 in mixed precision), so a
// bf16 gather is an exact copy. Backward: a scatter-add into the fp32 weight gradient with
// float atomics (dout widened from the activation type), so repeated ids need no sort. The
// order in which repeated rows are added is not fixed (the CPU adds them in token order):
// results differ from the CPU by rounding only, and are not bit-reproducible run to run.
// A deterministic version (sort ids, segment-sum) is a later step if it is ever needed.
// Negative ids (rows another tensor-parallel rank holds) give zero rows and no gradient.
#include "kernels/cuda/act_io.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {
namespace {

template <class T>
__global__ void embedding_forward_kernel(T* out, const T* table, const int32_t* ids,
                                         int64_t total, int64_t dim) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / dim, j = i - t * dim;
    out[i] = ids[t] < 0 ? T(0.0f) : table[int64_t(ids[t]) * dim + j];
  }
}

template <class T>
__global__ void embedding_backward_kernel(float* dtable, const T* dout, const int32_t* ids,
                                          int64_t total, int64_t dim) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / dim, j = i - t * dim;
    if (ids[t] >= 0) atomicAdd(dtable + int64_t(ids[t]) * dim + j, load(dout + i));
  }
}

}  // namespace

void embedding_forward(void* out, const void* table, const int32_t* ids, int64_t n,
                       int64_t dim, DType act, cudaStream_t stream) {
  const int64_t total = n * dim;
  if (total <= 0) return;
  dispatch_act(act, "embedding_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_forward_kernel<T><<<grid_for(total, 256), 256, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(table), ids, total, dim);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void embedding_backward(float* dtable, const void* dout, const int32_t* ids, int64_t n,
                        int64_t dim, DType act, cudaStream_t stream) {
  const int64_t total = n * dim;
  if (total <= 0) return;
  dispatch_act(act, "embedding_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_backward_kernel<T><<<grid_for(total, 256), 256, 0, stream>>>(
        dtable, static_cast<const T*>(dout), ids, total, dim);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flexsp::cuda

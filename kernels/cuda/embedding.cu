// Token embedding on the GPU. Twin: kernels/cpu/embedding.cpp.
// Forward: a row gather, one grid-stride loop over all n*dim outputs (coalesced along dim).
// Backward: a scatter-add with float atomics, so repeated ids need no sort. The order in
// which repeated rows are added is not fixed (the CPU adds them in token order): results
// differ from the CPU by rounding only, and are not bit-reproducible run to run. A
// deterministic version (sort ids, segment-sum) is a later step if it is ever needed.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {
namespace {

__global__ void embedding_forward_kernel(float* out, const float* table, const int32_t* ids,
                                         int64_t total, int64_t dim) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / dim, j = i - t * dim;
    out[i] = table[int64_t(ids[t]) * dim + j];
  }
}

__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int32_t* ids,
                                          int64_t total, int64_t dim) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / dim, j = i - t * dim;
    atomicAdd(dtable + int64_t(ids[t]) * dim + j, dout[i]);
  }
}

}  // namespace

void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n,
                       int64_t dim, cudaStream_t stream) {
  const int64_t total = n * dim;
  if (total <= 0) return;
  embedding_forward_kernel<<<grid_for(total, 256), 256, 0, stream>>>(out, table, ids, total, dim);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                        int64_t dim, cudaStream_t stream) {
  const int64_t total = n * dim;
  if (total <= 0) return;
  embedding_backward_kernel<<<grid_for(total, 256), 256, 0, stream>>>(dtable, dout, ids, total,
                                                                      dim);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flexsp::cuda

// GEMMs through cuBLASLt, an alternative to the CUDA backend's cublasGemmEx for
// the activation GEMMs (gemm_act). Opt-in while it has not been measured against
// cublasGemmEx on a GPU: train.cuda_gemm = lt or FLEXSP_CUDA_GEMM=lt (make_backend), or
// CudaBackend::use_gemm_lt.
//
// Design choices:
//  - Same contract as gemm_act: row-major C[m, n] = alpha op(A) op(B) + beta C, computed
//    as the column-major C^T = op(B)^T op(A)^T; fp32 accumulation (or TF32 where the
//    caller allows it); a bf16 C is rounded once: split-K partial sums are kept in the
//    compute type (reduction scheme mask NONE | COMPUTE_TYPE), never in bf16.
//  - One plan per (transposes, m, n, k, leading dimensions, types, compute type, each
//    pointer's alignment class up to 256 bytes): the layouts, the descriptor and the
//    algorithm of the first heuristic result, cached. A new shape costs one heuristic
//    query; the cache is cleared when it holds kMaxPlans (token counts vary per step).
//  - One 32 MiB workspace from the backend's pool, held for the instance's life.
//  - A shape without an algorithm returns false and enqueues nothing: the caller runs
//    cublasGemmEx.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {

struct GemmLtArgs {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  cudaDataType ab_type = CUDA_R_16BF, c_type = CUDA_R_16BF;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
};

// The largest power of two (up to 256) that divides p's address: the alignment class a
// plan is chosen for.
int gemm_lt_alignment(const void* p);

class GemmLt {
 public:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;
  static constexpr size_t kMaxPlans = 512;
  // Enqueues on `stream`; the workspace comes from `scratch` (released in the destructor).
  GemmLt(cudaStream_t stream, Scratch& scratch);
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  // false: cuBLASLt has no algorithm for this GEMM (nothing was enqueued).
  bool run(const GemmLtArgs& g);
  size_t plans_built() const;  // heuristic queries so far

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flexsp::cuda

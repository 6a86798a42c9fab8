// The CUDA backend: the Backend interface (lib/backend/backend.h) on one GPU. Built only
// with FLEXSP_HAVE_CUDA; make_backend("cuda"/"auto") creates it (lib/backend/cpu_backend.cpp).
//
// Design choices:
//  - fp32 buffers, as the interface says. GEMMs through cuBLAS (cublasSgemm_64, row-major
//    mapped onto column-major by swapping operands) with TF32 OFF by default, so results
//    match the CPU to fp32 rounding; FLEXSP_CUDA_TF32=1 in the environment (or the
//    constructor flag) allows TF32 tensor cores. bf16 mixed precision (bf16 copies of
//    weights and activations, cuBLASLt with fp32 accumulation and epilogues) is the next
//    step of issue 8 and lives inside the backend, behind the same fp32 interface.
//  - One compute stream; every op is enqueued on it and returns at once. synchronize()
//    waits on it; copy_to_host, sum and sum_squares return results and so synchronize;
//    copy_from_host synchronizes too (the host buffer may be reused on return). stream()
//    is public: the NCCL communicators (comm_nccl.cpp) order their own stream against it.
//  - alloc_host is page-locked (cudaMallocHost): the MPI staging buffers of
//    lib/comm/comm_staged.h, so those copies run at full PCIe speed.
//  - Memory: a CachingAllocator (caching_allocator.h) owned by this instance, over
//    cudaMalloc/cudaFree. alloc() zero-fills with cudaMemsetAsync on the stream. Kernel
//    scratch (reduction partials, the attention tile map) comes from the same allocator
//    and counts towards the peak.
//  - Kernels: kernels/cuda/*.cu, launchers in cuda_kernels.h, each beside its kernel.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/cuda_kernels.h"
#include "lib/backend/backend.h"

namespace flexsp {

class CudaBackend final : public Backend {
 public:
  // device: CUDA ordinal (made current); allow_tf32: TF32 tensor cores in fp32 GEMMs.
  CudaBackend(int device, bool allow_tf32);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  const cuda::CachingAllocator& allocator() const { return alloc_; }

  void* alloc(size_t bytes) override;
  void free(void* p) override;
  void zero(void* p, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_from_host(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) override;
  void* alloc_host(size_t bytes) override;  // cudaMallocHost
  void free_host(void* p) override;
  void synchronize() override;
  size_t allocated_bytes() const override { return alloc_.allocated_bytes(); }
  size_t peak_allocated_bytes() const override { return alloc_.peak_allocated_bytes(); }

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override;
  double sum(const float* x, int64_t n) override;
  double sum_squares(const float* x, int64_t n) override;
  void scale(float* x, int64_t n, float alpha) override;
  void axpy(float* y, const float* x, int64_t n, float alpha) override;

  void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n,
                         int64_t dim) override;
  void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                          int64_t dim) override;
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t n,
                       int64_t dim, double eps) override;
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                        const float* rstd, int64_t n, int64_t dim) override;
  void rope_forward(float* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                    double theta) override;
  void rope_backward(float* dx, const int32_t* pos, int64_t n, int heads, int head_dim,
                     double theta) override;
  void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) override;
  void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                       const float* up, int64_t n) override;
  void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                         const AttnShape& s) override;
  void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                          const float* k, const float* v, const float* out, const float* lse,
                          const AttnShape& s) override;
  void cross_entropy_forward(float* loss, float* lse, const float* logits,
                             const int32_t* targets, int64_t n, int64_t vocab) override;
  void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                              const int32_t* targets, int64_t n, int64_t vocab,
                              double scale) override;
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                    const AdamWArgs& a) override;

 private:
  // Kernel scratch from the allocator (not zero-filled).
  class ScratchImpl final : public cuda::Scratch {
   public:
    explicit ScratchImpl(CudaBackend& be) : be_(be) {}
    void* acquire(size_t bytes) override;
    void release(void* p) override;

   private:
    CudaBackend& be_;
  };

  void* allocate_or_throw(size_t bytes);

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cuda::CachingAllocator alloc_;
  ScratchImpl scratch_{*this};
  double* host_result_ = nullptr;  // pinned, for sum / sum_squares
};

// A CUDA backend on the current device (cudaGetDevice). TF32 from FLEXSP_CUDA_TF32.
std::unique_ptr<Backend> make_cuda_backend();

}  // namespace flexsp

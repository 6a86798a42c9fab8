// The CUDA backend: the Backend interface (lib/backend/backend.h) on one GPU. Built only
// with FLEXSP_HAVE_CUDA; make_backend (lib/platform/backend_factory.h) creates it.
//
// Design choices:
//  - Mixed precision: the activation type act_dtype() is chosen at construction,
//    bf16 (the default of make_cuda_backend, and of train.precision=auto on a GPU) or f32.
//    fp32 parameters, gradients, optimizer states and statistics are float* either way.
//    Every model op is one kernel template over the activation type (kernels/cuda/
//    act_io.cuh): it widens its inputs, computes in fp32, and rounds each output once,
//    the contract the CPU backend's bf16 emulation follows, so the two agree to a bf16
//    rounding. The fp32 kernels are the same templates at T = float.
//  - GEMMs through cuBLAS, row-major mapped onto column-major by swapping operands. gemm
//    (fp32 buffers: cublasSgemm_64) and gemm_act (activations: cublasGemmEx_64 with A and
//    B of the activation type, C of the activation type or f32, fp32 accumulation) share
//    one handle. TF32 is off by default (train.tf32 = false), so fp32 results match the
//    CPU to fp32 rounding; train.tf32 = true (or FLEXSP_CUDA_TF32=1, which overrides it:
//    lib/backend/backend.h) allows TF32 tensor cores for all-fp32 GEMMs. Reductions inside
//    cuBLAS stay in fp32 even for a bf16 C (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_
//    REDUCTION): a bf16 C is rounded once. train.cuda_gemm = lt sends gemm_act through
//    cuBLASLt instead (gemm_lt.h: cached plans, the same single rounding), opt-in until
//    measured against cublasGemmEx.
//  - Attention (train.cuda_attention): `auto` runs the fastest kernels that take the
//    shape: cuDNN's fused attention (attention_cudnn.h: builds with the cuDNN frontend,
//    bf16, each document its own causal span), else the tensor-core kernels of
//    attention_tc.cu (bf16 WMMA, fp32 accumulation) for head_dim 64 or 128 on a device
//    that has them, else the simple kernels of attention.cu (fp32 on CUDA cores, bf16 only
//    at their inputs and outputs). A cuDNN graph cuDNN refuses falls back to the next,
//    with one line on stderr. `cudnn` and `tc` require theirs (an error where they cannot
//    run; `cudnn` still leaves ring attention's shifted spans to the tensor-core kernels);
//    `simple` always the simple ones. The tile map of
//    a layout is built on the host from AttnShape::cu_seqlens_host (and the host copies of
//    cu_seqlens_k and causal_offset for spans) and kept on the device
//    while the layout lasts (attention_tiles.h): no call reads anything back or waits.
//  - One compute stream; every op is enqueued on it and returns at once. synchronize()
//    waits on it; copy_to_host, sum and sum_squares return results and so synchronize.
//    copy_from_host stages through a ring of page-locked buffers (device_memory.h) and
//    does not wait. stream() is public: the NCCL communicators (comm_nccl.cpp) order their
//    own streams against it.
//  - Phase timers: make_event_clock() is a clock of CUDA events recorded on the compute
//    stream (lib/util/timer.h): marks cost no synchronization; the trainer resolves them
//    once per step.
//  - alloc_host is page-locked (cudaMallocHost): the MPI staging buffers of
//    lib/comm/comm_staged.h, so those copies run at full PCIe speed, and the activation
//    offload's host pool, whose copies run on a second stream (copy_stream.h).
//  - Memory: a stream-ordered pool of this instance's own (DevicePool, device_memory.h;
//    docs/cuda-memory.md). alloc() zero-fills with cudaMemsetAsync on the stream. Kernel
//    scratch (reduction partials, the attention tile map) comes from the same pool and
//    counts towards the peak.
//  - Kernels: kernels/cuda/*.cu, launchers in cuda_kernels.h, each beside its kernel.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/copy_stream.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/gemm_lt.h"
#include "lib/backend/backend.h"

namespace flexsp {

class CudaBackend final : public Backend {
 public:
  // device: CUDA ordinal (made current); act: the activation type, DType::f32 or
  // DType::bf16; allow_tf32: TF32 tensor cores in fp32 GEMMs; attention: the kernels
  // (train.cuda_attention). Throws Error naming the key when `cudnn` or `tc` cannot run.
  CudaBackend(int device, DType act, bool allow_tf32, CudaAttention attention);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  DType act_dtype() const override { return act_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  const cuda::DevicePool& pool() const { return *pool_; }
  size_t upload_waits() const { return ring_->waits(); }       // see PinnedRing
  size_t tile_map_builds() const { return tiles_->builds(); }  // see TileMapCache
  // Attention calls cuDNN ran (see CudnnAttention), and those that fell back from it.
  size_t cudnn_attention_calls() const { return cudnn_calls_; }
  size_t cudnn_attention_fallbacks() const { return cudnn_fallbacks_; }
  size_t cudnn_graph_builds() const { return cudnn_ ? cudnn_->graph_builds() : 0; }
  std::string kernel_note() const override;
  // The activation GEMMs (gemm_act) through cuBLASLt from now on (on), or cublasGemmEx.
  void use_gemm_lt(bool on);
  bool gemm_lt() const { return lt_ != nullptr; }

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
  uint64_t copy_to_host_async(void* host_dst, const void* src, size_t bytes) override;
  uint64_t copy_from_host_async(void* dst, const void* host_src, size_t bytes) override;
  void wait_copies(uint64_t ticket) override;
  void synchronize() override;  // the compute stream and the copy stream
  size_t allocated_bytes() const override { return pool_->allocated_bytes(); }
  size_t peak_allocated_bytes() const override { return pool_->peak_allocated_bytes(); }
  void reset_peak_allocated_bytes() override { pool_->reset_peak(); }
  std::unique_ptr<EventClock> make_event_clock() override;

  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
            int64_t ldc) override;
  void gemm_act(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const act_t* a, int64_t lda, const act_t* b, int64_t ldb, float beta, void* c,
                DType c_type, int64_t ldc) override;
  void cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) override;
  double sum(const float* x, int64_t n) override;
  double sum_squares(const float* x, int64_t n) override;
  void scale(float* x, int64_t n, float alpha) override;
  void axpy(float* y, const float* x, int64_t n, float alpha) override;
  void axpy_act(act_t* y, const act_t* x, int64_t n, float alpha) override;
  void add_f32(act_t* y, const float* x, int64_t n) override;

  void embedding_forward(act_t* out, const act_t* table, const int32_t* ids, int64_t n,
                         int64_t dim) override;
  void embedding_backward(float* dtable, const act_t* dout, const int32_t* ids, int64_t n,
                          int64_t dim) override;
  void rmsnorm_forward(act_t* out, float* rstd, const act_t* x, const act_t* w, int64_t n,
                       int64_t dim, double eps) override;
  void rmsnorm_backward(act_t* dx, float* dw, const act_t* dout, const act_t* x,
                        const act_t* w, const float* rstd, int64_t n, int64_t dim) override;
  void rope_forward(act_t* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                    const double* inv_freq) override;
  void rope_backward(act_t* dx, const int32_t* pos, int64_t n, int heads, int head_dim,
                     const double* inv_freq) override;
  void swiglu_forward(act_t* out, const act_t* gate, const act_t* up, int64_t n) override;
  void swiglu_backward(act_t* dgate, act_t* dup, const act_t* dout, const act_t* gate,
                       const act_t* up, int64_t n) override;
  void attention_forward(act_t* out, float* lse, const act_t* q, const act_t* k,
                         const act_t* v, const AttnShape& s) override;
  void attention_backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dout, const act_t* q,
                          const act_t* k, const act_t* v, const act_t* out, const float* lse,
                          const AttnShape& s) override;
  void attention_merge(act_t* out, float* lse, const act_t* out_b, const float* lse_b,
                       int64_t rows, int heads, int head_dim) override;
  void cross_entropy_forward(float* loss, float* lse, const act_t* logits,
                             const int32_t* targets, int64_t n, int64_t vocab) override;
  void cross_entropy_backward(act_t* dlogits, const act_t* logits, const float* lse,
                              const int32_t* targets, int64_t n, int64_t vocab,
                              double scale) override;
  void cross_entropy_shard_stats(float* stats, const act_t* logits, const int32_t* targets,
                                 int64_t n, int64_t vocab, int64_t valid) override;
  void cross_entropy_shard_loss(float* loss, float* lse, const float* stats, int parts,
                                const int32_t* targets, int64_t n) override;
  void cross_entropy_shard_backward(act_t* dlogits, const act_t* logits, const float* lse,
                                    const int32_t* targets, int64_t n, int64_t vocab,
                                    int64_t valid, double scale) override;
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                    const AdamWArgs& a) override;
  void adamw_update_ranges(float* p, const float* g, float* m, float* v,
                           const AdamWRange* ranges, int count, const AdamWArgs& a) override;

 private:
  // Kernel scratch and tile maps from the pool (not zero-filled), copies through the ring.
  class ScratchImpl final : public cuda::Scratch, public cuda::TileUploader {
   public:
    explicit ScratchImpl(CudaBackend& be) : be_(be) {}
    void* acquire(size_t bytes) override { return be_.pool_->allocate(bytes); }
    void release(void* p) override;
    void* alloc(size_t bytes) override { return acquire(bytes); }
    void free(void* p) override { release(p); }
    void upload(void* dst, const void* host_src, size_t bytes) override;

   private:
    CudaBackend& be_;
  };

  // The tile map of s's layout for the kernels that will run (tensor-core: tc = true).
  cuda::TileList tile_map(const AttnShape& s, bool tc);
  // The tensor-core attention kernels take this head_dim here (bf16, supported, not off).
  bool use_attention_tc(int head_dim) const;
  // cuDNN's attention is to be tried for s (created on first use).
  bool use_attention_cudnn(const AttnShape& s);
  // After cuDNN refused a call: the error for `cudnn`, one stderr line per refusal for auto.
  void attention_cudnn_refused();

  int device_ = 0;
  bool allow_tf32_ = false;
  DType act_ = DType::bf16;
  CudaAttention attention_ = CudaAttention::automatic;
  bool attention_tc_[2] = {false, false};  // the tensor-core kernels for head_dim 64, 128
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::unique_ptr<cuda::DevicePool> pool_;
  std::unique_ptr<cuda::PinnedRing> ring_;
  std::unique_ptr<cuda::CopyStream> copies_;  // created by the first asynchronous copy
  ScratchImpl scratch_{*this};
  std::unique_ptr<cuda::TileMapCache> tiles_;
  std::unique_ptr<cuda::CudnnAttention> cudnn_;
  std::unique_ptr<cuda::GemmLt> lt_;
  std::string cudnn_last_refusal_;
  size_t cudnn_calls_ = 0, cudnn_fallbacks_ = 0;
  double* host_result_ = nullptr;  // pinned, for sum / sum_squares
};

// A CUDA backend on the current device (cudaGetDevice) with activations of type act
// (DType::bf16 or DType::f32), TF32 for all-fp32 GEMMs when allow_tf32, and the attention
// kernels `attention` chooses. No environment variable is read here
// (make_backend applies them: with_env_overrides).
// gemm_lt: the activation GEMMs through cuBLASLt (gemm_lt.h) rather than cublasGemmEx.
std::unique_ptr<Backend> make_cuda_backend(DType act = DType::bf16, bool allow_tf32 = false,
                                           CudaAttention attention = CudaAttention::automatic,
                                           bool gemm_lt = false);

}  // namespace flexsp

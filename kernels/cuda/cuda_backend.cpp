// The CUDA backend (design notes in cuda_backend.h): memory from the instance's stream-
// ordered pool, uploads through its pinned ring, GEMMs through cuBLAS, every other op
// through the launchers of kernels/cuda/*.cu on the instance's one stream, each told the
// activation type act_. Host code (C++20, compiled by the host compiler); only the .cu
// files go through nvcc.
#include "kernels/cuda/cuda_backend.h"

#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "kernels/cuda/attention_tc.h"
#include "kernels/cuda/cublas_check.h"
#include "kernels/cuda/cuda_check.h"

namespace flexsp {

namespace {

// Phase-timer marks as CUDA events on the compute stream (lib/util/timer.h). Events are
// created once and reused after reset(); resolving waits once, for the last mark.
class CudaEventClock final : public EventClock {
 public:
  explicit CudaEventClock(cudaStream_t stream) : stream_(stream) {}
  ~CudaEventClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  CudaEventClock(const CudaEventClock&) = delete;
  CudaEventClock& operator=(const CudaEventClock&) = delete;

  int mark() override {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      FLEXSP_CUDA_CHECK(cudaEventCreate(&e));  // with timing
      events_.push_back(e);
    }
    FLEXSP_CUDA_CHECK(cudaEventRecord(events_[used_], stream_));
    synced_ = false;
    return static_cast<int>(used_++);
  }
  double elapsed_ms(int from, int to) override {
    FLEXSP_ASSERT(from >= 0 && to >= from && static_cast<size_t>(to) < used_);
    if (!synced_) FLEXSP_CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
    synced_ = true;
    float ms = 0;
    FLEXSP_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[static_cast<size_t>(from)],
                                           events_[static_cast<size_t>(to)]));
    return ms;
  }
  void reset() override { used_ = 0; }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
  bool synced_ = false;
};

}  // namespace

CudaBackend::CudaBackend(int device, DType act, bool allow_tf32, CudaAttention attention)
    : device_(device), allow_tf32_(allow_tf32), act_(act), attention_(attention) {
  FLEXSP_CHECK(act == DType::f32 || act == DType::bf16,
               "CUDA backend: activation type {} is not f32 or bf16", dtype_name(act));
  FLEXSP_CHECK(attention != CudaAttention::cudnn || (cuda::cudnn_attention_built() && act == DType::bf16),
               "train.cuda_attention: 'cudnn' needs bf16 activations (train.precision) and a "
               "build with cuDNN's attention (CMake FLEXSP_CUDNN, "
               "scripts/gpu/fetch_cudnn_frontend.sh); here: {} activations, {}",
               dtype_name(act), cuda::cudnn_attention_built() ? "built" : "not built");
  FLEXSP_CUDA_CHECK(cudaSetDevice(device_));
  FLEXSP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FLEXSP_CUBLAS_CHECK(cublasCreate(&blas_));
  FLEXSP_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
  // DEFAULT_MATH does not use TF32 for fp32 GEMMs; TF32_TENSOR_OP_MATH allows it. Either
  // way, split-K reductions of a bf16 C stay in fp32 (DISALLOW_REDUCED_PRECISION_REDUCTION),
  // so a bf16 output is rounded once, as the CPU emulation rounds it.
  const int math = (allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  FLEXSP_CUBLAS_CHECK(cublasSetMathMode(blas_, static_cast<cublasMath_t>(math)));
  FLEXSP_CUDA_CHECK(cudaMallocHost(&host_result_, sizeof(double)));
  pool_ = std::make_unique<cuda::DevicePool>(device_, stream_);
  ring_ = std::make_unique<cuda::PinnedRing>(stream_);
  tiles_ = std::make_unique<cuda::TileMapCache>(scratch_);
  if (act_ == DType::bf16 && attention_ != CudaAttention::simple)
    for (int i = 0; i < 2; ++i) attention_tc_[i] = cuda::attention_tc_supported(64 << i);
  FLEXSP_CHECK(attention_ != CudaAttention::tc || attention_tc_[0] || attention_tc_[1],
               "train.cuda_attention: 'tc' needs bf16 activations (train.precision) and a GPU "
               "with bf16 tensor cores (compute capability 8.0 or newer); here the activations "
               "are {}", dtype_name(act_));
}

CudaBackend::~CudaBackend() {
  // No throwing from a destructor: errors here are ignored (the process is ending or the
  // device is already broken, and an earlier call has reported it). The tile maps go back
  // to the pool, then the pool and the ring go while the stream still exists.
  cudaStreamSynchronize(stream_);
  copies_.reset();
  lt_.reset();
  cudnn_.reset();
  tiles_.reset();
  ring_.reset();
  pool_.reset();
  if (host_result_ != nullptr) cudaFreeHost(host_result_);
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::unique_ptr<EventClock> CudaBackend::make_event_clock() {
  return std::make_unique<CudaEventClock>(stream_);
}

// ---- memory --------------------------------------------------------------------------------

void* CudaBackend::alloc(size_t bytes) {
  void* p = pool_->allocate(bytes);
  if (p != nullptr) FLEXSP_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  return p;
}

void CudaBackend::free(void* p) {
  if (p == nullptr) return;
  FLEXSP_ASSERT(pool_->deallocate(p));
}

void CudaBackend::zero(void* p, size_t bytes) {
  if (bytes) FLEXSP_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src)
    FLEXSP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) ring_->copy_to_device(dst, src, bytes);  // no wait: src is copied out first
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  FLEXSP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  FLEXSP_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                          size_t width, size_t rows) {
  if (width == 0 || rows == 0) return;
  FLEXSP_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows,
                                      cudaMemcpyDeviceToDevice, stream_));
}

void* CudaBackend::alloc_host(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  FLEXSP_CUDA_CHECK(cudaMallocHost(&p, bytes));
  return p;
}

void CudaBackend::free_host(void* p) {
  if (p != nullptr) cudaFreeHost(p);  // no throw: staging areas free from destructors
}

uint64_t CudaBackend::copy_to_host_async(void* dst, const void* src, size_t bytes) {
  if (!copies_) copies_ = std::make_unique<cuda::CopyStream>(stream_);
  return copies_->copy(dst, src, bytes, cudaMemcpyDeviceToHost);
}

uint64_t CudaBackend::copy_from_host_async(void* dst, const void* src, size_t bytes) {
  if (!copies_) copies_ = std::make_unique<cuda::CopyStream>(stream_);
  return copies_->copy(dst, src, bytes, cudaMemcpyHostToDevice);
}

void CudaBackend::wait_copies(uint64_t ticket) {
  if (copies_) copies_->wait(ticket);
}

void CudaBackend::synchronize() {
  FLEXSP_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (copies_) copies_->synchronize();
}

void CudaBackend::ScratchImpl::release(void* p) { FLEXSP_ASSERT(be_.pool_->deallocate(p)); }
void CudaBackend::ScratchImpl::upload(void* dst, const void* host_src, size_t bytes) {
  be_.copy_from_host(dst, host_src, bytes);
}

// ---- dense algebra ----------------------------------------------------------------------------

void CudaBackend::gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                       float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  // Row-major C[m,n] = op(A) op(B) is column-major C^T[n,m] = op(B)^T op(A)^T: the row-major
  // buffers read as column-major are the transposes, so pass B first, then A, with the
  // same transpose flags and leading dimensions.
  FLEXSP_CUBLAS_CHECK(cublasSgemm_64(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, a,
                                     lda, &beta, c, ldc));
}

void CudaBackend::gemm_act(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                           const act_t* a, int64_t lda, const act_t* b, int64_t ldb, float beta,
                           void* c, DType c_type, int64_t ldc) {
  FLEXSP_CHECK(c_type == act_ || c_type == DType::f32,
               "gemm_act: C of type {} on a backend with {} activations (expected {} or f32)",
               dtype_name(c_type), dtype_name(act_), dtype_name(act_));
  if (m <= 0 || n <= 0) return;
  const cudaDataType ab_type = act_ == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType cc_type = c_type == DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  // fp32 accumulation always; TF32 tensor cores only for an all-fp32 GEMM that allows them.
  const bool all_f32 = act_ == DType::f32;  // then C is f32 too
  const cublasComputeType_t compute =
      all_f32 && allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  if (lt_ && lt_->run({ta, tb, m, n, k, alpha, beta, a, lda, b, ldb, c, ldc, ab_type, cc_type,
                       compute}))
    return;
  // The same operand swap as gemm: row-major C = op(A) op(B) is column-major
  // C^T = op(B)^T op(A)^T.
  FLEXSP_CUBLAS_CHECK(cublasGemmEx_64(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                      ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                                      ab_type, ldb, a, ab_type, lda, &beta, c, cc_type, ldc,
                                      compute, CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) {
  cuda::cast(dst, dst_type, src, src_type, n, stream_);
}

double CudaBackend::sum(const float* x, int64_t n) {
  cuda::sum(x, n, false, host_result_, scratch_, stream_);
  return *host_result_;
}

double CudaBackend::sum_squares(const float* x, int64_t n) {
  cuda::sum(x, n, true, host_result_, scratch_, stream_);
  return *host_result_;
}

void CudaBackend::scale(float* x, int64_t n, float alpha) { cuda::scale(x, n, alpha, stream_); }

void CudaBackend::axpy(float* y, const float* x, int64_t n, float alpha) {
  cuda::axpy(y, x, n, alpha, stream_);
}

void CudaBackend::axpy_act(act_t* y, const act_t* x, int64_t n, float alpha) {
  cuda::axpy_act(y, x, n, alpha, act_, stream_);
}

void CudaBackend::add_f32(act_t* y, const float* x, int64_t n) {
  cuda::add_f32(y, x, n, act_, stream_);
}

// ---- model ops (activations of type act_) --------------------------------------------------

void CudaBackend::embedding_forward(act_t* out, const act_t* table, const int32_t* ids,
                                    int64_t n, int64_t dim) {
  cuda::embedding_forward(out, table, ids, n, dim, act_, stream_);
}
void CudaBackend::embedding_backward(float* dtable, const act_t* dout, const int32_t* ids,
                                     int64_t n, int64_t dim) {
  cuda::embedding_backward(dtable, dout, ids, n, dim, act_, stream_);
}
void CudaBackend::rmsnorm_forward(act_t* out, float* rstd, const act_t* x, const act_t* w,
                                  int64_t n, int64_t dim, double eps) {
  cuda::rmsnorm_forward(out, rstd, x, w, n, dim, eps, act_, stream_);
}
void CudaBackend::rmsnorm_backward(act_t* dx, float* dw, const act_t* dout, const act_t* x,
                                   const act_t* w, const float* rstd, int64_t n, int64_t dim) {
  cuda::rmsnorm_backward(dx, dw, dout, x, w, rstd, n, dim, act_, scratch_, stream_);
}
void CudaBackend::rope_forward(act_t* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                               const double* inv_freq) {
  cuda::rope_apply(x, pos, n, heads, head_dim, inv_freq, 1.0, act_, stream_);
}
void CudaBackend::rope_backward(act_t* dx, const int32_t* pos, int64_t n, int heads,
                                int head_dim, const double* inv_freq) {
  cuda::rope_apply(dx, pos, n, heads, head_dim, inv_freq, -1.0, act_, stream_);
}
void CudaBackend::swiglu_forward(act_t* out, const act_t* gate, const act_t* up, int64_t n) {
  cuda::swiglu_forward(out, gate, up, n, act_, stream_);
}
void CudaBackend::swiglu_backward(act_t* dgate, act_t* dup, const act_t* dout,
                                  const act_t* gate, const act_t* up, int64_t n) {
  cuda::swiglu_backward(dgate, dup, dout, gate, up, n, act_, stream_);
}
bool CudaBackend::use_attention_tc(int head_dim) const {
  const bool tc = (head_dim == 64 && attention_tc_[0]) || (head_dim == 128 && attention_tc_[1]);
  FLEXSP_CHECK(tc || attention_ != CudaAttention::tc,
               "train.cuda_attention: 'tc' has no tensor-core kernel for head_dim {} here (64 "
               "or 128, on a device that supports it); use auto or simple", head_dim);
  return tc;
}
bool CudaBackend::use_attention_cudnn(const AttnShape& s) {
  if (attention_ != CudaAttention::automatic && attention_ != CudaAttention::cudnn) return false;
  const std::string why = cuda::cudnn_attention_unsupported(s, act_ == DType::bf16);
  // `cudnn` holds for every shape cuDNN can take; shifted spans (ring attention, Seq1F1B
  // chunks) are the tensor-core kernels' under either setting.
  FLEXSP_CHECK(why.empty() || attention_ != CudaAttention::cudnn || s.cu_seqlens_k != nullptr ||
                   s.causal_offset != nullptr,
               "train.cuda_attention: 'cudnn' cannot take this attention: {}", why);
  if (!why.empty()) return false;
  if (!cudnn_) cudnn_ = std::make_unique<cuda::CudnnAttention>(stream_, scratch_);
  return true;
}
void CudaBackend::use_gemm_lt(bool on) {
  if (!on) lt_.reset();
  if (on && !lt_) lt_ = std::make_unique<cuda::GemmLt>(stream_, scratch_);
}
std::string CudaBackend::kernel_note() const {
  std::string note;
  if (cudnn_calls_ + cudnn_fallbacks_ > 0)
    note = fmt::format("attention: cuDNN ran {} calls on this rank, {} fell back to flexsp's "
                       "own kernels{}", cudnn_calls_, cudnn_fallbacks_,
                       cudnn_ ? fmt::format(" ({} cuDNN graphs built in {:.1f} s)",
                                            cudnn_->graph_builds(),
                                            cudnn_->graph_build_seconds())
                              : "");
  if (lt_)
    note += fmt::format("{}GEMMs: cuBLASLt, {} plans chosen", note.empty() ? "" : "\n",
                        lt_->plans_built());
  return note;
}
void CudaBackend::attention_cudnn_refused() {
  const std::string& why = cudnn_->refusal();
  FLEXSP_CHECK(attention_ != CudaAttention::cudnn, "train.cuda_attention: {}", why);
  ++cudnn_fallbacks_;
  if (why != cudnn_last_refusal_) {  // once per refused graph, not per layer
    std::fprintf(stderr, "flexsp: %s; using flexsp's own attention kernels there\n",
                 why.c_str());
    cudnn_last_refusal_ = why;
  }
}
cuda::TileList CudaBackend::tile_map(const AttnShape& s, bool tc) {
  FLEXSP_CHECK(s.cu_seqlens_host != nullptr,
               "CUDA attention: AttnShape::cu_seqlens_host is not set (the host copy of the "
               "layout that the tile map is built from)");
  return tiles_->get(s, tc ? cuda::kAttnTcTile : cuda::kCudaAttnTile);
}
void CudaBackend::attention_forward(act_t* out, float* lse, const act_t* q, const act_t* k,
                                    const act_t* v, const AttnShape& s) {
  if (use_attention_cudnn(s)) {
    if (cudnn_->forward(out, lse, q, k, v, s, scratch_)) {
      ++cudnn_calls_;
      return;
    }
    attention_cudnn_refused();
  }
  if (use_attention_tc(s.head_dim))
    cuda::attention_tc_forward(out, lse, q, k, v, s, tile_map(s, true), stream_);
  else
    cuda::attention_forward(out, lse, q, k, v, s, tile_map(s, false), act_, stream_);
}
void CudaBackend::attention_backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dout,
                                     const act_t* q, const act_t* k, const act_t* v,
                                     const act_t* out, const float* lse, const AttnShape& s) {
  if (use_attention_cudnn(s)) {
    if (cudnn_->backward(dq, dk, dv, dout, q, k, v, out, lse, s, scratch_)) {
      ++cudnn_calls_;
      return;
    }
    attention_cudnn_refused();
  }
  if (use_attention_tc(s.head_dim))
    cuda::attention_tc_backward(dq, dk, dv, dout, q, k, v, out, lse, s, tile_map(s, true),
                                scratch_, stream_);
  else
    cuda::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, s, tile_map(s, false), act_,
                             stream_);
}
void CudaBackend::attention_merge(act_t* out, float* lse, const act_t* out_b,
                                  const float* lse_b, int64_t rows, int heads, int head_dim) {
  cuda::attention_merge(out, lse, out_b, lse_b, rows, heads, head_dim, act_, stream_);
}
void CudaBackend::cross_entropy_forward(float* loss, float* lse, const act_t* logits,
                                        const int32_t* targets, int64_t n, int64_t vocab) {
  cuda::cross_entropy_forward(loss, lse, logits, targets, n, vocab, act_, stream_);
}
void CudaBackend::cross_entropy_backward(act_t* dlogits, const act_t* logits, const float* lse,
                                         const int32_t* targets, int64_t n, int64_t vocab,
                                         double scale) {
  cuda::cross_entropy_backward(dlogits, logits, lse, targets, n, vocab, scale, act_, stream_);
}
void CudaBackend::cross_entropy_shard_stats(float* stats, const act_t* logits,
                                            const int32_t* targets, int64_t n, int64_t vocab,
                                            int64_t valid) {
  cuda::cross_entropy_shard_stats(stats, logits, targets, n, vocab, valid, act_, stream_);
}
void CudaBackend::cross_entropy_shard_loss(float* loss, float* lse, const float* stats,
                                           int parts, const int32_t* targets, int64_t n) {
  cuda::cross_entropy_shard_loss(loss, lse, stats, parts, targets, n, stream_);
}
void CudaBackend::cross_entropy_shard_backward(act_t* dlogits, const act_t* logits,
                                               const float* lse, const int32_t* targets,
                                               int64_t n, int64_t vocab, int64_t valid,
                                               double scale) {
  cuda::cross_entropy_shard_backward(dlogits, logits, lse, targets, n, vocab, valid, scale, act_,
                                     stream_);
}
void CudaBackend::adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                               const AdamWArgs& a) {
  cuda::adamw_update(p, g, m, v, n, a, stream_);
}
void CudaBackend::adamw_update_ranges(float* p, const float* g, float* m, float* v,
                                      const AdamWRange* ranges, int count, const AdamWArgs& a) {
  cuda::adamw_update_ranges(p, g, m, v, ranges, count, a, stream_);
}

std::unique_ptr<Backend> make_cuda_backend(DType act, bool allow_tf32, CudaAttention attention,
                                           bool gemm_lt) {
  int device = 0;
  FLEXSP_CUDA_CHECK(cudaGetDevice(&device));
  auto be = std::make_unique<CudaBackend>(device, act, allow_tf32, attention);
  be->use_gemm_lt(gemm_lt);
  return be;
}

}  // namespace flexsp

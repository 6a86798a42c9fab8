// The compute backend: every tensor op the model, the optimizer and the parallel runtime
// need, over raw pointers into memory the backend owns (host memory for the CPU backend,
// device memory for the CUDA backend). Callers never touch that memory directly: they
// move data in and out with copy_from_host / copy_to_host, so the same model code runs on
// either backend.
//
// Design choices:
//  - C-style: raw pointers, element counts, row-major layouts; no tensor class. The
//    shapes are few and fixed (see lib/model/llama.cpp), and a pointer + size interface
//    is what cuBLAS/CUDA kernels take anyway.
//  - fp32 for every buffer in this interface (parameters, activations, gradients, optimizer
//    states). A mixed-precision backend keeps its bf16 copies internally.
//  - Integer inputs (token ids, positions, targets, cu_seqlens) are int32 in backend memory.
//  - Ops may be asynchronous on a device: results are visible after copy_to_host, sum*,
//    or synchronize().
//  - Weight-gradient outputs accumulate (+=); activation-gradient outputs overwrite unless
//    noted. The math of each op is defined by its CPU reference in kernels/cpu/cpu_kernels.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cpu/cpu_kernels.h"

namespace flexsp {

using cpu::AdamWArgs;
using cpu::AttnShape;  // cu_seqlens points into backend memory

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu", "cuda"

  // ---- memory ----------------------------------------------------------------------------
  // alloc returns zero-filled memory aligned to at least 64 bytes; free(nullptr) is a no-op.
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // backend -> backend
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  // rows rows of width bytes each, src_pitch and dst_pitch bytes apart (backend -> backend;
  // the regions do not overlap). Packs the column blocks Ulysses' all-to-alls exchange.
  virtual void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                       size_t width, size_t rows) = 0;
  // Host memory that copy_to_host / copy_from_host move fastest (page-locked on a GPU):
  // communication staging buffers. Not counted in allocated_bytes; free_host(nullptr) is
  // a no-op.
  virtual void* alloc_host(size_t bytes) = 0;
  virtual void free_host(void* p) = 0;
  virtual void synchronize() = 0;
  // Bytes currently allocated through alloc, and the peak since construction.
  virtual size_t allocated_bytes() const = 0;
  virtual size_t peak_allocated_bytes() const = 0;

  // ---- dense algebra -------------------------------------------------------------------------
  // C[m,n] = alpha * op(A) op(B) + beta * C (row-major; see cpu::gemm).
  virtual void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                    float* c, int64_t ldc) = 0;
  virtual double sum(const float* x, int64_t n) = 0;          // returns to the host
  virtual double sum_squares(const float* x, int64_t n) = 0;  // returns to the host
  virtual void scale(float* x, int64_t n, float alpha) = 0;
  virtual void axpy(float* y, const float* x, int64_t n, float alpha) = 0;  // y += alpha x

  // ---- model ops (math: kernels/cpu/cpu_kernels.h) -------------------------------------------
  virtual void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n,
                                 int64_t dim) = 0;
  virtual void embedding_backward(float* dtable, const float* dout, const int32_t* ids,
                                  int64_t n, int64_t dim) = 0;
  virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w,
                               int64_t n, int64_t dim, double eps) = 0;
  virtual void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                const float* w, const float* rstd, int64_t n, int64_t dim) = 0;
  virtual void rope_forward(float* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                            double theta) = 0;
  virtual void rope_backward(float* dx, const int32_t* pos, int64_t n, int heads, int head_dim,
                             double theta) = 0;
  virtual void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) = 0;
  virtual void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                               const float* up, int64_t n) = 0;
  virtual void attention_forward(float* out, float* lse, const float* q, const float* k,
                                 const float* v, const AttnShape& s) = 0;
  virtual void attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                  const float* q, const float* k, const float* v,
                                  const float* out, const float* lse, const AttnShape& s) = 0;
  virtual void cross_entropy_forward(float* loss, float* lse, const float* logits,
                                     const int32_t* targets, int64_t n, int64_t vocab) = 0;
  virtual void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                                      const int32_t* targets, int64_t n, int64_t vocab,
                                      double scale) = 0;
  virtual void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                            const AdamWArgs& a) = 0;
};

// The CPU backend (fp32, OpenBLAS, OpenMP). Always available.
std::unique_ptr<Backend> make_cpu_backend();

// "cpu", "cuda" or "auto" (cuda where built and a device is present, else cpu).
// Throws Error naming train.backend for an unknown or unavailable kind.
std::unique_ptr<Backend> make_backend(const std::string& kind);

// A typed buffer in backend memory, freed on destruction. Move-only.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& be, size_t count)
      : be_(&be), p_(static_cast<T*>(be.alloc(count * sizeof(T)))), n_(count) {}
  Buffer(Buffer&& o) noexcept : be_(o.be_), p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_; p_ = o.p_; n_ = o.n_;
      o.p_ = nullptr; o.n_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void reset() {
    if (p_ != nullptr) be_->free(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }

 private:
  Backend* be_ = nullptr;
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace flexsp

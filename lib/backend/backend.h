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
//  - Two element types. Parameters, gradients, optimizer states and statistics (RMSNorm's
//    rstd, attention's and cross-entropy's log-sum-exp, losses) are fp32 (float*).
//    Activations, and the weights the model ops read, are act_t*: elements of the
//    backend's act_dtype(), fp32 or bf16 (mixed precision, docs/model.md: the
//    model casts each unit of fp32 master weights to bf16 before using it, GEMMs
//    accumulate in fp32, weight gradients land in fp32). act_t is void, so fp32 float*
//    buffers pass unchanged; a bf16 element is a uint16_t (lib/util/dtype.h). Each op
//    computes in fp32 from its inputs and rounds its outputs once, so the CPU backend's
//    bf16 mode (an emulation: it widens, runs the fp32 reference, rounds) and a GPU's
//    bf16 kernels agree to bf16 rounding.
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
#include "lib/backend/backend_options.h"
#include "lib/util/dtype.h"
#include "lib/util/timer.h"

namespace flexsp {

using cpu::AdamWArgs;
using cpu::AdamWRange;
using cpu::AttnShape;  // cu_seqlens points into backend memory

// An activation element (see act_dtype()).
using act_t = void;
// Element i of an act_t buffer whose elements are es bytes (Backend::act_size()).
inline act_t* act_at(act_t* p, int64_t i, size_t es) {
  return static_cast<char*>(p) + i * static_cast<int64_t>(es);
}
inline const act_t* act_at(const act_t* p, int64_t i, size_t es) {
  return static_cast<const char*>(p) + i * static_cast<int64_t>(es);
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "cpu", "cuda"
  // The element type of act_t buffers: DType::f32 or DType::bf16.
  virtual DType act_dtype() const = 0;
  size_t act_size() const { return dtype_size(act_dtype()); }

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
  // Copies between backend memory and alloc_host memory queued on a copy stream of their
  // own, so that they overlap the compute (activation offload, lib/model/offload.h). A copy
  // starts after the work issued before it; the ticket is its place in the copy queue
  // (tickets grow from 1). wait_copies(t): work issued afterwards runs once every copy up to
  // ticket t has finished -- a device makes its compute stream wait, the host does not;
  // the CPU backend runs its queued copies then (lib/backend/host_copy_queue.h). Neither
  // side of a copy may be touched by other work until a wait covers it.
  virtual uint64_t copy_to_host_async(void* host_dst, const void* src, size_t bytes) = 0;
  virtual uint64_t copy_from_host_async(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void wait_copies(uint64_t ticket) = 0;
  // Bytes currently allocated through alloc, and the peak since construction or the last
  // reset_peak_allocated_bytes (which sets it to the current bytes: measuring one phase).
  virtual size_t allocated_bytes() const = 0;
  virtual size_t peak_allocated_bytes() const = 0;
  virtual void reset_peak_allocated_bytes() = 0;
  // The phase timers' clock (lib/util/timer.h): marks in the order of this backend's work.
  // Host backends finish an op before returning, so the wall clock serves; a device
  // backend records events on its stream. Must not outlive the backend.
  virtual std::unique_ptr<EventClock> make_event_clock() { return std::make_unique<WallClock>(); }
  // Which kernels ran so far, where a backend has choices ("" where none was made): the
  // end of a training run prints it (CUDA: cuDNN's attention calls and fallbacks,
  // cuBLASLt's GEMM plans).
  virtual std::string kernel_note() const { return ""; }

  // ---- dense algebra -------------------------------------------------------------------------
  // C[m,n] = alpha * op(A) op(B) + beta * C (row-major; see cpu::gemm).
  virtual void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                    float* c, int64_t ldc) = 0;
  // The same with A and B activations (act_dtype) and C of c_type (act_dtype or f32),
  // accumulated in fp32: forward and input-gradient GEMMs write activations, weight-
  // gradient GEMMs accumulate into fp32 gradients (beta = 1).
  virtual void gemm_act(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                        float alpha, const act_t* a, int64_t lda, const act_t* b, int64_t ldb,
                        float beta, void* c, DType c_type, int64_t ldc) = 0;
  // dst[i] = src[i] converted (f32 <-> bf16, or a copy when the types are equal).
  virtual void cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n) = 0;
  virtual double sum(const float* x, int64_t n) = 0;          // returns to the host
  virtual double sum_squares(const float* x, int64_t n) = 0;  // returns to the host
  virtual void scale(float* x, int64_t n, float alpha) = 0;
  virtual void axpy(float* y, const float* x, int64_t n, float alpha) = 0;  // y += alpha x
  virtual void axpy_act(act_t* y, const act_t* x, int64_t n, float alpha) = 0;
  // y += x for activations y and fp32 x, rounded once: a reduced fp32 partial sum (tensor
  // parallelism's row-parallel outputs) added to the residual stream.
  virtual void add_f32(act_t* y, const float* x, int64_t n) = 0;

  // ---- model ops (math: kernels/cpu/cpu_kernels.h) -------------------------------------------
  virtual void embedding_forward(act_t* out, const act_t* table, const int32_t* ids, int64_t n,
                                 int64_t dim) = 0;
  virtual void embedding_backward(float* dtable, const act_t* dout, const int32_t* ids,
                                  int64_t n, int64_t dim) = 0;
  virtual void rmsnorm_forward(act_t* out, float* rstd, const act_t* x, const act_t* w,
                               int64_t n, int64_t dim, double eps) = 0;
  virtual void rmsnorm_backward(act_t* dx, float* dw, const act_t* dout, const act_t* x,
                                const act_t* w, const float* rstd, int64_t n, int64_t dim) = 0;
  // inv_freq: [head_dim/2] doubles in backend memory (lib/model/rope.h's table).
  virtual void rope_forward(act_t* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                            const double* inv_freq) = 0;
  virtual void rope_backward(act_t* dx, const int32_t* pos, int64_t n, int heads,
                             int head_dim, const double* inv_freq) = 0;
  virtual void swiglu_forward(act_t* out, const act_t* gate, const act_t* up, int64_t n) = 0;
  virtual void swiglu_backward(act_t* dgate, act_t* dup, const act_t* dout, const act_t* gate,
                               const act_t* up, int64_t n) = 0;
  virtual void attention_forward(act_t* out, float* lse, const act_t* q, const act_t* k,
                                 const act_t* v, const AttnShape& s) = 0;
  virtual void attention_backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dout,
                                  const act_t* q, const act_t* k, const act_t* v,
                                  const act_t* out, const float* lse, const AttnShape& s) = 0;
  // out, lse (in place) merged with the result of the same queries over other keys
  // (cpu::attention_merge): the online-softmax combination ring attention needs.
  virtual void attention_merge(act_t* out, float* lse, const act_t* out_b, const float* lse_b,
                               int64_t rows, int heads, int head_dim) = 0;
  virtual void cross_entropy_forward(float* loss, float* lse, const act_t* logits,
                                     const int32_t* targets, int64_t n, int64_t vocab) = 0;
  virtual void cross_entropy_backward(act_t* dlogits, const act_t* logits, const float* lse,
                                      const int32_t* targets, int64_t n, int64_t vocab,
                                      double scale) = 0;
  // Cross-entropy over a vocabulary split into shards (kernels/cpu/cpu_kernels.h: stats of
  // this shard's columns, the loss from every shard's stats, this shard's gradient).
  virtual void cross_entropy_shard_stats(float* stats, const act_t* logits,
                                         const int32_t* targets, int64_t n, int64_t vocab,
                                         int64_t valid) = 0;
  virtual void cross_entropy_shard_loss(float* loss, float* lse, const float* stats, int parts,
                                        const int32_t* targets, int64_t n) = 0;
  virtual void cross_entropy_shard_backward(act_t* dlogits, const act_t* logits,
                                            const float* lse, const int32_t* targets,
                                            int64_t n, int64_t vocab, int64_t valid,
                                            double scale) = 0;
  virtual void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                            const AdamWArgs& a) = 0;
  // The same over several ranges of the buffers in one pass (multi-tensor: one launch on
  // a GPU instead of one per range), each range with its own weight decay. Ranges are
  // host memory, disjoint, relative to the pointers. Default: adamw_update per range.
  virtual void adamw_update_ranges(float* p, const float* g, float* m, float* v,
                                   const AdamWRange* ranges, int count, const AdamWArgs& a) {
    for (int i = 0; i < count; ++i) {
      AdamWArgs r = a;
      r.weight_decay = ranges[i].weight_decay;
      const int64_t o = ranges[i].begin;
      adamw_update(p + o, g + o, m + o, v + o, ranges[i].end - o, r);
    }
  }
};

// The CPU backend (OpenBLAS, OpenMP). Always available. act = DType::bf16 emulates mixed
// precision (a test of it: widen, compute in fp32, round), much slower than fp32.
std::unique_ptr<Backend> make_cpu_backend(DType act = DType::f32);

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
  // Grow-only: reallocates (contents dropped) only when count exceeds the size, freeing
  // first so that the allocator's peak (the memory model's measure) never sees two copies.
  void ensure(Backend& be, size_t count) {
    if (n_ >= count) return;
    reset();
    *this = Buffer(be, count);
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

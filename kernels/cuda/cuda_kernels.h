// Launchers of the CUDA kernels: one function per op, each defined in a .cu file beside its
// kernel and mirroring its CPU twin in kernels/cpu (the math is defined there, in
// kernels/cpu/cpu_kernels.h). Every launcher enqueues on `stream` and returns at once
// (asynchronous), except where noted; launch errors are checked (FLEXSP_CUDA_CHECK).
//
// Design choices:
//  - Plain functions over device pointers, no classes: the CudaBackend (cuda_backend.cpp)
//    owns the stream, the cuBLAS handle and the caching allocator, and hands launchers
//    the scratch memory they need (a Scratch callback), so no launcher allocates behind
//    the backend's back and there are no hidden globals.
//  - This header is C++17 (CUDA sources build as C++17) and needs only cuda_runtime.h.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flexsp::cpu {
struct AttnShape;
struct AdamWArgs;
}  // namespace flexsp::cpu

namespace flexsp::cuda {

// Scratch memory from the backend's allocator, valid for work enqueued on the backend's
// stream until release (stream order makes reuse after release safe on one stream).
class Scratch {
 public:
  virtual ~Scratch() = default;
  virtual void* acquire(size_t bytes) = 0;
  virtual void release(void* p) = 0;
};

// ---- embedding.cu (twin: kernels/cpu/embedding.cpp) ---------------------------------
void embedding_forward(float* out, const float* table, const int32_t* ids, int64_t n,
                       int64_t dim, cudaStream_t stream);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t n,
                        int64_t dim, cudaStream_t stream);

// ---- rmsnorm.cu (twin: kernels/cpu/rmsnorm.cpp) -------------------------------------
void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t n,
                     int64_t dim, double eps, cudaStream_t stream);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, int64_t n, int64_t dim, Scratch& scratch,
                      cudaStream_t stream);

// ---- rope.cu (twin: kernels/cpu/rope.cpp) -------------------------------------------
// sign = +1 forward, -1 backward (the transpose rotation).
void rope_apply(float* x, const int32_t* pos, int64_t n, int heads, int head_dim, double theta,
                double sign, cudaStream_t stream);

// ---- swiglu.cu (twin: kernels/cpu/swiglu.cpp) ---------------------------------------
void swiglu_forward(float* out, const float* gate, const float* up, int64_t n,
                    cudaStream_t stream);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, int64_t n, cudaStream_t stream);

// ---- cross_entropy.cu (twin: kernels/cpu/cross_entropy.cpp) -------------------------
void cross_entropy_forward(float* loss, float* lse, const float* logits,
                           const int32_t* targets, int64_t n, int64_t vocab,
                           cudaStream_t stream);
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                            const int32_t* targets, int64_t n, int64_t vocab, double scale,
                            cudaStream_t stream);

// ---- adamw.cu (twin: kernels/cpu/adamw.cpp) -----------------------------------------
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                  const cpu::AdamWArgs& a, cudaStream_t stream);

// ---- vector.cu (twin: kernels/cpu/vector.cpp) ---------------------------------------
// sum / sum of squares in double, deterministic (fixed grid, two passes, no atomics).
// Writes the result to *result_host (pinned or pageable host memory) and synchronizes
// the stream: the only synchronous launchers.
void sum(const float* x, int64_t n, bool squares, double* result_host, Scratch& scratch,
         cudaStream_t stream);
void scale(float* x, int64_t n, float alpha, cudaStream_t stream);
void axpy(float* y, const float* x, int64_t n, float alpha, cudaStream_t stream);

// ---- attention.cu (twin: kernels/cpu/attention.cpp) ---------------------------------
// Varlen causal GQA attention, fp32, shared-memory tiles of kCudaAttnTile rows. Reads
// s.cu_seqlens (device memory) back to the host to build the tile map (one small
// synchronous copy per call).
constexpr int kCudaAttnTile = 32;
// Largest head_dim the kernels take (their shared-memory tiles must fit).
constexpr int kCudaAttnMaxHeadDim = 256;
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const cpu::AttnShape& s, Scratch& scratch, cudaStream_t stream);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                        const float* k, const float* v, const float* out, const float* lse,
                        const cpu::AttnShape& s, Scratch& scratch, cudaStream_t stream);

// ---- helpers (vector.cu) ----------------------------------------------------------------
// Blocks for a grid-stride loop over n elements with `threads` per block (capped).
int grid_for(int64_t n, int threads);

}  // namespace flexsp::cuda

// Launchers of the CUDA kernels: one function per op, each defined in a .cu file beside its
// kernel and mirroring its CPU twin in kernels/cpu (the math is defined there, in
// kernels/cpu/cpu_kernels.h). Every launcher enqueues on `stream` and returns at once
// (asynchronous), except where noted; launch errors are checked (FLEXSP_CUDA_CHECK).
//
// Design choices:
//  - Plain functions over device pointers, no classes: the CudaBackend (cuda_backend.cpp)
//    owns the stream, the cuBLAS handle and the memory pool, and hands launchers
//    the scratch memory they need (a Scratch callback), so no launcher allocates behind
//    the backend's back and there are no hidden globals.
//  - Activations cross as void pointers with their DType (f32 or bf16, the backend's
//    act_dtype()); each .cu file turns the DType into the template argument of its
//    kernels (act_io.cuh). fp32 statistics and weight gradients stay float*.
//  - This header is C++17 (CUDA sources build as C++17) and needs only cuda_runtime.h
//    (not cuda_bf16.h: host code never names a bf16 type).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/attention_tiles.h"
#include "lib/util/dtype.h"

namespace flexsp::cpu {
struct AttnShape;
struct AdamWArgs;
struct AdamWRange;
}  // namespace flexsp::cpu

namespace flexsp::cuda {

// Scratch memory from the backend's memory pool, valid for work enqueued on the backend's
// stream until release (stream order makes reuse after release safe on one stream).
class Scratch {
 public:
  virtual ~Scratch() = default;
  virtual void* acquire(size_t bytes) = 0;
  virtual void release(void* p) = 0;
};

// ---- embedding.cu (twin: kernels/cpu/embedding.cpp) ---------------------------------
void embedding_forward(void* out, const void* table, const int32_t* ids, int64_t n,
                       int64_t dim, DType act, cudaStream_t stream);
void embedding_backward(float* dtable, const void* dout, const int32_t* ids, int64_t n,
                        int64_t dim, DType act, cudaStream_t stream);

// ---- rmsnorm.cu (twin: kernels/cpu/rmsnorm.cpp) -------------------------------------
void rmsnorm_forward(void* out, float* rstd, const void* x, const void* w, int64_t n,
                     int64_t dim, double eps, DType act, cudaStream_t stream);
void rmsnorm_backward(void* dx, float* dw, const void* dout, const void* x, const void* w,
                      const float* rstd, int64_t n, int64_t dim, DType act, Scratch& scratch,
                      cudaStream_t stream);

// ---- rope.cu (twin: kernels/cpu/rope.cpp) -------------------------------------------
// sign = +1 forward, -1 backward (the transpose rotation). inv_freq: [head_dim/2] doubles in
// device memory (lib/model/rope.h's table, the CPU twin's too).
void rope_apply(void* x, const int32_t* pos, int64_t n, int heads, int head_dim,
                const double* inv_freq, double sign, DType act, cudaStream_t stream);

// ---- swiglu.cu (twin: kernels/cpu/swiglu.cpp) ---------------------------------------
void swiglu_forward(void* out, const void* gate, const void* up, int64_t n, DType act,
                    cudaStream_t stream);
void swiglu_backward(void* dgate, void* dup, const void* dout, const void* gate,
                     const void* up, int64_t n, DType act, cudaStream_t stream);

// ---- cross_entropy.cu (twin: kernels/cpu/cross_entropy.cpp) -------------------------
void cross_entropy_forward(float* loss, float* lse, const void* logits,
                           const int32_t* targets, int64_t n, int64_t vocab, DType act,
                           cudaStream_t stream);
// dlogits may alias logits.
void cross_entropy_backward(void* dlogits, const void* logits, const float* lse,
                            const int32_t* targets, int64_t n, int64_t vocab, double scale,
                            DType act, cudaStream_t stream);
// The vocabulary-shard forms (tensor parallelism; see the CPU twin for the math).
void cross_entropy_shard_stats(float* stats, const void* logits, const int32_t* targets,
                               int64_t n, int64_t vocab, int64_t valid, DType act,
                               cudaStream_t stream);
void cross_entropy_shard_loss(float* loss, float* lse, const float* stats, int parts,
                              const int32_t* targets, int64_t n, cudaStream_t stream);
void cross_entropy_shard_backward(void* dlogits, const void* logits, const float* lse,
                                  const int32_t* targets, int64_t n, int64_t vocab,
                                  int64_t valid, double scale, DType act, cudaStream_t stream);

// ---- adamw.cu (twin: kernels/cpu/adamw.cpp) -----------------------------------------
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                  const cpu::AdamWArgs& a, cudaStream_t stream);
// All ranges in ceil(count / kAdamWRangesPerLaunch) launches (the ranges travel as kernel
// parameters: no copy, no synchronization).
constexpr int kAdamWRangesPerLaunch = 64;
void adamw_update_ranges(float* p, const float* g, float* m, float* v,
                         const cpu::AdamWRange* ranges, int count, const cpu::AdamWArgs& a,
                         cudaStream_t stream);

// ---- vector.cu (twin: kernels/cpu/vector.cpp) ---------------------------------------
// sum / sum of squares in double, deterministic (fixed grid, two passes, no atomics).
// Writes the result to *result_host (pinned or pageable host memory) and synchronizes
// the stream: the only synchronous launchers.
void sum(const float* x, int64_t n, bool squares, double* result_host, Scratch& scratch,
         cudaStream_t stream);
void scale(float* x, int64_t n, float alpha, cudaStream_t stream);
void axpy(float* y, const float* x, int64_t n, float alpha, cudaStream_t stream);
// y += alpha x on activations (fp32 arithmetic, y rounded once).
void axpy_act(void* y, const void* x, int64_t n, float alpha, DType act, cudaStream_t stream);
// y += x, activations y and fp32 x (y rounded once).
void add_f32(void* y, const float* x, int64_t n, DType act, cudaStream_t stream);
// dst[i] = src[i]: f32 -> bf16 (round to nearest even), bf16 -> f32 (exact), or a copy
// when the types are equal (f32 and bf16 only, as on the CPU backend). dst and src must
// not overlap, except dst == src with equal types (nothing to do).
void cast(void* dst, DType dst_type, const void* src, DType src_type, int64_t n,
          cudaStream_t stream);

// ---- attention.cu (twin: kernels/cpu/attention.cpp) ---------------------------------
// Varlen causal GQA attention over spans (cpu::AttnShape: keys may be other rows than the
// queries, with a causal offset per sequence); q, k, v, out, dout, dq, dk, dv are activations (act),
// computed in fp32 shared-memory tiles of kCudaAttnTile rows; lse is fp32. `tiles` is the
// layout's tile map with kCudaAttnTile rows per tile (attention_tiles.h, in device memory);
// nothing is copied to or from the host.
constexpr int kCudaAttnTile = 32;
// Largest head_dim the kernels take (their shared-memory tiles must fit).
constexpr int kCudaAttnMaxHeadDim = 256;
void attention_forward(void* out, float* lse, const void* q, const void* k, const void* v,
                       const cpu::AttnShape& s, const TileList& tiles, DType act,
                       cudaStream_t stream);
void attention_backward(void* dq, void* dk, void* dv, const void* dout, const void* q,
                        const void* k, const void* v, const void* out, const float* lse,
                        const cpu::AttnShape& s, const TileList& tiles, DType act,
                        cudaStream_t stream);
// out, lse (in place) merged with out_b, lse_b (cpu::attention_merge); any act type.
void attention_merge(void* out, float* lse, const void* out_b, const float* lse_b,
                     int64_t rows, int heads, int head_dim, DType act, cudaStream_t stream);

// ---- helpers (vector.cu) ----------------------------------------------------------------
// Blocks for a grid-stride loop over n elements with `threads` per block (capped).
int grid_for(int64_t n, int threads);

}  // namespace flexsp::cuda

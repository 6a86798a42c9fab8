// cuDNN's fused flash attention for packed documents: forward and backward,
// causal, GQA, bf16 in and out with fp32 softmax statistics, through the cuDNN frontend's
// SDPA graphs. The twins are the CPU reference (cpu::attention_forward/backward) and the
// tensor-core kernels (attention_tc.h), which stay the fallback.
//
// Design choices:
//  - Built only where the cuDNN frontend's headers were found (FLEXSP_HAVE_CUDNN: CMake's
//    FLEXSP_CUDNN, scripts/gpu/fetch_cudnn_frontend.sh); elsewhere cudnn_attention_built()
//    is false and the backend never asks for it.
//  - What it takes: bf16, head_dim a multiple of 8 up to 128, queries = keys (one causal
//    span per document, top-left aligned: AttnShape without cu_seqlens_k or
//    causal_offset), int32 element offsets. Ring attention's and Seq1F1B's shifted spans
//    go to the tensor-core kernels.
//  - The layout reaches cuDNN as ragged offsets and sequence lengths in device memory
//    (attention_cudnn_index.h), kept for the last few layouts like the tile maps and
//    uploaded through the backend's stream-ordered copy: no call reads back or waits.
//  - One graph per (direction, bucket, heads, kv_heads, head_dim, scale), built on first
//    use (tens to hundreds of milliseconds) and kept. A graph cuDNN refuses is remembered
//    with cuDNN's message: forward/backward return false at once and the caller falls
//    back (or, with train.cuda_attention = cudnn, reports the message).
//  - Tensors must start on 16 bytes (cuDNN's vector width); one that does not is refused
//    like a graph, before anything is enqueued.
//  - Workspaces come from the caller's Scratch (the backend's stream-ordered pool) for the
//    duration of the call.
//  - The backward's dQ accumulation uses atomics: not bit-for-bit deterministic run to run.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {

// Whether this build has cuDNN's attention.
bool cudnn_attention_built();

// Why cuDNN's attention does not take s with activations of `bf16` or not ("" when it
// does, as far as can be told without building the graph).
std::string cudnn_attention_unsupported(const cpu::AttnShape& s, bool bf16);

class CudnnAttention {
 public:
  // Enqueues on `stream`; index arrays live in memory from `up`. Throws Error where the
  // build has no cuDNN attention or cuDNN cannot start (cudnnCreate).
  CudnnAttention(cudaStream_t stream, TileUploader& up);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Shapes as cpu::attention_forward/backward (q [T, heads, d], k, v [T, kv_heads, d],
  // lse [T, heads], bf16 tensors); s must pass cudnn_attention_unsupported and carry
  // cu_seqlens_host. false: cuDNN refused this shape's graph (or a pointer is not 16-byte
  // aligned), nothing was enqueued, and refusal() says why.
  bool forward(void* out, float* lse, const void* q, const void* k, const void* v,
               const cpu::AttnShape& s, Scratch& scratch);
  bool backward(void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k,
                const void* v, const void* out, const float* lse, const cpu::AttnShape& s,
                Scratch& scratch);
  const std::string& refusal() const;
  size_t graph_builds() const;  // graphs built so far (refused ones included)
  double graph_build_seconds() const;  // the time they took

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flexsp::cuda

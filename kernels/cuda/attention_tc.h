// Tensor-core varlen causal GQA attention for bf16 activations, forward and
// backward: the same function as the CPU reference (kernels/cpu/cpu_kernels.h,
// cpu::attention_forward / attention_backward) and the simple fp32 CUDA kernels
// (attention.cu), computed with bf16 WMMA products accumulated in fp32.
//
// Layouts (row-major, as the CPU reference): q, out, dout, dq [T, heads, head_dim];
// k, v, dk, dv [T, kv_heads, head_dim]; all of them bf16 (__nv_bfloat16, passed as void
// pointers so that host code never names a bf16 type); lse [T, heads] fp32 (natural log of
// the sum of exp of the scaled scores). Buffers must be 16-byte aligned (cudaMalloc and
// the backend's pool are). `tiles` is the layout's tile map with kAttnTcTile rows per
// tile (attention_tiles.h, device memory); no call copies to or from the host or waits.
// s.cu_seqlens is not read (the map holds the layout). Outputs are written
// only for rows inside the sequences (rows past cu_seqlens[nseq] are left untouched); dq,
// dk, dv are overwritten, not accumulated. Results are deterministic (no atomics).
// This header is C++17 and needs only cuda_runtime.h.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cpu {
struct AttnShape;
}  // namespace flexsp::cpu

namespace flexsp::cuda {

// Rows per tile of these kernels' tile map.
constexpr int kAttnTcTile = 64;

// True when these kernels take this head_dim (64 or 128) and the current device has bf16
// tensor cores (compute capability 8.0 or newer). False when there is no device.
bool attention_tc_supported(int head_dim);

// out [T, heads, d] bf16, lse [T, heads] fp32 from q, k, v (bf16).
void attention_tc_forward(void* out, float* lse, const void* q, const void* k, const void* v,
                          const cpu::AttnShape& s, const TileList& tiles, cudaStream_t stream);

// dq, dk, dv (bf16, overwritten) from dout, q, k, v, out (bf16) and lse (fp32), recomputing
// the probabilities tile by tile (scratch: a per-row vector in the backend's pool).
void attention_tc_backward(void* dq, void* dk, void* dv, const void* dout, const void* q,
                           const void* k, const void* v, const void* out, const float* lse,
                           const cpu::AttnShape& s, const TileList& tiles, Scratch& scratch,
                           cudaStream_t stream);

}  // namespace flexsp::cuda

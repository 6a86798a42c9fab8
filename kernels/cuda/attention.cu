// Varlen causal attention with grouped-query heads on the GPU, forward and backward.
// Twin: kernels/cpu/attention.cpp (same algorithm, same two-pass backward).
//
// This is the simple, obviously-correct version: fp32 arithmetic throughout, CUDA cores
// (fmaf), one block of 128 threads per work item, tiles of kCudaAttnTile = 32 rows in
// shared memory.
// Nothing of size s x s exists:
//  - forward, one block per (query tile, head): walks the key tiles the tile may see,
//    keeping per row the running max m, running sum l and an unnormalised accumulator O
//    (online softmax); out = O / l and lse = m + log(l) is saved for backward;
//  - backward pass 1, one block per (key tile, kv head): loops over the group's query heads
//    and the query tiles at or after the key tile, recomputes P = exp(scale q.k - lse) and
//    dS = P (dO.v - D) scale, and accumulates dV += P^T dO, dK += dS^T Q in shared memory;
//  - backward pass 2, one block per (query tile, head): loops over key tiles; dQ += dS K.
// Every output row has exactly one writer: no atomics, deterministic results.
// The tile map (sequence start, tile rows, sequence length per tile) comes from the caller
// (attention_tiles.h: built on the host from its copy of cu_seqlens, kept on the device
// while the layout lasts), longest work first like the CPU's: query order for the forward
// and dQ passes, key order for the dK/dV pass. Tiles are aligned to multiples of the tile
// size from each side's sequence start; each carries its span (keys may be other rows than
// the queries, with a causal offset: ring attention, Seq1F1B), so row i of the query tile
// at q0 sees the first clamp(keys_seen(q0 + i) - k0, 0, nk) keys of the key tile at k0.
// Query-side blocks walk only the key tiles their last row sees, key-side blocks only the
// query tiles from the first that sees them; a row that sees no key gets out = 0 and
// lse = -inf, and a row with lse = -inf adds no gradient. attention_merge folds the result
// over other keys into out/lse (ring attention). No call copies anything to or from the host.
// Shared-memory rows are padded to head_dim + 1 floats so that a warp reading one column
// of 32 rows hits 32 different banks.
// Mixed precision: the kernels are templates over the activation type T (act_io.cuh).
// bf16 q, k, v, out and dout are widened into the same fp32 shared tiles (D = dO.O reads
// the bf16 out), everything runs in fp32 as in fp32 mode, and out, dq, dk, dv are rounded once
// when written; lse stays fp32. That is the CPU emulation's widen / fp32 / round.
//
// Not done here (attention_tc.cu does the first): tensor-core MMA on the bf16 inputs
// (mma.sync, then wgmma on sm_90a), 64- or 128-row tiles held in registers, K/V loads
// through cp.async / TMA, one-pass backward with dQ atomics (or a dQ accumulation buffer).
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/act_io.cuh"
#include "kernels/cuda/attention_tiles.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace flexsp::cuda {
namespace {

constexpr int B = kCudaAttnTile;
constexpr int kThreads = 128;


// Row i of the query tile starting at q0 sees this many (0 .. nk) of the nk keys of the
// key tile starting at k0.
__device__ __forceinline__ int visible(const TileDesc& t, int q0, int i, int k0, int nk) {
  const int v = keys_seen(t, q0 + i) - k0;
  return v < 0 ? 0 : (v < nk ? v : nk);
}

// Loads rows [row0, row0 + n) (n <= B) of a [*, stride] matrix, columns col .. col + d, into
// a padded [B][d + 1] fp32 shared tile (widened from T); rows n .. B-1 are zero.
template <class T>
__device__ void load_tile(float* dst, const T* src, int64_t row0, int n, int64_t stride,
                          int64_t col, int d) {
  const int dp = d + 1;
  for (int idx = threadIdx.x; idx < B * d; idx += blockDim.x) {
    const int i = idx / d, dd = idx - i * d;
    dst[i * dp + dd] = i < n ? load(src + (row0 + i) * stride + col + dd) : 0.0f;
  }
}

__device__ void zero_tile(float* dst, int d) {
  for (int idx = threadIdx.x; idx < B * (d + 1); idx += blockDim.x) dst[idx] = 0.0f;
}

__device__ __forceinline__ float dot(const float* a, const float* b, int d) {
  float s = 0.0f;
  for (int dd = 0; dd < d; ++dd) s = fmaf(a[dd], b[dd], s);
  return s;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
attn_forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v,
                    const TileDesc* tiles, int heads, int kv_heads, int d, float scale) {
  extern __shared__ float smem[];
  const int dp = d + 1;
  float* sq = smem;
  float* sk = sq + B * dp;
  float* sv = sk + B * dp;
  float* so = sv + B * dp;
  float* ss = so + B * dp;  // [B][B + 1] scores, then probabilities
  float* sm = ss + B * (B + 1);
  float* sl = sm + B;
  float* sc = sl + B;
  const TileDesc tl = tiles[blockIdx.x];
  const int h = blockIdx.y, kvh = h / (heads / kv_heads), nq = tl.r1 - tl.r0;
  const int64_t qs = int64_t(heads) * d, ks = int64_t(kv_heads) * d;
  const int64_t qcol = int64_t(h) * d, kcol = int64_t(kvh) * d;
  load_tile(sq, q, tl.q + tl.r0, nq, qs, qcol, d);
  zero_tile(so, d);
  if (threadIdx.x < B) sm[threadIdx.x] = -INFINITY, sl[threadIdx.x] = 0.0f;
  const int kend = keys_seen(tl, tl.r1 - 1);  // keys the tile's last row sees
  for (int k0 = 0; k0 < kend; k0 += B) {
    const int nk = min(B, kend - k0);
    __syncthreads();  // the previous key tile is no longer read
    load_tile(sk, k, tl.k + k0, nk, ks, kcol, d);
    load_tile(sv, v, tl.k + k0, nk, ks, kcol, d);
    __syncthreads();
    for (int idx = threadIdx.x; idx < B * B; idx += blockDim.x) {
      const int i = idx / B, j = idx - i * B;
      float s = -INFINITY;
      if (i < nq && j < visible(tl, tl.r0, i, k0, nk)) s = dot(sq + i * dp, sk + j * dp, d) * scale;
      ss[i * (B + 1) + j] = s;
    }
    __syncthreads();
    if (threadIdx.x < B) {
      const int i = threadIdx.x;
      float* row = ss + i * (B + 1);
      float corr = 0.0f;
      if (i < nq) {
        float mx = sm[i];
        for (int j = 0; j < B; ++j) mx = fmaxf(mx, row[j]);
        corr = sm[i] == -INFINITY ? 0.0f : expf(sm[i] - mx);
        float sum = 0.0f;
        for (int j = 0; j < B; ++j) {
          const float p = row[j] == -INFINITY ? 0.0f : expf(row[j] - mx);
          row[j] = p;
          sum += p;
        }
        sl[i] = sl[i] * corr + sum;
        sm[i] = mx;
      }
      sc[i] = corr;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < B * d; idx += blockDim.x) {
      const int i = idx / d, dd = idx - i * d;
      if (i >= nq) continue;
      const float* p = ss + i * (B + 1);
      float acc = so[i * dp + dd] * sc[i];
      for (int j = 0; j < nk; ++j) acc = fmaf(p[j], sv[j * dp + dd], acc);
      so[i * dp + dd] = acc;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < B * d; idx += blockDim.x) {
    const int i = idx / d, dd = idx - i * d;
    // A row that saw no key (l = 0) gets out = 0 and lse = -inf.
    if (i < nq)
      store(out + (tl.q + tl.r0 + i) * qs + qcol + dd,
            sl[i] > 0.0f ? so[i * dp + dd] * (1.0f / sl[i]) : 0.0f);
  }
  if (threadIdx.x < nq) {
    const int i = threadIdx.x;
    lse[int64_t(tl.q + tl.r0 + i) * heads + h] = sl[i] > 0.0f ? sm[i] + logf(sl[i]) : -INFINITY;
  }
}

// Loads the query-side rows of one (query tile, head): Q and dO tiles, and per row
// D = dO.O (fp32, as the CPU's dot_row) and lse.
template <class T>
__device__ void load_query_side(float* sq, float* sdo, float* sD, float* slse, const T* q,
                                const T* dout, const T* out, const float* lse, int64_t row0,
                                int nq, int64_t qs, int64_t qcol, int heads, int h, int d) {
  load_tile(sq, q, row0, nq, qs, qcol, d);
  load_tile(sdo, dout, row0, nq, qs, qcol, d);
  if (threadIdx.x < B) {
    const int i = threadIdx.x;
    float di = 0.0f, li = 0.0f;
    if (i < nq) {
      const T* g = dout + (row0 + i) * qs + qcol;
      const T* o = out + (row0 + i) * qs + qcol;
      for (int dd = 0; dd < d; ++dd) di += load(g + dd) * load(o + dd);
      li = lse[(row0 + i) * heads + h];
    }
    sD[i] = di;
    slse[i] = li;
  }
}

// P and dS of query rows [q0, q0 + nq) of t's span against the key tile at k0 (zero where
// masked, and on rows whose lse is -inf: they saw no key). sp may be null (pass 2 needs
// only dS).
__device__ void probs_and_dscores(float* sp, float* sds, const float* sq, const float* sdo,
                                  const float* sk, const float* sv, const float* sD,
                                  const float* slse, const TileDesc& t, int q0, int nq, int k0,
                                  int nk, int d, float scale) {
  const int dp = d + 1;
  for (int idx = threadIdx.x; idx < B * B; idx += blockDim.x) {
    const int i = idx / B, j = idx - i * B;
    float p = 0.0f, ds = 0.0f;
    if (i < nq && j < visible(t, q0, i, k0, nk) && slse[i] != -INFINITY) {
      p = expf(dot(sq + i * dp, sk + j * dp, d) * scale - slse[i]);
      const float dpv = dot(sdo + i * dp, sv + j * dp, d);
      ds = p * (dpv - sD[i]) * scale;
    }
    if (sp != nullptr) sp[i * (B + 1) + j] = p;
    sds[i * (B + 1) + j] = ds;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
attn_backward_kv_kernel(T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* out, const float* lse, const TileDesc* tiles, int heads,
                        int kv_heads, int d, float scale) {
  extern __shared__ float smem[];
  const int dp = d + 1;
  float* sk = smem;
  float* sv = sk + B * dp;
  float* sq = sv + B * dp;
  float* sdo = sq + B * dp;
  float* sdk = sdo + B * dp;
  float* sdv = sdk + B * dp;
  float* sp = sdv + B * dp;
  float* sds = sp + B * (B + 1);
  float* sD = sds + B * (B + 1);
  float* slse = sD + B;
  const TileDesc kt = tiles[blockIdx.x];
  const int kvh = blockIdx.y, group = heads / kv_heads;
  const int k0 = kt.r0, nk = kt.r1 - kt.r0;
  const int64_t qs = int64_t(heads) * d, ks = int64_t(kv_heads) * d, kcol = int64_t(kvh) * d;
  load_tile(sk, k, kt.k + k0, nk, ks, kcol, d);
  load_tile(sv, v, kt.k + k0, nk, ks, kcol, d);
  zero_tile(sdk, d);
  zero_tile(sdv, d);
  const int first = first_query(kt, k0) / B * B;  // the first query tile that sees a key
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const int64_t qcol = int64_t(h) * d;
    for (int r0 = first; r0 < kt.qlen; r0 += B) {
      const int nq = min(B, kt.qlen - r0);
      __syncthreads();  // the previous query tile is no longer read
      load_query_side(sq, sdo, sD, slse, q, dout, out, lse, kt.q + r0, nq, qs, qcol, heads, h,
                      d);
      __syncthreads();
      probs_and_dscores(sp, sds, sq, sdo, sk, sv, sD, slse, kt, r0, nq, k0, nk, d, scale);
      __syncthreads();
      // dV[j] += sum_i P[i][j] dO[i]; dK[j] += sum_i dS[i][j] Q[i]
      for (int idx = threadIdx.x; idx < B * d; idx += blockDim.x) {
        const int j = idx / d, dd = idx - j * d;
        if (j >= nk) continue;
        float av = sdv[j * dp + dd], ak = sdk[j * dp + dd];
        for (int i = 0; i < nq; ++i) {
          av = fmaf(sp[i * (B + 1) + j], sdo[i * dp + dd], av);
          ak = fmaf(sds[i * (B + 1) + j], sq[i * dp + dd], ak);
        }
        sdv[j * dp + dd] = av;
        sdk[j * dp + dd] = ak;
      }
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < B * d; idx += blockDim.x) {
    const int j = idx / d, dd = idx - j * d;
    if (j >= nk) continue;
    const int64_t o = (kt.k + k0 + j) * ks + kcol + dd;
    store(dk + o, sdk[j * dp + dd]);
    store(dv + o, sdv[j * dp + dd]);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
attn_backward_q_kernel(T* dq, const T* dout, const T* q, const T* k, const T* v, const T* out,
                       const float* lse, const TileDesc* tiles, int heads, int kv_heads, int d,
                       float scale) {
  extern __shared__ float smem[];
  const int dp = d + 1;
  float* sq = smem;
  float* sdo = sq + B * dp;
  float* sk = sdo + B * dp;
  float* sv = sk + B * dp;
  float* sdq = sv + B * dp;
  float* sds = sdq + B * dp;
  float* sD = sds + B * (B + 1);
  float* slse = sD + B;
  const TileDesc tl = tiles[blockIdx.x];
  const int h = blockIdx.y, kvh = h / (heads / kv_heads), nq = tl.r1 - tl.r0;
  const int64_t qs = int64_t(heads) * d, ks = int64_t(kv_heads) * d;
  const int64_t qcol = int64_t(h) * d, kcol = int64_t(kvh) * d;
  load_query_side(sq, sdo, sD, slse, q, dout, out, lse, tl.q + tl.r0, nq, qs, qcol, heads, h,
                  d);
  zero_tile(sdq, d);
  const int kend = keys_seen(tl, tl.r1 - 1);
  for (int k0 = 0; k0 < kend; k0 += B) {
    const int nk = min(B, kend - k0);
    __syncthreads();
    load_tile(sk, k, tl.k + k0, nk, ks, kcol, d);
    load_tile(sv, v, tl.k + k0, nk, ks, kcol, d);
    __syncthreads();
    probs_and_dscores(nullptr, sds, sq, sdo, sk, sv, sD, slse, tl, tl.r0, nq, k0, nk, d, scale);
    __syncthreads();
    for (int idx = threadIdx.x; idx < B * d; idx += blockDim.x) {
      const int i = idx / d, dd = idx - i * d;
      if (i >= nq) continue;
      float acc = sdq[i * dp + dd];
      for (int j = 0; j < nk; ++j) acc = fmaf(sds[i * (B + 1) + j], sk[j * dp + dd], acc);
      sdq[i * dp + dd] = acc;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < B * d; idx += blockDim.x) {
    const int i = idx / d, dd = idx - i * d;
    if (i < nq) store(dq + (tl.q + tl.r0 + i) * qs + qcol + dd, sdq[i * dp + dd]);
  }
}

// One warp per (row, head): every lane reads both lse before lane 0 writes the merged one.
template <class T>
__global__ void attn_merge_kernel(T* out, float* lse, const T* out_b, const float* lse_b,
                                  int64_t items, int d) {
  const int64_t item = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (item >= items) return;  // the whole warp
  const float a = lse[item], b = lse_b[item];
  if (b == -INFINITY) return;  // the other side saw no key
  const float m = fmaxf(a, b);
  const float wa = a == -INFINITY ? 0.0f : expf(a - m), wb = expf(b - m), sum = wa + wb;
  const float ca = wa / sum, cb = wb / sum;
  T* o = out + item * d;
  const T* ob = out_b + item * d;
  for (int c = lane; c < d; c += 32) store(o + c, ca * load(o + c) + cb * load(ob + c));
  __syncwarp();
  if (lane == 0) lse[item] = m + logf(sum);
}

size_t forward_smem(int d) { return sizeof(float) * (4 * B * (d + 1) + B * (B + 1) + 3 * B); }
size_t backward_kv_smem(int d) {
  return sizeof(float) * (6 * B * (d + 1) + 2 * B * (B + 1) + 2 * B);
}
size_t backward_q_smem(int d) { return sizeof(float) * (5 * B * (d + 1) + B * (B + 1) + 2 * B); }

// Raises a kernel's dynamic shared-memory limit when it needs more than the default 48 KB.
void set_smem(const void* kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    FLEXSP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
}

void check_shape(const cpu::AttnShape& s, const TileList& tiles) {
  FLEXSP_ASSERT(s.heads > 0 && s.kv_heads > 0 && s.heads % s.kv_heads == 0);
  FLEXSP_ASSERT(s.head_dim > 0 && s.nseq >= 0 && (tiles.count == 0 || tiles.by_query != nullptr));
  FLEXSP_CHECK(s.head_dim <= kCudaAttnMaxHeadDim,
               "attention: head_dim {} exceeds the CUDA kernels' limit {}", s.head_dim,
               kCudaAttnMaxHeadDim);
}

}  // namespace

void attention_forward(void* out, float* lse, const void* q, const void* k, const void* v,
                       const cpu::AttnShape& s, const TileList& map, DType act,
                       cudaStream_t stream) {
  check_shape(s, map);
  const int count = map.count;
  if (count == 0) return;
  const TileDesc* tiles = map.by_query;
  const size_t smem = forward_smem(s.head_dim);
  dispatch_act(act, "attention_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    set_smem(reinterpret_cast<const void*>(&attn_forward_kernel<T>), smem);
    attn_forward_kernel<T><<<dim3(count, s.heads), kThreads, smem, stream>>>(
        static_cast<T*>(out), lse, static_cast<const T*>(q), static_cast<const T*>(k),
        static_cast<const T*>(v), tiles, s.heads, s.kv_heads, s.head_dim,
        static_cast<float>(s.scale));
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void attention_backward(void* dq, void* dk, void* dv, const void* dout, const void* q,
                        const void* k, const void* v, const void* out, const float* lse,
                        const cpu::AttnShape& s, const TileList& map, DType act,
                        cudaStream_t stream) {
  check_shape(s, map);
  const int count = map.count, key_count = map.key_count;
  if (count == 0 && key_count == 0) return;
  const float scale = static_cast<float>(s.scale);
  const size_t smem_kv = backward_kv_smem(s.head_dim), smem_q = backward_q_smem(s.head_dim);
  dispatch_act(act, "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = static_cast<const T*>(dout);
    const T* qt = static_cast<const T*>(q);
    const T* kt = static_cast<const T*>(k);
    const T* vt = static_cast<const T*>(v);
    const T* ot = static_cast<const T*>(out);
    set_smem(reinterpret_cast<const void*>(&attn_backward_kv_kernel<T>), smem_kv);
    set_smem(reinterpret_cast<const void*>(&attn_backward_q_kernel<T>), smem_q);
    if (key_count > 0)
      attn_backward_kv_kernel<T><<<dim3(key_count, s.kv_heads), kThreads, smem_kv, stream>>>(
          static_cast<T*>(dk), static_cast<T*>(dv), g, qt, kt, vt, ot, lse, map.by_key, s.heads,
          s.kv_heads, s.head_dim, scale);
    FLEXSP_CUDA_CHECK(cudaGetLastError());
    if (count > 0)
      attn_backward_q_kernel<T><<<dim3(count, s.heads), kThreads, smem_q, stream>>>(
          static_cast<T*>(dq), g, qt, kt, vt, ot, lse, map.by_query, s.heads, s.kv_heads,
          s.head_dim, scale);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

void attention_merge(void* out, float* lse, const void* out_b, const float* lse_b,
                     int64_t rows, int heads, int head_dim, DType act, cudaStream_t stream) {
  const int64_t items = rows * heads;
  if (items == 0) return;
  constexpr int kMergeThreads = 256;
  const int64_t blocks = (items * 32 + kMergeThreads - 1) / kMergeThreads;
  dispatch_act(act, "attention_merge", [&](auto tag) {
    using T = typename decltype(tag)::type;
    attn_merge_kernel<T><<<static_cast<unsigned>(blocks), kMergeThreads, 0, stream>>>(
        static_cast<T*>(out), lse, static_cast<const T*>(out_b), lse_b, items, head_dim);
  });
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace flexsp::cuda

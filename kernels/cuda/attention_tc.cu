// Tensor-core varlen causal GQA attention, bf16 in and out, fp32 accumulation.
// Same function as kernels/cpu/attention.cpp and the fp32 CUDA kernels of attention.cu;
// interface and layouts in attention_tc.h.
//
// Design (FlashAttention-2, written for clarity over the last factor of speed):
//  - Tiles of B = 64 rows (queries or keys) of one sequence and one head, aligned to
//    multiples of 64 from that side's start, each with its span (keys may be other rows
//    than the queries, with a causal offset; rows that see no key: out 0, lse -inf, no
//    gradient; key tiles no row sees are not visited), listed by the caller (attention_tiles.h: on
//    the host, from its copy of cu_seqlens, kept on the device while the layout lasts),
//    longest work first. One block of 4 warps per (tile, head); every
//    product is a bf16 WMMA m16n16k16 with fp32 accumulators, operands in shared memory.
//    WMMA rather than raw mma.sync: its fragments load and store through shared memory
//    with an opaque register layout, much less to get wrong without a GPU to test on.
//  - Each warp owns a 16-row slab (16 queries in the forward and dQ, 16 keys in dK/dV)
//    and does every product and row operation of its slab itself: inside a tile warps
//    sync with __syncwarp only; block barriers guard the reloads of shared input tiles.
//  - Forward, per (query tile, head), over the key tiles it may see: S = Q K^T (fp32,
//    shared); per row scale, causal mask, online softmax (running max m and sum l in
//    registers; lanes 2i and 2i+1 share row i), P rounded to bf16, the fp32 shared O
//    rescaled by e^(m_old - m_new), O += P V; out = O / l, lse = m + log(l) (natural log
//    of the scaled scores' sum of exp, as the CPU reference).
//  - Backward: D = rowsum(dO * O) (fp32, a small kernel); pass 1 per (key tile, kv head),
//    over the group's query heads and the query tiles at or after the key tile: S and
//    dP = dO V^T, P = e^(scale S - lse), dS = P (dP - D) scale (bf16), dV += P^T dO and
//    dK += dS^T Q in register fragments; pass 2 per (query tile, head), over key tiles:
//    dQ += dS K. Every output element has one writer: deterministic, no atomics.
//  - Tile rows past the sequence's end are zero-filled and masked, never read (they may
//    be the next sequence, or NaN padding). Shared rows are padded (+8 bf16, +4 floats)
//    against bank conflicts; WMMA's 32-byte pointer and 16-byte ldm rules: see Dims.
// Not yet done (speed predicted in bench/gpu/NOTES.md): mma.sync, then wgmma (sm_90a),
// with S, P and O in registers (no shared round trips), K/V double-buffered by cp.async /
// TMA, 128-row tiles of 8 warps, a persistent scheduler, a one-pass backward.
#include "kernels/cuda/attention_tc.h"

#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_check.h"

// bf16 WMMA exists from sm_80 on: device code for older targets compiles to empty kernels
// that attention_tc_supported() never lets run.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FLEXSP_TC_DEVICE_CODE 0
#else
#define FLEXSP_TC_DEVICE_CODE 1
#endif

namespace flexsp::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int B = kAttnTcTile;  // rows per tile (queries or keys)
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int W = 16;              // WMMA tile edge; also the rows of a warp's slab
constexpr int kLdScore = B + 4;    // floats: row stride of the S and dP tiles
constexpr int kLdProb = B + 8;     // bf16: row stride of the P and dS tiles
static_assert(B == kWarps * W, "each warp owns one 16-row slab of a tile");

// Shared-memory layout per head_dim D. Every region size is a multiple of 128 bytes, so
// regions carved one after the other from a 128-byte aligned base stay 128-byte aligned;
// inside a region a fragment starts at row 16a, column 16b, i.e. at a byte offset of
// 16a * (row stride in bytes, a multiple of 16) + 16b * (2 or 4): a multiple of 32.
template <int D>
struct Dims {
  static constexpr int kLdIn = D + 8;   // bf16: row stride of the Q, K, V, dO tiles
  static constexpr int kLdAcc = D + 4;  // floats: row stride of O and the staging tiles
  static constexpr size_t kInTile = sizeof(bf16) * B * kLdIn;
  static constexpr size_t kScoreTile = sizeof(float) * B * kLdScore;
  static constexpr size_t kProbTile = sizeof(bf16) * B * kLdProb;
  static constexpr size_t kAccTile = sizeof(float) * B * kLdAcc;
  static constexpr size_t kRowVec = sizeof(float) * B;
  // S and dP side by side; after the backward loops the same bytes hold the [B][kLdAcc]
  // staging tile of the results.
  static constexpr size_t kScorePair = 2 * kScoreTile > kAccTile ? 2 * kScoreTile : kAccTile;
  static constexpr size_t kForward = 3 * kInTile + kScoreTile + kProbTile + kAccTile;
  static constexpr size_t kBackwardKV = 4 * kInTile + kScorePair + 2 * kProbTile + 2 * kRowVec;
  static constexpr size_t kBackwardQ = 4 * kInTile + kScorePair + kProbTile + 2 * kRowVec;
  static constexpr size_t kMax = std::max({kForward, kBackwardKV, kBackwardQ});
  static_assert(D % 64 == 0, "store_slab: lanes take column pairs of whole 64-column runs");
  static_assert(kLdIn % 8 == 0 && kLdProb % 8 == 0 && kLdAcc % 4 == 0 && kLdScore % 4 == 0,
                "WMMA: ldm a multiple of 8 bf16 / 4 floats (16 bytes)");
  static_assert((kInTile | kScoreTile | kProbTile | kAccTile | kScorePair | kRowVec) % 128 == 0,
                "regions keep 128-byte alignment");
};


// Bump allocation of the dynamic shared memory, in the order of the Dims sums.
struct Carve {
  unsigned char* p;
  template <class T>
  __device__ T* take(size_t bytes) { return reinterpret_cast<T*>((p += bytes) - bytes); }
};

#if FLEXSP_TC_DEVICE_CODE
using FragA = wmma::fragment<wmma::matrix_a, W, W, W, bf16, wmma::row_major>;
using FragAT = wmma::fragment<wmma::matrix_a, W, W, W, bf16, wmma::col_major>;  // A^T read
using FragB = wmma::fragment<wmma::matrix_b, W, W, W, bf16, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, W, W, W, bf16, wmma::col_major>;  // B^T read
using FragC = wmma::fragment<wmma::accumulator, W, W, W, float>;

// How many keys (0 .. nk) of the key tile starting at k0 row i of the query tile starting
// at q0 sees (0 for rows past nq): the mask of a score row is "column j < seen(...)", so a
// fully visible tile masks only its padding.
__device__ __forceinline__ int seen(const TileDesc& t, int q0, int i, int nq, int k0, int nk) {
  if (i >= nq) return 0;
  const int v = keys_seen(t, q0 + i) - k0;
  return v < 0 ? 0 : (v < nk ? v : nk);
}

// Rows [row0, row0 + n) (n <= B) of a bf16 matrix with row stride `stride`, columns
// col .. col + D, into a [B][D + 8] shared tile in 16-byte chunks; rows n .. B-1 are zero.
// A thread issues kBatch loads before their stores, so that they are in flight together
// (2 in pass 1's loop, which keeps 128 accumulator registers live: 4 would spill).
template <int D, int kBatch = 8>
__device__ void load_rows(bf16* dst, const bf16* src, int64_t row0, int n, int64_t stride,
                          int64_t col) {
  constexpr int kChunks = D / 8;                // 16-byte chunks per row
  constexpr int kPer = B * kChunks / kThreads;  // chunks per thread: 4 or 8
  constexpr int kN = kBatch < kPer ? kBatch : kPer;  // loads per batch
  static_assert(B * kChunks % kThreads == 0 && kPer % kN == 0, "whole batches");
#pragma unroll 1
  for (int u0 = 0; u0 < kPer; u0 += kN) {
    uint4 v[kN];
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      const int idx = threadIdx.x + (u0 + u) * kThreads, i = idx / kChunks;
      const int c = idx % kChunks * 8;
      v[u] = make_uint4(0u, 0u, 0u, 0u);
      if (i < n) v[u] = *reinterpret_cast<const uint4*>(src + (row0 + i) * stride + col + c);
    }
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      const int idx = threadIdx.x + (u0 + u) * kThreads, i = idx / kChunks;
      const int c = idx % kChunks * 8;
      *reinterpret_cast<uint4*>(dst + i * Dims<D>::kLdIn + c) = v[u];
    }
  }
}

// dst (fp32, row stride kLdScore) = X Y^T for 16 rows of X (from x) and 16 rows of Y
// (from y) over D columns; x and y point into [B][D + 8] shared tiles. Y^T is read as a
// column-major B operand.
template <int D>
__device__ void dot_rows(float* dst, const bf16* x, const bf16* y) {
  FragC acc;
  wmma::fill_fragment(acc, 0.0f);
#pragma unroll
  for (int kk = 0; kk < D; kk += W) {
    FragA a;
    FragBT b;
    wmma::load_matrix_sync(a, x + kk, Dims<D>::kLdIn);
    wmma::load_matrix_sync(b, y + kk, Dims<D>::kLdIn);
    wmma::mma_sync(acc, a, b, acc);
  }
  wmma::store_matrix_sync(dst, acc, kLdScore, wmma::mem_row_major);
}

// acc[c] += sum over kk < 4 of A_kk Y_kk,c for the D / 16 column blocks c: A_kk is the
// 16 x 16 fragment at a + kk * a_step (row- or column-major as FragX says, stride lda),
// Y_kk,c the block at row 16 kk, column 16 c of a [B][D + 8] shared tile y.
template <int D, class FragX>
__device__ void accumulate(FragC (&acc)[D / W], const bf16* a, int a_step, int lda,
                           const bf16* y) {
#pragma unroll
  for (int kk = 0; kk < B / W; ++kk) {
    FragX x;
    wmma::load_matrix_sync(x, a + kk * a_step, lda);
#pragma unroll
    for (int c = 0; c < D / W; ++c) {
      FragB b;
      wmma::load_matrix_sync(b, y + kk * W * Dims<D>::kLdIn + c * W, Dims<D>::kLdIn);
      wmma::mma_sync(acc[c], x, b, acc[c]);
    }
  }
}

// P = e^(scale S - lse) and dS = P (dP - D) scale on the 1024-element block of rows
// i0 .., columns j0 .. j0 + cols - 1 of the S and dP tiles (query rows, key columns; zero
// where masked and on rows whose lse is -inf: they saw no key), rounded to bf16 into sp
// (unless null) and sds. Lanes split the block.
__device__ void probs_and_dscores(bf16* sp, bf16* sds, const float* ss, const float* sdp,
                                  const float* slse, const float* sdelta, int i0, int j0,
                                  int cols, const TileDesc& t, int q0, int nq, int k0, int nk,
                                  float scale, int lane) {
  for (int e = lane; e < W * B; e += 32) {
    const int i = i0 + e / cols, j = j0 + e % cols, o = i * kLdScore + j;
    float p = 0.0f, ds = 0.0f;
    if (j < seen(t, q0, i, nq, k0, nk) && slse[i] != -INFINITY) {
      p = expf(ss[o] * scale - slse[i]);
      ds = p * (sdp[o] - sdelta[i]) * scale;
    }
    if (sp != nullptr) sp[i * kLdProb + j] = __float2bfloat16_rn(p);
    sds[i * kLdProb + j] = __float2bfloat16_rn(ds);
  }
}

template <int N>
__device__ void zero(FragC (&acc)[N]) {
#pragma unroll
  for (int c = 0; c < N; ++c) wmma::fill_fragment(acc[c], 0.0f);
}

// lse and D of query rows [row0, row0 + n) of head h into shared vectors (0 past n).
__device__ void load_row_stats(float* slse, float* sdelta, const float* lse, const float* delta,
                               int64_t row0, int n, int heads, int h) {
  if (const int i = threadIdx.x; i < B) {
    slse[i] = i < n ? lse[(row0 + i) * heads + h] : 0.0f;
    sdelta[i] = i < n ? delta[(row0 + i) * heads + h] : 0.0f;
  }
}

// Writes the first `rows` rows (at most 16; none when rows <= 0) of a warp's fp32 slab
// (row stride D + 4) as bf16 to dst rows row0 .., columns col .. col + D; lanes take
// column pairs, so each row is one coalesced store.
template <int D>
__device__ void store_slab(bf16* dst, int64_t row0, int64_t stride, int64_t col,
                           const float* slab, int rows, int lane) {
  for (int i = 0; i < rows && i < W; ++i) {
    const float* s = slab + i * Dims<D>::kLdAcc;
    bf16* d = dst + (row0 + i) * stride + col;
    for (int c = 2 * lane; c < D; c += 64)
      *reinterpret_cast<__nv_bfloat162*>(d + c) = __floats2bfloat162_rn(s[c], s[c + 1]);
  }
}

// Writes a warp's 16 x D register accumulator through its fp32 slab of the staging tile
// (row stride D + 4) to dst rows row0 .. row0 + rows - 1 (see store_slab).
template <int D>
__device__ void write_acc(bf16* dst, int64_t row0, int64_t stride, int64_t col,
                          const FragC (&acc)[D / W], float* slab, int rows, int lane) {
#pragma unroll
  for (int c = 0; c < D / W; ++c)
    wmma::store_matrix_sync(slab + c * W, acc[c], Dims<D>::kLdAcc, wmma::mem_row_major);
  __syncwarp();
  store_slab<D>(dst, row0, stride, col, slab, rows, lane);
  __syncwarp();  // the slab may be written again
}
#endif  // FLEXSP_TC_DEVICE_CODE

template <int D>
__global__ void __launch_bounds__(kThreads)
tc_forward_kernel(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                  const TileDesc* tiles, int heads, int kv_heads, float scale) {
#if FLEXSP_TC_DEVICE_CODE
  using L = Dims<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  Carve cv{smem};
  bf16* sq = cv.take<bf16>(L::kInTile);
  bf16* sk = cv.take<bf16>(L::kInTile);
  bf16* sv = cv.take<bf16>(L::kInTile);
  float* ss = cv.take<float>(L::kScoreTile);
  bf16* sp = cv.take<bf16>(L::kProbTile);
  float* so = cv.take<float>(L::kAccTile);
  const TileDesc tl = tiles[blockIdx.x / heads];
  const int h = blockIdx.x % heads, kvh = h / (heads / kv_heads), nq = tl.r1 - tl.r0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t qs = int64_t(heads) * D, ks = int64_t(kv_heads) * D;
  const int64_t qcol = int64_t(h) * D, kcol = int64_t(kvh) * D;
  const int64_t qrow0 = int64_t(tl.q) + tl.r0;
  load_rows<D>(sq, q, qrow0, nq, qs, qcol);
  for (int idx = threadIdx.x; idx < B * L::kLdAcc; idx += kThreads) so[idx] = 0.0f;
  // Row passes: lanes 2i and 2i+1 own row r = 16 warp + i, each every other column.
  const int r = warp * W + lane / 2, half = lane % 2;
  float m = -INFINITY, l = 0.0f;  // running max and sum of row r (equal in both lanes)
  const int kend = keys_seen(tl, tl.r1 - 1);  // keys the tile's last row sees
  for (int k0 = 0; k0 < kend; k0 += B) {
    const int nk = min(B, kend - k0);
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_rows<D>(sk, k, int64_t(tl.k) + k0, nk, ks, kcol);
    load_rows<D>(sv, v, int64_t(tl.k) + k0, nk, ks, kcol);
    __syncthreads();
    // S = Q K^T for the warp's 16 query rows.
#pragma unroll
    for (int kj = 0; kj < B / W; ++kj)
      dot_rows<D>(ss + warp * W * kLdScore + kj * W, sq + warp * W * L::kLdIn,
                  sk + kj * W * L::kLdIn);
    __syncwarp();
    // Online softmax of row r: scaled, masked scores; new max; P = e^(s - max) in bf16.
    float* srow = ss + r * kLdScore;
    float mx = m;
    const int nj = seen(tl, tl.r0, r, nq, k0, nk);
    for (int j = half; j < B; j += 2) {
      const float x = j < nj ? srow[j] * scale : -INFINITY;
      srow[j] = x;
      mx = fmaxf(mx, x);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    // mx stays -inf on rows past the sequence's end and rows that have seen no key yet:
    // their p, l and O stay 0.
    const float corr = m == -INFINITY ? 0.0f : expf(m - mx);
    float sum = 0.0f;
    bf16* prow = sp + r * kLdProb;
    for (int j = half; j < B; j += 2) {
      const float p = srow[j] == -INFINITY ? 0.0f : expf(srow[j] - mx);
      sum += p;
      prow[j] = __float2bfloat16_rn(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // a + b == b + a: equal in both lanes
    l = l * corr + sum;
    m = mx;
    for (int c = half; c < D; c += 2) so[r * L::kLdAcc + c] *= corr;
    __syncwarp();
    // O += P V for the warp's rows (the accumulator lives in its fp32 shared slab).
    FragC o[D / W];
    float* oslab = so + warp * W * L::kLdAcc;
#pragma unroll
    for (int c = 0; c < D / W; ++c)
      wmma::load_matrix_sync(o[c], oslab + c * W, L::kLdAcc, wmma::mem_row_major);
    accumulate<D, FragA>(o, sp + warp * W * kLdProb, W, kLdProb, sv);
#pragma unroll
    for (int c = 0; c < D / W; ++c)
      wmma::store_matrix_sync(oslab + c * W, o[c], L::kLdAcc, wmma::mem_row_major);
  }
  __syncwarp();
  if (r < nq) {
    // l >= 1 when the row saw a key (its max term contributes e^0); else out = 0, lse = -inf.
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float* orow = so + r * L::kLdAcc;
    for (int c = half; c < D; c += 2) orow[c] *= inv;
    if (half == 0) lse[(qrow0 + r) * heads + h] = l > 0.0f ? m + logf(l) : -INFINITY;
  }
  __syncwarp();
  store_slab<D>(out, qrow0 + warp * W, qs, qcol, so + warp * W * L::kLdAcc, nq - warp * W,
                lane);
#endif  // FLEXSP_TC_DEVICE_CODE
}

// delta[t, h] = sum_c dout[t, h, c] * out[t, h, c] in fp32, one warp per (t, h) pair
// (a contiguous run of D elements); items = tokens * heads.
template <int D>
__global__ void __launch_bounds__(kThreads)
tc_delta_kernel(float* delta, const bf16* dout, const bf16* out, int64_t items) {
#if FLEXSP_TC_DEVICE_CODE
  const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= items) return;  // the whole warp
  const int lane = threadIdx.x % 32;
  const bf16 *g = dout + item * D, *o = out + item * D;
  float acc = 0.0f;
  for (int c = 2 * lane; c < D; c += 64) {
    const float2 gv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(g + c));
    const float2 ov = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(o + c));
    acc = fmaf(gv.x, ov.x, acc);
    acc = fmaf(gv.y, ov.y, acc);
  }
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) delta[item] = acc;
#endif  // FLEXSP_TC_DEVICE_CODE
}

// Backward pass 1: dK, dV of one key tile of one kv head.
template <int D>
__global__ void __launch_bounds__(kThreads)
tc_backward_kv_kernel(bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                      const bf16* v, const float* lse, const float* delta,
                      const TileDesc* tiles, int heads, int kv_heads, float scale) {
#if FLEXSP_TC_DEVICE_CODE
  using L = Dims<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  Carve cv{smem};
  bf16* sk = cv.take<bf16>(L::kInTile);
  bf16* sv = cv.take<bf16>(L::kInTile);
  bf16* sq = cv.take<bf16>(L::kInTile);
  bf16* sdo = cv.take<bf16>(L::kInTile);
  float* ss = cv.take<float>(L::kScorePair);  // S, then dP at ss + B * kLdScore
  float* sdp = ss + B * kLdScore;
  float* stage = ss;  // after the loops: [B][kLdAcc] results
  bf16* sp = cv.take<bf16>(L::kProbTile);
  bf16* sds = cv.take<bf16>(L::kProbTile);
  float* slse = cv.take<float>(L::kRowVec);
  float* sdelta = cv.take<float>(L::kRowVec);
  const TileDesc kt = tiles[blockIdx.x / kv_heads];
  const int kvh = blockIdx.x % kv_heads, group = heads / kv_heads;
  const int k0 = kt.r0, nk = kt.r1 - kt.r0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t qs = int64_t(heads) * D, ks = int64_t(kv_heads) * D, kcol = int64_t(kvh) * D;
  const int64_t krow0 = int64_t(kt.k) + k0;
  load_rows<D>(sk, k, krow0, nk, ks, kcol);
  load_rows<D>(sv, v, krow0, nk, ks, kcol);
  FragC dk_acc[D / W], dv_acc[D / W];  // the warp's 16 keys x D
  zero(dk_acc), zero(dv_acc);
  const int kw = warp * W;  // the warp's keys: columns kw .. kw + 15 of S, P, dP, dS
  const int first = first_query(kt, k0) / B * B;  // the first query tile that sees a key
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const int64_t qcol = int64_t(h) * D;
    for (int r0 = first; r0 < kt.qlen; r0 += B) {
      const int nq = min(B, kt.qlen - r0);
      const int64_t qrow0 = int64_t(kt.q) + r0;
      __syncthreads();  // every warp is done with the previous query tile
      load_rows<D, 2>(sq, q, qrow0, nq, qs, qcol);
      load_rows<D, 2>(sdo, dout, qrow0, nq, qs, qcol);
      load_row_stats(slse, sdelta, lse, delta, qrow0, nq, heads, h);
      __syncthreads();
      // S = Q K^T and dP = dO V^T on the strip [64 queries] x [the warp's 16 keys].
#pragma unroll
      for (int qi = 0; qi < B / W; ++qi) {
        dot_rows<D>(ss + qi * W * kLdScore + kw, sq + qi * W * L::kLdIn, sk + kw * L::kLdIn);
        dot_rows<D>(sdp + qi * W * kLdScore + kw, sdo + qi * W * L::kLdIn, sv + kw * L::kLdIn);
      }
      __syncwarp();
      probs_and_dscores(sp, sds, ss, sdp, slse, sdelta, 0, kw, W, kt, r0, nq, k0, nk, scale,
                        lane);
      __syncwarp();
      // dV += P^T dO, dK += dS^T Q; P^T and dS^T are column-major reads of P and dS.
      accumulate<D, FragAT>(dv_acc, sp + kw, W * kLdProb, kLdProb, sdo);
      accumulate<D, FragAT>(dk_acc, sds + kw, W * kLdProb, kLdProb, sq);
    }
  }
  __syncthreads();  // S and dP are no longer read by any warp: they become the staging tile
  write_acc<D>(dk, krow0 + kw, ks, kcol, dk_acc, stage + kw * L::kLdAcc, nk - kw, lane);
  write_acc<D>(dv, krow0 + kw, ks, kcol, dv_acc, stage + kw * L::kLdAcc, nk - kw, lane);
#endif  // FLEXSP_TC_DEVICE_CODE
}

// Backward pass 2: dQ of one query tile of one head.
template <int D>
__global__ void __launch_bounds__(kThreads)
tc_backward_q_kernel(bf16* dq, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                     const float* lse, const float* delta, const TileDesc* tiles, int heads,
                     int kv_heads, float scale) {
#if FLEXSP_TC_DEVICE_CODE
  using L = Dims<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  Carve cv{smem};
  bf16* sq = cv.take<bf16>(L::kInTile);
  bf16* sdo = cv.take<bf16>(L::kInTile);
  bf16* sk = cv.take<bf16>(L::kInTile);
  bf16* sv = cv.take<bf16>(L::kInTile);
  float* ss = cv.take<float>(L::kScorePair);  // S, then dP at ss + B * kLdScore
  float* sdp = ss + B * kLdScore;
  float* stage = ss;
  bf16* sds = cv.take<bf16>(L::kProbTile);
  float* slse = cv.take<float>(L::kRowVec);
  float* sdelta = cv.take<float>(L::kRowVec);
  const TileDesc tl = tiles[blockIdx.x / heads];
  const int h = blockIdx.x % heads, kvh = h / (heads / kv_heads), nq = tl.r1 - tl.r0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t qs = int64_t(heads) * D, ks = int64_t(kv_heads) * D;
  const int64_t qcol = int64_t(h) * D, kcol = int64_t(kvh) * D;
  const int64_t qrow0 = int64_t(tl.q) + tl.r0;
  load_rows<D>(sq, q, qrow0, nq, qs, qcol);
  load_rows<D>(sdo, dout, qrow0, nq, qs, qcol);
  load_row_stats(slse, sdelta, lse, delta, qrow0, nq, heads, h);
  FragC dq_acc[D / W];  // the warp's 16 queries x D
  zero(dq_acc);
  const int qw = warp * W;  // the warp's queries: rows qw .. qw + 15
  const int kend = keys_seen(tl, tl.r1 - 1);
  for (int k0 = 0; k0 < kend; k0 += B) {
    const int nk = min(B, kend - k0);
    __syncthreads();  // every warp is done with the previous K and V tiles
    load_rows<D>(sk, k, int64_t(tl.k) + k0, nk, ks, kcol);
    load_rows<D>(sv, v, int64_t(tl.k) + k0, nk, ks, kcol);
    __syncthreads();
    // S = Q K^T and dP = dO V^T on the strip [the warp's 16 queries] x [64 keys].
#pragma unroll
    for (int kj = 0; kj < B / W; ++kj) {
      dot_rows<D>(ss + qw * kLdScore + kj * W, sq + qw * L::kLdIn, sk + kj * W * L::kLdIn);
      dot_rows<D>(sdp + qw * kLdScore + kj * W, sdo + qw * L::kLdIn, sv + kj * W * L::kLdIn);
    }
    __syncwarp();
    probs_and_dscores(nullptr, sds, ss, sdp, slse, sdelta, qw, 0, B, tl, tl.r0, nq, k0, nk,
                      scale, lane);
    __syncwarp();
    accumulate<D, FragA>(dq_acc, sds + qw * kLdProb, W, kLdProb, sk);  // dQ += dS K
  }
  __syncthreads();  // S and dP are no longer read by any warp: they become the staging tile
  write_acc<D>(dq, qrow0 + qw, qs, qcol, dq_acc, stage + qw * L::kLdAcc, nq - qw, lane);
#endif  // FLEXSP_TC_DEVICE_CODE
}

// ---- host side ---------------------------------------------------------------------------

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
const bf16* as_bf16(const void* p) { return static_cast<const bf16*>(p); }

void check_shape(const cpu::AttnShape& s, const TileList& map) {
  FLEXSP_ASSERT(s.heads > 0 && s.kv_heads > 0 && s.heads % s.kv_heads == 0);
  FLEXSP_ASSERT(s.nseq >= 0 && (map.count == 0 || map.by_query != nullptr));
  FLEXSP_CHECK(s.head_dim == 64 || s.head_dim == 128,
               "attention_tc: head_dim {} is not supported (64 or 128)", s.head_dim);
}

// Launches `kernel` on tiles x heads blocks of kThreads, one per (tile, head), the head
// varying fastest: blocks start in the order of the longest-first tile list for all heads
// at once (a 2-D grid would start every tile of head 0 before any of head 1, leaving the
// last head's longest tiles for the end). Raises the dynamic shared-memory limit first.
template <class K, class... Args>
void launch(K* kernel, int tiles, int heads, size_t smem, cudaStream_t stream, Args... args) {
  const int64_t blocks = int64_t(tiles) * heads;
  if (blocks == 0) return;
  FLEXSP_CHECK(blocks < (int64_t(1) << 31), "attention_tc: {} x {} blocks is too many", tiles,
               heads);
  FLEXSP_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(args...);
  FLEXSP_CUDA_CHECK(cudaGetLastError());
}

template <int D>
void forward_d(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
               const cpu::AttnShape& s, const TileList& map, cudaStream_t stream) {
  launch(tc_forward_kernel<D>, map.count, s.heads, Dims<D>::kForward, stream, out, lse, q, k,
         v, map.by_query, s.heads, s.kv_heads, static_cast<float>(s.scale));
}

template <int D>
void backward_d(bf16* dq, bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k,
                const bf16* v, const bf16* out, const float* lse, const cpu::AttnShape& s,
                const TileList& map, Scratch& scratch, cudaStream_t stream) {
  const float scale = static_cast<float>(s.scale);
  const int64_t items = map.tokens * s.heads;  // (token, head) pairs, one warp each
  auto* delta = static_cast<float*>(scratch.acquire(static_cast<size_t>(items) * sizeof(float)));
  launch(tc_delta_kernel<D>, static_cast<int>((items + kWarps - 1) / kWarps), 1, 0, stream,
         delta, dout, out, items);
  launch(tc_backward_kv_kernel<D>, map.key_count, s.kv_heads, Dims<D>::kBackwardKV, stream, dk, dv,
         dout, q, k, v, lse, delta, map.by_key, s.heads, s.kv_heads, scale);
  launch(tc_backward_q_kernel<D>, map.count, s.heads, Dims<D>::kBackwardQ, stream, dq, dout, q,
         k, v, lse, delta, map.by_query, s.heads, s.kv_heads, scale);
  scratch.release(delta);
}

size_t max_smem(int head_dim) { return head_dim == 64 ? Dims<64>::kMax : Dims<128>::kMax; }

}  // namespace

bool attention_tc_supported(int head_dim) {
  if (head_dim != 64 && head_dim != 128) return false;
  int dev = 0, optin = 0;
  cudaFuncAttributes attr{};
  // cudaFuncGetAttributes fails when the binary holds no code this device can run;
  // ptxVersion is the virtual architecture the kernels were compiled for (below 80: the
  // empty kernels of the __CUDA_ARCH__ guard).
  const bool ok =
      cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) ==
          cudaSuccess &&
      (head_dim == 64 ? cudaFuncGetAttributes(&attr, tc_backward_kv_kernel<64>)
                      : cudaFuncGetAttributes(&attr, tc_backward_kv_kernel<128>)) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();  // leave no error behind for the next launch check
  return ok && attr.ptxVersion >= 80 && static_cast<size_t>(optin) >= max_smem(head_dim);
}

void attention_tc_forward(void* out, float* lse, const void* q, const void* k, const void* v,
                          const cpu::AttnShape& s, const TileList& map, cudaStream_t stream) {
  FLEXSP_CHECK(aligned16(out) && aligned16(q) && aligned16(k) && aligned16(v),
               "attention_tc_forward: buffers must be 16-byte aligned");
  check_shape(s, map);
  if (map.count == 0) return;
  auto f = s.head_dim == 64 ? forward_d<64> : forward_d<128>;
  f(static_cast<bf16*>(out), lse, as_bf16(q), as_bf16(k), as_bf16(v), s, map, stream);
}

void attention_tc_backward(void* dq, void* dk, void* dv, const void* dout, const void* q,
                           const void* k, const void* v, const void* out, const float* lse,
                           const cpu::AttnShape& s, const TileList& map, Scratch& scratch,
                           cudaStream_t stream) {
  FLEXSP_CHECK(aligned16(dq) && aligned16(dk) && aligned16(dv) && aligned16(dout) &&
                   aligned16(q) && aligned16(k) && aligned16(v) && aligned16(out),
               "attention_tc_backward: buffers must be 16-byte aligned");
  check_shape(s, map);
  if (map.count == 0 && map.key_count == 0) return;
  auto b = s.head_dim == 64 ? backward_d<64> : backward_d<128>;
  b(static_cast<bf16*>(dq), static_cast<bf16*>(dk), static_cast<bf16*>(dv), as_bf16(dout),
    as_bf16(q), as_bf16(k), as_bf16(v), as_bf16(out), lse, s, map, scratch, stream);
}

}  // namespace flexsp::cuda

// Varlen causal attention with grouped-query heads, blockwise (flash-attention style).
//
// Memory: nothing of size s x s exists. The forward walks a query tile (kAttnTile rows of
// one sequence and one head) over the key tiles it may see, keeping per row a running max
// m, a running sum l and an unnormalised output accumulator; at the end out = acc / l and
// lse = m + log(l) is saved. The backward recomputes p = exp(scale*q.k - lse) tile by
// tile. It runs in two passes so that every output row has exactly one writer (no atomics,
// results independent of the thread count):
//   pass 1, one work item per (sequence, kv head, key tile): loops over the query heads of
//           the group and the query tiles at or after the key tile; accumulates dk, dv;
//   pass 2, one work item per (sequence, head, query tile): loops over key tiles; dq.
// This recomputes the scores once more than a single pass with atomics would (7 instead of
// 5 tile products), the price of determinism on CPU.
//
// Speed: every product is a small tile GEMM with a register-blocked kernel written with
// GCC vector extensions, and the exponential of float scores is a vectorised polynomial
// (a few ulp from expf). The algorithm (attention_impl.inc) is compiled twice: portable,
// and on x86-64 for AVX2+FMA, chosen at run time from the CPU (FLEXSP_CPU_PORTABLE=1
// forces the portable one). BLAS is not used for the tiles: they are too small for its
// call overhead and it must not be called from inside OpenMP regions.
// Causality inside a sequence: query i sees keys 0..i; since tiles are aligned to multiples
// of kAttnTile from the sequence start, row i of a tile starting at q0 sees in the key
// tile starting at k0 <= q0 the first min(tile keys, i - k0 + 1) keys.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "lib/util/error.h"

namespace flexsp::cpu {
namespace {

constexpr int B = kAttnTile;

// A tile of one sequence: rows [seq + r0, seq + r1) of the packed stream, r0 relative to the
// sequence start (a multiple of B), len = the sequence length.
struct Tile {
  int64_t seq;  // first row of the sequence in the packed stream
  int64_t r0, r1, len;
};

std::vector<Tile> make_tiles(const AttnShape& s) {
  FLEXSP_ASSERT(s.heads > 0 && s.kv_heads > 0 && s.heads % s.kv_heads == 0);
  FLEXSP_ASSERT(s.head_dim > 0 && s.cu_seqlens != nullptr && s.nseq >= 0);
  std::vector<Tile> tiles;
  for (int i = 0; i < s.nseq; ++i) {
    const int64_t b = s.cu_seqlens[i], len = s.cu_seqlens[i + 1] - b;
    FLEXSP_ASSERT(len >= 0);
    for (int64_t r0 = 0; r0 < len; r0 += B) tiles.push_back({b, r0, std::min(len, r0 + B), len});
  }
  // Longest work first (tiles late in long sequences see the most keys): better balance
  // under dynamic scheduling.
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const Tile& a, const Tile& b) { return a.r1 > b.r1; });
  return tiles;
}

namespace portable {
constexpr int kVecBytes = 16;
#include "kernels/cpu/attention_impl.inc"
}  // namespace portable

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLEXSP_ATTN_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
constexpr int kVecBytes = 32;
#include "kernels/cpu/attention_impl.inc"
}  // namespace avx2
#pragma GCC pop_options
#endif

bool use_avx2() {
#ifdef FLEXSP_ATTN_AVX2
  static const bool yes = [] {
    const char* env = std::getenv("FLEXSP_CPU_PORTABLE");
    if (env != nullptr && env[0] != '\0' && env[0] != '0') return false;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace

const char* attention_isa() { return use_avx2() ? "avx2" : "portable"; }

template <class T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const AttnShape& s) {
  const std::vector<Tile> tiles = make_tiles(s);
#ifdef FLEXSP_ATTN_AVX2
  if (use_avx2()) return avx2::forward_impl(out, lse, q, k, v, s, tiles);
#endif
  portable::forward_impl(out, lse, q, k, v, s, tiles);
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const AttnShape& s) {
  const std::vector<Tile> tiles = make_tiles(s);
#ifdef FLEXSP_ATTN_AVX2
  if (use_avx2()) return avx2::backward_impl(dq, dk, dv, dout, q, k, v, out, lse, s, tiles);
#endif
  portable::backward_impl(dq, dk, dv, dout, q, k, v, out, lse, s, tiles);
}

template void attention_forward<float>(float*, float*, const float*, const float*, const float*,
                                       const AttnShape&);
template void attention_forward<double>(double*, double*, const double*, const double*,
                                        const double*, const AttnShape&);
template void attention_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, const float*,
                                        const AttnShape&);
template void attention_backward<double>(double*, double*, double*, const double*,
                                         const double*, const double*, const double*,
                                         const double*, const double*, const AttnShape&);

}  // namespace flexsp::cpu

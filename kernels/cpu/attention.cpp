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
// Causality inside a sequence: query row i sees keys 0 .. i + offset of its span
// (AttnSpan::keys_seen; offset 0 when keys are the queries). Tiles are aligned to
// multiples of kAttnTile from each side's sequence start; the forward and dq pass walk only
// the key tiles the last row of a query tile sees, the dk/dv pass only the query tiles from
// the first one that sees the key tile, and rows that see no key of a tile are masked whole.
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

// A tile of one span: rows [r0, r1) relative to the span's query start (query tiles) or
// key start (key tiles); r0 a multiple of B.
struct Tile {
  const AttnSpan* sp;
  int64_t r0, r1;
};

void check_shape(const AttnShape& s) {
  FLEXSP_ASSERT(s.heads > 0 && s.kv_heads > 0 && s.heads % s.kv_heads == 0);
  FLEXSP_ASSERT(s.head_dim > 0 && s.cu_seqlens != nullptr && s.nseq >= 0);
}

// Tiles over the query rows (keys = false) or key rows of every span, longest work first
// (under dynamic scheduling the big items must not come last): query tiles by the keys
// their last row sees, key tiles by the query rows that see them.
std::vector<Tile> make_tiles(const std::vector<AttnSpan>& spans, bool keys) {
  std::vector<Tile> tiles;
  for (const AttnSpan& sp : spans) {
    const int64_t len = keys ? sp.klen : sp.qlen;
    for (int64_t r0 = 0; r0 < len; r0 += B) tiles.push_back({&sp, r0, std::min(len, r0 + B)});
  }
  auto work = [keys](const Tile& t) {
    return keys ? t.sp->qlen - std::min(t.sp->qlen, t.sp->first_query(t.r0))
                : t.sp->keys_seen(t.r1 - 1);
  };
  std::stable_sort(tiles.begin(), tiles.end(),
                   [&](const Tile& a, const Tile& b) { return work(a) > work(b); });
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

const char* attention_isa() { return use_avx2() ? "avx2+fma" : "portable"; }

std::vector<AttnSpan> attention_spans(const AttnShape& s, bool host_copies) {
  const int32_t* cu = host_copies ? s.cu_seqlens_host : s.cu_seqlens;
  const int32_t* cuk = s.cu_seqlens_k == nullptr ? cu
                       : host_copies             ? s.cu_seqlens_k_host
                                                 : s.cu_seqlens_k;
  const int32_t* off = host_copies && s.causal_offset != nullptr ? s.causal_offset_host
                                                                  : s.causal_offset;
  FLEXSP_CHECK(cu != nullptr || s.nseq == 0, "attention: AttnShape::{} is not set",
               host_copies ? "cu_seqlens_host" : "cu_seqlens");
  FLEXSP_CHECK(cuk != nullptr || s.nseq == 0,
               "attention: AttnShape::cu_seqlens_k_host is not set (the host copy of "
               "cu_seqlens_k)");
  FLEXSP_CHECK(off != nullptr || s.causal_offset == nullptr,
               "attention: AttnShape::causal_offset_host is not set (the host copy of "
               "causal_offset)");
  std::vector<AttnSpan> spans(static_cast<size_t>(std::max(s.nseq, 0)));
  for (int i = 0; i < s.nseq; ++i) {
    AttnSpan& sp = spans[static_cast<size_t>(i)];
    sp.q = cu[i];
    sp.k = cuk[i];
    sp.qlen = cu[i + 1] - cu[i];
    sp.klen = cuk[i + 1] - cuk[i];
    FLEXSP_CHECK(sp.qlen >= 0 && sp.klen >= 0, "attention: sequence {} has a negative length",
                 i);
    sp.off = off != nullptr ? off[i] : sp.klen - sp.qlen;
  }
  return spans;
}

std::pair<int64_t, int64_t> attention_rows(const AttnShape& s) {
  if (s.nseq <= 0) return {0, 0};
  const int64_t nq = s.cu_seqlens[s.nseq];
  return {nq, s.cu_seqlens_k != nullptr ? s.cu_seqlens_k[s.nseq] : nq};
}

template <class T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const AttnShape& s) {
  check_shape(s);
  const std::vector<AttnSpan> spans = attention_spans(s);
  const std::vector<Tile> tiles = make_tiles(spans, false);
#ifdef FLEXSP_ATTN_AVX2
  if (use_avx2()) return avx2::forward_impl(out, lse, q, k, v, s, tiles);
#endif
  portable::forward_impl(out, lse, q, k, v, s, tiles);
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const AttnShape& s) {
  check_shape(s);
  const std::vector<AttnSpan> spans = attention_spans(s);
  const std::vector<Tile> qtiles = make_tiles(spans, false), ktiles = make_tiles(spans, true);
#ifdef FLEXSP_ATTN_AVX2
  if (use_avx2())
    return avx2::backward_impl(dq, dk, dv, dout, q, k, v, out, lse, s, qtiles, ktiles);
#endif
  portable::backward_impl(dq, dk, dv, dout, q, k, v, out, lse, s, qtiles, ktiles);
}

template <class T>
void attention_merge(T* out, T* lse, const T* out_b, const T* lse_b, int64_t rows, int heads,
                     int head_dim) {
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const int64_t n = rows * heads;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const T a = lse[r], b = lse_b[r];
    if (b == neg_inf) continue;  // the other side saw no key: nothing to add
    T* o = out + r * head_dim;
    const T* ob = out_b + r * head_dim;
    if (a == neg_inf) {
      std::copy_n(ob, head_dim, o);
      lse[r] = b;
      continue;
    }
    const T m = std::max(a, b), wa = std::exp(a - m), wb = std::exp(b - m), sum = wa + wb;
    const T ca = wa / sum, cb = wb / sum;
    for (int d = 0; d < head_dim; ++d) o[d] = ca * o[d] + cb * ob[d];
    lse[r] = m + std::log(sum);
  }
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
template void attention_merge<float>(float*, float*, const float*, const float*, int64_t, int,
                                     int);
template void attention_merge<double>(double*, double*, const double*, const double*, int64_t,
                                      int, int);

}  // namespace flexsp::cpu

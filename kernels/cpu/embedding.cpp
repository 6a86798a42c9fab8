// Token embedding: a row gather forward, a row scatter-add backward. Negative ids (rows
// held by another tensor-parallel rank) give zero rows and no gradient.
// The backward must add rows of repeated tokens without races and in a fixed order:
// each thread owns a block of embedding columns and walks all tokens in order, so the
// result does not depend on the thread count (no atomics, no per-thread copies).
#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace flexsp::cpu {

template <class T>
void embedding_forward(T* out, const T* table, const int32_t* ids, int64_t n, int64_t dim) {
#pragma omp parallel for schedule(static) if (n * dim > 65536)
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0)
      std::fill(out + t * dim, out + (t + 1) * dim, T(0));
    else
      std::memcpy(out + t * dim, table + static_cast<int64_t>(ids[t]) * dim, dim * sizeof(T));
  }
}

template <class T>
void embedding_backward(T* dtable, const T* dout, const int32_t* ids, int64_t n, int64_t dim) {
  constexpr int64_t kCols = 32;
  const int64_t blocks = (dim + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (n * dim > 65536)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * kCols, j1 = std::min(dim, j0 + kCols);
    for (int64_t t = 0; t < n; ++t) {
      if (ids[t] < 0) continue;
      T* row = dtable + static_cast<int64_t>(ids[t]) * dim;
      const T* src = dout + t * dim;
      for (int64_t j = j0; j < j1; ++j) row[j] += src[j];
    }
  }
}

template void embedding_forward<float>(float*, const float*, const int32_t*, int64_t, int64_t);
template void embedding_forward<double>(double*, const double*, const int32_t*, int64_t,
                                        int64_t);
template void embedding_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t);
template void embedding_backward<double>(double*, const double*, const int32_t*, int64_t,
                                         int64_t);

}  // namespace flexsp::cpu

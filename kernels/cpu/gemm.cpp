// GEMM: every matrix product of the model goes through here, i.e. through OpenBLAS.
// Row-major throughout (the activations are [tokens, features]); the transposes let the
// model use weights stored as HF's [out, in] without copies: y = x W^T is gemm(N, T).
#include <cblas.h>

#include <climits>

#include "kernels/cpu/cpu_kernels.h"
#include "lib/util/error.h"

namespace flexsp::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  FLEXSP_ASSERT(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX &&
                ldb <= INT_MAX && ldc <= INT_MAX);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
              beta, c, static_cast<int>(ldc));
}

}  // namespace flexsp::cpu

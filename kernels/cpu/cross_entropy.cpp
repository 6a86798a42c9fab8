// Softmax cross-entropy over the vocabulary, one row per token. Ignored rows (target -1)
// give loss 0 and gradient 0. The forward saves the row's log-sum-exp so the backward
// computes softmax in one pass, in place over the logits (the model never holds logits and
// their gradient at once). Row sums accumulate in double.
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_kernels.h"

namespace flexsp::cpu {

template <class T>
void cross_entropy_forward(T* loss, T* lse, const T* logits, const int32_t* targets, int64_t n,
                           int64_t vocab) {
#pragma omp parallel for schedule(static) if (n * vocab > 65536)
  for (int64_t t = 0; t < n; ++t) {
    const T* z = logits + t * vocab;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < vocab; ++j) mx = z[j] > mx ? z[j] : mx;
    double s = 0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(z[j] - mx);
    const double l = static_cast<double>(mx) + std::log(s);
    lse[t] = static_cast<T>(l);
    loss[t] = targets[t] < 0 ? T(0) : static_cast<T>(l - static_cast<double>(z[targets[t]]));
  }
}

template <class T>
void cross_entropy_backward(T* dlogits, const T* logits, const T* lse, const int32_t* targets,
                            int64_t n, int64_t vocab, double scale) {
  const T sc = static_cast<T>(scale);
#pragma omp parallel for schedule(static) if (n * vocab > 65536)
  for (int64_t t = 0; t < n; ++t) {
    const T* z = logits + t * vocab;
    T* d = dlogits + t * vocab;
    if (targets[t] < 0) {
      for (int64_t j = 0; j < vocab; ++j) d[j] = T(0);
      continue;
    }
    const T l = lse[t];
    for (int64_t j = 0; j < vocab; ++j) d[j] = sc * std::exp(z[j] - l);
    d[targets[t]] -= sc;
  }
}

template void cross_entropy_forward<float>(float*, float*, const float*, const int32_t*,
                                           int64_t, int64_t);
template void cross_entropy_forward<double>(double*, double*, const double*, const int32_t*,
                                            int64_t, int64_t);
template void cross_entropy_backward<float>(float*, const float*, const float*, const int32_t*,
                                            int64_t, int64_t, double);
template void cross_entropy_backward<double>(double*, const double*, const double*,
                                             const int32_t*, int64_t, int64_t, double);

}  // namespace flexsp::cpu

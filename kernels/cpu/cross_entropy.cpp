// Softmax cross-entropy over the vocabulary, one row per token. Ignored rows (target -1)
// give loss 0 and gradient 0. The forward saves the row's log-sum-exp so the backward
// computes softmax in one pass, in place over the logits (the model never holds logits and
// their gradient at once). Row sums accumulate in double.
// The shard forms split a row's vocabulary over tensor-parallel ranks: each reduces its
// columns to (max, sum of exponentials, target logit), the ranks exchange those 3 floats
// per row, and every rank combines them into the row's lse and loss (the max is rescaled
// per shard, so no shard's exponentials overflow).
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

void cross_entropy_shard_stats(float* stats, const float* logits, const int32_t* targets,
                               int64_t n, int64_t vocab, int64_t valid) {
#pragma omp parallel for schedule(static) if (n * vocab > 65536)
  for (int64_t t = 0; t < n; ++t) {
    const float* z = logits + t * vocab;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < valid; ++j) mx = z[j] > mx ? z[j] : mx;
    double s = 0;
    for (int64_t j = 0; j < valid; ++j) s += std::exp(z[j] - mx);
    const int32_t tg = targets[t];
    stats[t * 3] = mx;
    stats[t * 3 + 1] = static_cast<float>(s);
    stats[t * 3 + 2] = tg >= 0 && tg < valid ? z[tg] : 0.0f;
  }
}

void cross_entropy_shard_loss(float* loss, float* lse, const float* stats, int parts,
                              const int32_t* targets, int64_t n) {
#pragma omp parallel for schedule(static) if (n * parts > 65536)
  for (int64_t t = 0; t < n; ++t) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int r = 0; r < parts; ++r) {
      const float m = stats[(r * n + t) * 3];
      mx = m > mx ? m : mx;
    }
    double s = 0, zt = 0;
    for (int r = 0; r < parts; ++r) {
      const float* st = stats + (r * n + t) * 3;
      if (st[1] > 0) s += static_cast<double>(st[1]) * std::exp(static_cast<double>(st[0]) - mx);
      zt += st[2];
    }
    const double l = static_cast<double>(mx) + std::log(s);
    lse[t] = static_cast<float>(l);
    loss[t] = targets[t] < 0 ? 0.0f : static_cast<float>(l - zt);
  }
}

template <class T>
void cross_entropy_shard_backward(T* dlogits, const T* logits, const float* lse,
                                  const int32_t* targets, int64_t n, int64_t vocab,
                                  int64_t valid, double scale) {
  const T sc = static_cast<T>(scale);
#pragma omp parallel for schedule(static) if (n * vocab > 65536)
  for (int64_t t = 0; t < n; ++t) {
    const T* z = logits + t * vocab;
    T* d = dlogits + t * vocab;
    const int32_t tg = targets[t];
    if (tg < 0) {
      for (int64_t j = 0; j < vocab; ++j) d[j] = T(0);
      continue;
    }
    const T l = static_cast<T>(lse[t]);
    for (int64_t j = 0; j < vocab; ++j) d[j] = j < valid ? sc * std::exp(z[j] - l) : T(0);
    if (tg < valid) d[tg] -= sc;
  }
}

template void cross_entropy_shard_backward<float>(float*, const float*, const float*,
                                                  const int32_t*, int64_t, int64_t, int64_t,
                                                  double);
template void cross_entropy_shard_backward<double>(double*, const double*, const float*,
                                                   const int32_t*, int64_t, int64_t, int64_t,
                                                   double);
template void cross_entropy_forward<float>(float*, float*, const float*, const int32_t*,
                                           int64_t, int64_t);
template void cross_entropy_forward<double>(double*, double*, const double*, const int32_t*,
                                            int64_t, int64_t);
template void cross_entropy_backward<float>(float*, const float*, const float*, const int32_t*,
                                            int64_t, int64_t, double);
template void cross_entropy_backward<double>(double*, const double*, const double*,
                                             const int32_t*, int64_t, int64_t, double);

}  // namespace flexsp::cpu

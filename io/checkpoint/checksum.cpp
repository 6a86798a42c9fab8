// The checkpoint checksum (see checksum.h).
#include "io/checkpoint/checksum.h"

#include <algorithm>
#include <cstring>

namespace flexsp {

namespace {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One body, vectorized by the compiler for each target below.
inline uint64_t sum_terms(const float* data, int64_t first, int64_t n) {
  uint64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof bits);
    sum += splitmix64(static_cast<uint64_t>(first + i) * 0x9e3779b97f4a7c15ull + bits);
  }
  return sum;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx512dq"))) uint64_t sum_terms_avx512(const float* data, int64_t first,
                                                                       int64_t n) {
  return sum_terms(data, first, n);
}
bool has_avx512() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  }();
  return yes;
}
#endif

}  // namespace

uint64_t checksum_f32(const float* data, int64_t first, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx512()) return sum_terms_avx512(data, first, n);
#endif
  return sum_terms(data, first, n);
}

uint64_t block_checksum(const ParamView& v, const float* data, int64_t a, int64_t b) {
  if (v.cols == v.full_cols) return checksum_f32(data, v.full_index(a), b - a);  // rows in one run
  uint64_t sum = 0;
  for (int64_t e = a; e < b;) {
    const int64_t n = std::min(b, (e / v.cols + 1) * v.cols) - e;  // to the row's end
    sum += checksum_f32(data + (e - a), v.full_index(e), n);
    e += n;
  }
  return sum;
}

}  // namespace flexsp

// Helpers for the kernel tests: a deterministic generator, finite differences in double,
// and relative-error comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace flexsp::testing {

// splitmix64: the same numbers on every platform (unlike <random> distributions).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform(double lo = -1, double hi = 1) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t s_;
};

inline std::vector<double> random_vec(Rng& r, size_t n, double lo = -1, double hi = 1) {
  std::vector<double> v(n);
  for (double& x : v) x = r.uniform(lo, hi);
  return v;
}

template <class To, class From>
std::vector<To> cast_vec(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// max_i |a_i - b_i| / max(max_i |b_i|, floor): error relative to the scale of the
// reference; `floor` keeps an all-zero reference (e.g. attention gradients of 1-token
// sequences) from turning rounding noise into a huge relative error.
inline double rel_err(const std::vector<double>& a, const std::vector<double>& b,
                      double floor = 1e-30) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = floor;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

// Checks grad against central differences of f at every index of x (or `samples` random
// ones): |fd - g| <= tol * (max |g| + 1e-12). f reads x.
inline void check_fd(const std::function<double()>& f, std::vector<double>& x,
                     const std::vector<double>& grad, double tol, const char* what,
                     int samples = -1, uint64_t seed = 7) {
  ASSERT_EQ(x.size(), grad.size());
  double scale = 1e-12;
  for (double g : grad) scale = std::max(scale, std::fabs(g));
  Rng r(seed);
  const size_t n = x.size();
  const size_t count = samples < 0 ? n : std::min<size_t>(n, static_cast<size_t>(samples));
  for (size_t s = 0; s < count; ++s) {
    const size_t i = samples < 0 ? s : static_cast<size_t>(r.next() % n);
    const double h = 1e-5 * std::max(1.0, std::fabs(x[i])), x0 = x[i];
    x[i] = x0 + h;
    const double fp = f();
    x[i] = x0 - h;
    const double fm = f();
    x[i] = x0;
    const double fd = (fp - fm) / (2 * h);
    EXPECT_NEAR(fd, grad[i], tol * scale) << what << " index " << i;
  }
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace flexsp::testing

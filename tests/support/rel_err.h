// Norm-relative error ||a - b|| / ||b|| of two equally long float vectors (b is the
// reference), the measure the equivalence tests use.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace flexsp {

// Over n floats at a and b.
inline double norm_rel_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline double norm_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  return norm_rel_err(a.data(), b.data(), a.size());
}

}  // namespace flexsp

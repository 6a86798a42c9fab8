// Helpers for the GPU tests: skip without a device, move vectors to and from a backend
// (support/backend_buffers.h), compare against the CPU reference (relative error +
// NaN/unwritten checks).
// Thresholds: fp32 kernels must match their CPU twins to rel_err <= 1e-5 (kFp32Tol); the
// bf16 mixed-precision backend (issue 8, next step) will be held to 1e-2 (kBf16Tol).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#include "lib/backend/backend.h"
#include "support/backend_buffers.h"
#include "unit/test_kernels_common.h"

namespace flexsp::testing {

constexpr double kFp32Tol = 1e-5;
constexpr double kBf16Tol = 1e-2;  // for the bf16 backend, not used yet

#define FLEXSP_REQUIRE_GPU()                                                 \
  do {                                                                       \
    if (::flexsp::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

inline std::vector<float> random_floats(Rng& r, size_t n, double lo = -1, double hi = 1) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(r.uniform(lo, hi));
  return v;
}

// NaN-filled host vector: outputs start poisoned, so an element a kernel never writes fails.
inline std::vector<float> poison(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// got vs want (the CPU reference): no NaN/Inf where want is finite, rel_err <= tol.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                         const std::string& what, double floor = 1e-30) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::isfinite(want[i]) && !std::isfinite(got[i])) {
      if (bad++ == 0) ADD_FAILURE() << what << ": element " << i << " is " << got[i];
    }
  EXPECT_EQ(bad, 0u) << what << ": non-finite elements";
  const double e = rel_err(cast_vec<double>(got), cast_vec<double>(want), floor);
  EXPECT_LE(e, tol) << what << " (" << got.size() << " elements)";
}

}  // namespace flexsp::testing

// Helpers for the GPU tests: skip without a device, move vectors to and from a backend
// (support/backend_buffers.h), activation buffers of either type (ActBuffer), compare
// against the CPU reference (relative error + NaN/unwritten checks).
// Thresholds (relative error as rel_err: max|got - want| / max|want|, per tensor): fp32
// kernels must match their CPU twins to 1e-5 (kFp32Tol); the bf16 mixed-precision
// backend is compared with the CPU backend's bf16 emulation on identical
// inputs and held to 1e-2 (kBf16Tol). Both round each output once from fp32 values that
// differ by fp32 noise, so they differ by at most one bf16 ulp (2^-8 relative, < 8e-3 of
// the tensor's largest element) wherever they differ at all.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#include "lib/backend/backend.h"
#include "lib/model/rope.h"
#include "lib/util/dtype.h"
#include "support/backend_buffers.h"
#include "unit/test_kernels_common.h"

namespace flexsp::testing {

constexpr double kFp32Tol = 1e-5;
constexpr double kBf16Tol = 1e-2;

#define FLEXSP_REQUIRE_GPU()                                                 \
  do {                                                                       \
    if (::flexsp::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

inline std::vector<float> random_floats(Rng& r, size_t n, double lo = -1, double hi = 1) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(r.uniform(lo, hi));
  return v;
}

// RoPE frequency tables as the model builds them (lib/model/rope.h): theta = 10000 without
// scaling, then llama3-scaled (factor 8, original context 256: every hd >= 8 has pairs in
// all three bands).
inline std::vector<std::vector<double>> rope_tables(int hd) {
  ModelConfig c;
  c.head_dim = hd;
  std::vector<std::vector<double>> t = {rope_inv_freq(c)};
  c.rope_scaling = RopeScaling::llama3;
  c.rope_scaling_factor = 8;
  c.rope_original_max_position = 256;
  t.push_back(rope_inv_freq(c));
  return t;
}

// NaN-filled host vector: outputs start poisoned, so an element a kernel never writes fails.
inline std::vector<float> poison(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// Values exactly representable in bf16 (so a bf16 upload loses nothing and both backends
// see the same inputs).
inline std::vector<float> random_bf16(Rng& r, size_t n, double lo = -1, double hi = 1) {
  std::vector<float> v = random_floats(r, n, lo, hi);
  for (float& x : v) x = round_bf16(x);
  return v;
}

// An activation buffer: n elements of the backend's act_dtype() (fp32, or bf16 stored as
// uint16_t), moved to and from the host as floats (rounded to bf16 on the way in).
struct ActBuffer {
  Buffer<char> buf;
  size_t n = 0;
  void* get() const { return buf.get(); }
};

// Host floats in a backend's activation type (raw bytes, to copy_from_host).
inline std::vector<char> to_act_bytes(DType act, const std::vector<float>& v) {
  std::vector<char> bytes(v.size() * dtype_size(act));
  if (act == DType::bf16) {
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = float_to_bf16(v[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  } else {
    EXPECT_EQ(act, DType::f32);
    if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
  }
  return bytes;
}

inline ActBuffer upload_act(Backend& be, const std::vector<float>& v) {
  ActBuffer a{Buffer<char>(be, v.size() * be.act_size()), v.size()};
  const std::vector<char> bytes = to_act_bytes(be.act_dtype(), v);
  if (!bytes.empty()) be.copy_from_host(a.get(), bytes.data(), bytes.size());
  return a;
}

inline std::vector<float> download_act(Backend& be, const ActBuffer& a) {
  std::vector<char> bytes(a.n * be.act_size());
  if (!bytes.empty()) be.copy_to_host(bytes.data(), a.get(), bytes.size());
  std::vector<float> v(a.n);
  if (be.act_dtype() == DType::bf16) {
    for (size_t i = 0; i < a.n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      v[i] = bf16_to_float(h);
    }
  } else if (a.n > 0) {
    std::memcpy(v.data(), bytes.data(), bytes.size());
  }
  return v;
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

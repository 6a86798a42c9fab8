// Element types of buffers that cross an interface as raw bytes (communicators, the
// backend's activations), and bf16 on the host.
//
// bf16 is the upper half of an IEEE fp32: float -> bf16 rounds to nearest, ties to even,
// NaNs stay NaNs (quieted), overflow goes to infinity, subnormals round like any other
// value; bf16 -> float is exact. This is the one definition of bf16 rounding in host
// code: the CPU backend's bf16 mode (an emulation of the GPU's mixed precision,
// lib/backend), the safetensors export and the tests all call it. CUDA device code uses
// cuda_bf16.h's __float2bfloat16_rn (kernels/cuda/act_io.cuh), which is specified as the
// same round-to-nearest-even, so both sides of a CPU-vs-GPU comparison round alike (the
// GPU tests compare them; unit/test_dtype.cpp pins the edge cases of this one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace flexsp {

enum class DType : int { f32, f64, bf16, i32, i64, u8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// x rounded to the nearest bf16 value, as a float.
inline float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

}  // namespace flexsp

// bf16 rounding, written once (lib/util/dtype.h: float_to_bf16, round-to-nearest-even,
// used by the CPU backend's bf16 emulation, export and the tests; the CUDA kernels use
// __float2bfloat16_rn, which rounds the same way). Known values: ties to even, carries
// into the exponent, overflow to inf, NaN kept NaN, subnormals.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "lib/util/dtype.h"

namespace flexsp {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Bf16Rounding, KnownValues) {
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bf16(0.15625f), 0x3E20);  // exact in bf16
  // 1 + 2^-8 is half-way between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81): ties to even.
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3F80);
  // 1 + 3 * 2^-8 is half-way between 0x3F81 (odd) and 0x3F82 (even).
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);
  // Just above / below half-way.
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f - 0x1p-20f), 0x3F80);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F80FFFF)), 0x3F81);
  // pi = 0x40490FDB -> 0x4049 (the dropped half 0x0FDB is below 0x8000).
  EXPECT_EQ(float_to_bf16(3.14159265f), 0x4049);
  // Rounding carries into the exponent: 0x3FFFFFFF (just under 2) -> 2.0.
  EXPECT_EQ(float_to_bf16(from_bits(0x3FFFFFFF)), 0x4000);
  // Overflow to infinity; infinities stay.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // NaN stays NaN (even one whose payload sits in the dropped bits only).
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFF800001u}) {
    const uint16_t b = float_to_bf16(from_bits(nan));
    EXPECT_EQ(b & 0x7F80, 0x7F80);
    EXPECT_NE(b & 0x007F, 0);
    EXPECT_TRUE(std::isnan(bf16_to_float(b)));
  }
  // Subnormals: the smallest rounds to 0; half-way ties to even.
  EXPECT_EQ(float_to_bf16(from_bits(0x00000001)), 0x0000);
  EXPECT_EQ(float_to_bf16(from_bits(0x00008000)), 0x0000);
  EXPECT_EQ(float_to_bf16(from_bits(0x00018000)), 0x0002);
  EXPECT_EQ(bf16_to_float(0x3F81), 1.0f + 0x1p-7f);
}

TEST(Bf16Rounding, RelativeErrorBound) {
  // |x - bf16(x)| <= 2^-8 |x| for normal x (8 significant bits: half an ulp).
  for (int i = 1; i < 100000; ++i) {
    const float x = std::sin(0.37f * i) * std::pow(2.0f, (i % 40) - 20);
    const float y = bf16_to_float(float_to_bf16(x));
    EXPECT_LE(std::fabs(x - y), std::ldexp(std::fabs(x), -8)) << x;
  }
}

TEST(Bf16Rounding, RoundBf16IsTheRoundTrip) {
  for (float x : {0.1f, -3.3e-39f, 1e38f, 1.0f + 0x1p-8f, 65504.0f})
    EXPECT_EQ(round_bf16(x), bf16_to_float(float_to_bf16(x)));
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(round_bf16(-std::numeric_limits<float>::infinity()),
            -std::numeric_limits<float>::infinity());
  // Subnormals keep their sign and round to even at the bf16 boundary.
  EXPECT_EQ(float_to_bf16(from_bits(0x80018000)), 0x8002);
  EXPECT_EQ(float_to_bf16(from_bits(0x80008001)), 0x8001);
}

}  // namespace
}  // namespace flexsp

// The safetensors writer (io/export): bf16 rounding of known values (round to nearest,
// ties to even, overflow, NaN, subnormals), and the file layout read back byte by byte:
// 8-byte little-endian header length, JSON header padded to 8 with dtype / shape /
// data_offsets per tensor and __metadata__, contiguous data in name order. The reader's
// fp16 conversion (flexsp import) against the compiler's own _Float16, on all 65536 values.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/export/safetensors.h"
#include "io/export/safetensors_read.h"
#include "lib/util/error.h"

namespace flexsp {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(SafetensorsRead, F16IsExactForEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 x;
    const uint16_t b = static_cast<uint16_t>(h);
    std::memcpy(&x, &b, 2);
    const float want = static_cast<float>(x), got = f32_from_f16(b);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      continue;
    }
    uint32_t wu, gu;
    std::memcpy(&wu, &want, 4);
    std::memcpy(&gu, &got, 4);
    ASSERT_EQ(gu, wu) << "half 0x" << std::hex << h;
  }
}

TEST(SafetensorsBf16, KnownValues) {
  EXPECT_EQ(bf16_from_f32(0.0f), 0x0000);
  EXPECT_EQ(bf16_from_f32(-0.0f), 0x8000);
  EXPECT_EQ(bf16_from_f32(1.0f), 0x3F80);
  EXPECT_EQ(bf16_from_f32(-2.0f), 0xC000);
  EXPECT_EQ(bf16_from_f32(0.15625f), 0x3E20);  // exact in bf16
  // 1 + 2^-8 is half-way between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81): ties to even.
  EXPECT_EQ(bf16_from_f32(1.0f + 0x1p-8f), 0x3F80);
  // 1 + 3 * 2^-8 is half-way between 0x3F81 (odd) and 0x3F82 (even).
  EXPECT_EQ(bf16_from_f32(1.0f + 3 * 0x1p-8f), 0x3F82);
  // Just above / below half-way.
  EXPECT_EQ(bf16_from_f32(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(bf16_from_f32(1.0f + 0x1p-8f - 0x1p-20f), 0x3F80);
  EXPECT_EQ(bf16_from_f32(from_bits(0x3F80FFFF)), 0x3F81);
  // pi = 0x40490FDB -> 0x4049 (the dropped half 0x0FDB is below 0x8000).
  EXPECT_EQ(bf16_from_f32(3.14159265f), 0x4049);
  // Rounding carries into the exponent: 0x3FFFFFFF (just under 2) -> 2.0.
  EXPECT_EQ(bf16_from_f32(from_bits(0x3FFFFFFF)), 0x4000);
  // Overflow to infinity; infinities stay.
  EXPECT_EQ(bf16_from_f32(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(bf16_from_f32(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(bf16_from_f32(-std::numeric_limits<float>::infinity()), 0xFF80);
  // NaN stays NaN (even one whose payload sits in the dropped bits only).
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0xFF800001u}) {
    const uint16_t b = bf16_from_f32(from_bits(nan));
    EXPECT_EQ(b & 0x7F80, 0x7F80);
    EXPECT_NE(b & 0x007F, 0);
    EXPECT_TRUE(std::isnan(f32_from_bf16(b)));
  }
  // Subnormals: the smallest rounds to 0; half-way ties to even.
  EXPECT_EQ(bf16_from_f32(from_bits(0x00000001)), 0x0000);
  EXPECT_EQ(bf16_from_f32(from_bits(0x00008000)), 0x0000);
  EXPECT_EQ(bf16_from_f32(from_bits(0x00018000)), 0x0002);
  EXPECT_EQ(f32_from_bf16(0x3F81), 1.0f + 0x1p-7f);
}

TEST(SafetensorsBf16, RelativeErrorBound) {
  // |x - bf16(x)| <= 2^-8 |x| for normal x (8 significant bits: half an ulp).
  for (int i = 1; i < 100000; ++i) {
    const float x = std::sin(0.37f * i) * std::pow(2.0f, (i % 40) - 20);
    const float y = f32_from_bf16(bf16_from_f32(x));
    EXPECT_LE(std::fabs(x - y), std::ldexp(std::fabs(x), -8)) << x;
  }
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void check_file(StDType dt) {
  const float a[6] = {1, 2, 3, -4, 0.5f, 1.0f + 0x1p-8f};  // "b.weight", [2, 3]
  const float c[4] = {0.25f, -0.0f, 7, 1e-3f};              // "a.norm",   [4]
  const float e[1] = {42};                                  // "z.scalar", [] (0-D: one element)
  const std::vector<StTensor> t = {{"b.weight", {2, 3}, a}, {"a.norm", {4}, c}, {"z.scalar", {}, e}};
  const std::string path = ::testing::TempDir() + "/st_" + std::to_string(::getpid()) + ".safetensors";
  write_safetensors(path, t, dt, {{"format", "pt"}});
  const std::string s = slurp(path);
  std::remove(path.c_str());
  ASSERT_GE(s.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(s[i]);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_LE(8 + n, s.size());
  const std::string header = s.substr(8, n);
  EXPECT_EQ(header, safetensors_header(t, dt, {{"format", "pt"}}));
  EXPECT_EQ(header.find_last_not_of(' '), header.rfind('}'));  // padding: spaces after the JSON
  const nlohmann::json h = nlohmann::json::parse(header);
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  const int es = st_dtype_bytes(dt);
  const char* name = dt == StDType::bf16 ? "BF16" : "F32";
  // Name order: a.norm, b.weight, z.scalar, back to back from 0.
  EXPECT_EQ(h["a.norm"]["dtype"], name);
  EXPECT_EQ(h["a.norm"]["shape"], nlohmann::json({4}));
  EXPECT_EQ(h["a.norm"]["data_offsets"], nlohmann::json({0, 4 * es}));
  EXPECT_EQ(h["b.weight"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(h["b.weight"]["data_offsets"], nlohmann::json({4 * es, 10 * es}));
  EXPECT_EQ(h["z.scalar"]["shape"], nlohmann::json::array());
  EXPECT_EQ(h["z.scalar"]["data_offsets"], nlohmann::json({10 * es, 11 * es}));
  ASSERT_EQ(s.size(), 8 + n + 11 * es);  // no holes, nothing after the data
  const char* data = s.data() + 8 + n;
  auto check = [&](const float* src, int count, int64_t off) {
    for (int i = 0; i < count; ++i) {
      if (dt == StDType::f32) {
        float x;
        std::memcpy(&x, data + off + 4 * i, 4);
        EXPECT_EQ(std::memcmp(&x, &src[i], 4), 0) << i;
      } else {
        uint16_t b;
        std::memcpy(&b, data + off + 2 * i, 2);
        EXPECT_EQ(b, bf16_from_f32(src[i])) << i;
      }
    }
  };
  check(c, 4, 0);
  check(a, 6, 4 * es);
  check(e, 1, 10 * es);
}

TEST(Safetensors, LayoutF32) { check_file(StDType::f32); }
TEST(Safetensors, LayoutBf16) { check_file(StDType::bf16); }

TEST(Safetensors, BadNames) {
  const float x[1] = {0};
  EXPECT_THROW(safetensors_header({{"w", {1}, x}, {"w", {1}, x}}, StDType::f32, {}), Error);
  EXPECT_THROW(safetensors_header({{"", {1}, x}}, StDType::f32, {}), Error);
  EXPECT_THROW(safetensors_header({{"__metadata__", {1}, x}}, StDType::f32, {}), Error);
}

TEST(Safetensors, UnwritablePathNamesTheFile) {
  const float x[1] = {0};
  try {
    write_safetensors("/nonexistent-dir/m.safetensors", {{"w", {1}, x}}, StDType::f32, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/m.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flexsp

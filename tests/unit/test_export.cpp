// The safetensors writer (io/export): bf16 data rounded by lib/util/dtype.h's
// float_to_bf16 (its own test: unit/test_dtype.cpp), and the file layout read back byte by byte:
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
#include "lib/util/dtype.h"
#include "lib/util/error.h"

namespace flexsp {
namespace {

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
        EXPECT_EQ(b, float_to_bf16(src[i])) << i;
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

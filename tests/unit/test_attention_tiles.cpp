// The GPU attention's tile map, host side (kernels/cuda/attention_tiles.h; CUDA-free, so it
// runs on every machine): tiles cover every row of every sequence once, aligned to the
// tile size from each sequence start, in the two longest-first orders; the cache builds
// and uploads a layout's map once and reuses it while the layout lasts, per tile size.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "kernels/cuda/attention_tiles.h"

namespace flexsp::cuda {
namespace {

TEST(AttentionTiles, CoverAndOrder) {
  const std::vector<int32_t> cu{0, 1, 8, 8, 71, 200};  // lengths 1, 7, 0, 63, 129
  std::vector<TileDesc> map;
  const int n = build_tile_map(cu.data(), 5, 32, map);
  ASSERT_EQ(map.size(), 2u * n);
  EXPECT_EQ(n, 1 + 1 + 0 + 2 + 5);
  for (int half = 0; half < 2; ++half) {
    std::map<int, int> rows;  // packed row -> times covered
    for (int i = 0; i < n; ++i) {
      const TileDesc& t = map[static_cast<size_t>(half * n + i)];
      EXPECT_EQ(t.r0 % 32, 0);
      EXPECT_LE(t.r1 - t.r0, 32);
      EXPECT_LE(t.r1, t.len);
      for (int r = t.r0; r < t.r1; ++r) ++rows[t.seq + r];
    }
    EXPECT_EQ(rows.size(), 200u);
    for (const auto& [row, k] : rows) EXPECT_EQ(k, 1) << row;
  }
  for (int i = 1; i < n; ++i) {
    EXPECT_GE(map[i - 1].r1, map[i].r1) << "query order: most keys first";
    const TileDesc &a = map[static_cast<size_t>(n + i - 1)], &b = map[static_cast<size_t>(n + i)];
    EXPECT_GE(a.len - a.r0, b.len - b.r0) << "key order: most queries first";
  }
  EXPECT_EQ(build_tile_map(cu.data(), 0, 32, map), 0);
  EXPECT_TRUE(map.empty());
}

// Device memory faked in host memory; counts uploads.
class FakeUploader final : public TileUploader {
 public:
  int allocs = 0, frees = 0, uploads = 0;
  void* alloc(size_t bytes) override {
    ++allocs;
    return new char[bytes];
  }
  void free(void* p) override {
    if (p == nullptr) return;
    ++frees;
    delete[] static_cast<char*>(p);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    ++uploads;
    std::memcpy(dst, src, bytes);
  }
};

TEST(AttentionTiles, CacheReusesTheLayoutsMap) {
  FakeUploader up;
  {
    TileMapCache cache(up);
    std::vector<int32_t> a{0, 100, 164}, b{0, 10, 164};
    const TileList t1 = cache.get(a.data(), 2, 64);
    EXPECT_EQ(t1.count, 2 + 1);
    EXPECT_EQ(t1.tokens, 164);
    EXPECT_EQ(t1.by_key, t1.by_query + t1.count);
    std::vector<TileDesc> want;
    build_tile_map(a.data(), 2, 64, want);
    EXPECT_EQ(std::memcmp(t1.by_query, want.data(), want.size() * sizeof(TileDesc)), 0);
    // Every layer and pass of the micro-batch: no rebuild, no upload.
    for (int i = 0; i < 10; ++i) EXPECT_EQ(cache.get(a.data(), 2, 64).by_query, t1.by_query);
    EXPECT_EQ(up.uploads, 1);
    EXPECT_EQ(cache.builds(), 1u);
    // Another tile size keeps its own map.
    EXPECT_EQ(cache.get(a.data(), 2, 32).count, 4 + 2);
    EXPECT_EQ(cache.get(a.data(), 2, 64).by_query, t1.by_query);
    EXPECT_EQ(up.uploads, 2);
    // A new layout of the same size: rebuilt into the same device buffer.
    const TileList t2 = cache.get(b.data(), 2, 64);
    EXPECT_EQ(t2.count, 1 + 3);
    EXPECT_EQ(up.uploads, 3);
    a[1] = 10;  // equal to b now: the cache compares contents, not pointers
    EXPECT_EQ(cache.get(a.data(), 2, 64).count, t2.count);
    EXPECT_EQ(up.uploads, 3);
    // No token: an empty map, nothing uploaded.
    std::vector<int32_t> none{0, 0};
    EXPECT_EQ(cache.get(none.data(), 1, 64).count, 0);
    EXPECT_EQ(up.uploads, 3);
  }
  EXPECT_EQ(up.allocs, up.frees) << "the cache frees its device memory";
}

}  // namespace
}  // namespace flexsp::cuda

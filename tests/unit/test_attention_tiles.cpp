// The GPU attention's tile map, host side (kernels/cuda/attention_tiles.h; CUDA-free, so it
// runs on every machine): tiles cover every row of every sequence once, aligned to the
// tile size from each sequence start, in the two longest-first orders; the cache builds
// and uploads a layout's map once and reuses it while the layout lasts, per tile size;
// spans (keys other than the queries, causal offsets) give query and key tiles of their own.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>

#include "kernels/cuda/attention_tiles.h"
#include "lib/util/error.h"

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
      EXPECT_LE(t.r1, t.qlen);
      EXPECT_EQ(t.q, t.k);
      EXPECT_EQ(t.qlen, t.klen);
      EXPECT_EQ(t.off, 0);
      for (int r = t.r0; r < t.r1; ++r) ++rows[t.q + r];
    }
    EXPECT_EQ(rows.size(), 200u);
    for (const auto& [row, k] : rows) EXPECT_EQ(k, 1) << row;
  }
  for (int i = 1; i < n; ++i) {
    EXPECT_GE(map[i - 1].r1, map[i].r1) << "query order: most keys first";
    const TileDesc &a = map[static_cast<size_t>(n + i - 1)], &b = map[static_cast<size_t>(n + i)];
    EXPECT_GE(a.qlen - a.r0, b.qlen - b.r0) << "key order: most queries first";
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
    // A new layout of the same size: built and uploaded into an entry of its own.
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

// Spans (ring attention, Seq1F1B): query tiles cover the query rows, key tiles the key
// rows; each carries its span; the orders follow the visible work.
TEST(AttentionTiles, Spans) {
  const std::vector<int32_t> cu{0, 3, 40, 40}, cuk{0, 70, 75, 80};  // queries 3, 37, 0
  const std::vector<int32_t> off{67, -36, 4};  // keys 70 (last 3 queries), 5 (all late), 5
  cpu::AttnShape s;
  s.nseq = 3;
  s.cu_seqlens = s.cu_seqlens_host = cu.data();
  s.cu_seqlens_k = s.cu_seqlens_k_host = cuk.data();
  std::vector<TileDesc> map;
  int n = build_tile_map(cpu::attention_spans(s, true), 32, map);
  ASSERT_EQ(n, 1 + 2);
  ASSERT_EQ(map.size(), 3u + 3 + 1 + 1);
  std::map<int, int> qrows, krows;
  for (int i = 0; i < n; ++i)
    for (int r = map[i].r0; r < map[i].r1; ++r) ++qrows[map[i].q + r];
  for (size_t i = n; i < map.size(); ++i)
    for (int r = map[i].r0; r < map[i].r1; ++r) ++krows[map[i].k + r];
  EXPECT_EQ(qrows.size(), 40u);
  EXPECT_EQ(krows.size(), 80u);
  for (const auto& [row, k] : qrows) EXPECT_EQ(k, 1) << row;
  for (const auto& [row, k] : krows) EXPECT_EQ(k, 1) << row;
  // Default alignment: the queries are the last rows (offset klen - qlen).
  EXPECT_EQ(map[0].q, 0);
  EXPECT_EQ(map[0].off, 67);
  EXPECT_EQ(keys_seen(map[0], 0), 68);
  EXPECT_EQ(keys_seen(map[0], 2), 70);
  for (int i = 1; i < n; ++i)
    EXPECT_GE(keys_seen(map[i - 1], map[i - 1].r1 - 1), keys_seen(map[i], map[i].r1 - 1));
  // Explicit offsets: sequence 1's queries see keys j <= i - 36, i.e. row 36 sees key 0.
  s.causal_offset = s.causal_offset_host = off.data();
  n = build_tile_map(cpu::attention_spans(s, true), 32, map);
  const TileDesc* late = nullptr;
  for (int i = 0; i < n; ++i)
    if (map[i].q == 3 && map[i].r0 == 0) late = &map[i];
  ASSERT_NE(late, nullptr);
  EXPECT_EQ(late->off, -36);
  EXPECT_EQ(keys_seen(*late, 31), 0) << "a tile that sees no key";
  EXPECT_EQ(keys_seen(*late, 36), 1);
  EXPECT_EQ(first_query(*late, 4), 40);
  // Key tiles: most query rows first; sequence 2 (no queries) last.
  EXPECT_EQ(map.back().k, 75);
  // The cache keys on spans and offsets too, and keeps several layouts.
  FakeUploader up;
  {
    TileMapCache cache(up);
    const TileList with = cache.get(s, 32);
    EXPECT_EQ(with.count, 3);
    EXPECT_EQ(with.key_count, 5);
    EXPECT_EQ(with.tokens, 40);
    s.causal_offset = nullptr;
    const TileList without = cache.get(s, 32);
    EXPECT_NE(without.by_query, with.by_query);
    EXPECT_EQ(up.uploads, 2);
    s.causal_offset = off.data();
    EXPECT_EQ(cache.get(s, 32).by_query, with.by_query);  // still cached
    EXPECT_EQ(up.uploads, 2);
    // More layouts than the cache keeps: the least recently used is rebuilt.
    std::vector<std::vector<int32_t>> offs;
    for (size_t i = 0; i < TileMapCache::kCachedLayouts; ++i) offs.push_back({int32_t(i), 0, 0});
    for (const auto& o : offs) {
      s.causal_offset = s.causal_offset_host = o.data();
      cache.get(s, 32);
    }
    EXPECT_EQ(up.uploads, 2 + static_cast<int>(TileMapCache::kCachedLayouts));
    s.causal_offset = s.causal_offset_host = off.data();
    cache.get(s, 32);
    EXPECT_EQ(up.uploads, 3 + static_cast<int>(TileMapCache::kCachedLayouts));
    // A device copy without its host copy: one clear error, the cache unchanged.
    s.causal_offset_host = nullptr;
    EXPECT_THROW(cache.get(s, 32), Error);
  }
  EXPECT_EQ(up.allocs, up.frees);
}

}  // namespace
}  // namespace flexsp::cuda

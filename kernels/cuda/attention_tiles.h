// The tile map of the varlen attention kernels (attention.cu, attention_tc.cu): which rows
// of the packed streams each thread block takes. Host-side and CUDA-free (C++17, no CUDA
// type), so the CPU unit tests check it on every machine (tests/unit/test_attention_tiles).
//
// Design choices:
//  - A tile is `rows` consecutive rows of one sequence's queries (query-side kernels) or
//    keys (the dK/dV kernel), aligned to multiples of `rows` from that side's start. Each
//    tile carries its sequence's span (query and key starts and lengths, causal offset:
//    cpu::AttnSpan), so kernels need no other table: query i sees key j iff j <= i + off.
//    Keys and queries are the same rows with offset 0 unless AttnShape says otherwise
//    (cu_seqlens_k, causal_offset: ring attention, Seq1F1B chunks).
//  - The map lists query tiles, then key tiles, longest work first for better balance at
//    the end of the grid: query tiles by the keys their last row sees, key tiles by the
//    query rows that see them. Stable sorts: a layout gives one map.
//  - Built from the host's copies (AttnShape::cu_seqlens_host and the other *_host): the
//    host made the layout, so reading the device copy back -- a copy and a stream
//    synchronization per call -- is never needed.
//  - TileMapCache keeps the maps of the last few layouts per tile size in device memory
//    (kCachedLayouts, least recently used out: ring attention alternates as many layouts
//    as ranks per layer) and uploads a new one only when a layout is not among them. The
//    upload goes through the owner's stream-ordered copy (the CUDA backend's pinned ring),
//    so the kernels enqueued before it on the same stream still read the old map; a device
//    buffer only grows.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"

namespace flexsp::cuda {

// One tile: rows [r0, r1) of its side of a sequence (queries in query order, keys in key
// order; r0 relative to that side's start, a multiple of the tile rows), and the sequence's
// span: query rows [q, q + qlen), key rows [k, k + klen) of the packed streams, offset off.
struct TileDesc {
  int q, k, r0, r1, qlen, klen, off;
};

// Host and device (the kernels call them on their tiles).
#ifdef __CUDACC__
#define FLEXSP_TILE_FN __host__ __device__ inline
#else
#define FLEXSP_TILE_FN inline
#endif

// Keys [0, keys_seen(t, i)) are visible to query row i (relative to the span's start).
FLEXSP_TILE_FN int keys_seen(const TileDesc& t, int i) {
  const int n = i + t.off + 1;
  return n < 0 ? 0 : (n > t.klen ? t.klen : n);
}
// The first query row that sees key j (qlen or more: none).
FLEXSP_TILE_FN int first_query(const TileDesc& t, int j) { return j - t.off > 0 ? j - t.off : 0; }

// A tile map in device memory: `count` query tiles and `key_count` key tiles.
struct TileList {
  const TileDesc* by_query = nullptr;
  const TileDesc* by_key = nullptr;
  int count = 0;
  int key_count = 0;
  int64_t tokens = 0;  // query rows: cu_seqlens[nseq]
};

// The map of spans with tiles of `rows` rows: the query tiles in query order, then the key
// tiles in key order. Returns the number of query tiles.
inline int build_tile_map(const std::vector<cpu::AttnSpan>& spans, int rows,
                          std::vector<TileDesc>& out) {
  out.clear();
  auto desc = [](const cpu::AttnSpan& sp, int r0, int r1) {
    return TileDesc{static_cast<int>(sp.q), static_cast<int>(sp.k), r0, r1,
                    static_cast<int>(sp.qlen), static_cast<int>(sp.klen), static_cast<int>(sp.off)};
  };
  for (const cpu::AttnSpan& sp : spans)
    for (int r0 = 0; r0 < sp.qlen; r0 += rows)
      out.push_back(desc(sp, r0, static_cast<int>(std::min<int64_t>(sp.qlen, r0 + rows))));
  const size_t n = out.size();
  for (const cpu::AttnSpan& sp : spans)
    for (int r0 = 0; r0 < sp.klen; r0 += rows)
      out.push_back(desc(sp, r0, static_cast<int>(std::min<int64_t>(sp.klen, r0 + rows))));
  const auto mid = out.begin() + static_cast<std::ptrdiff_t>(n);
  std::stable_sort(out.begin(), mid, [](const TileDesc& a, const TileDesc& b) {
    return keys_seen(a, a.r1 - 1) > keys_seen(b, b.r1 - 1);
  });
  auto queries = [](const TileDesc& t) { return t.qlen - std::min(t.qlen, first_query(t, t.r0)); };
  std::stable_sort(mid, out.end(),
                   [&](const TileDesc& a, const TileDesc& b) { return queries(a) > queries(b); });
  return static_cast<int>(n);
}

// The same for plain causal attention over cu[0..nseq] (keys are the queries).
inline int build_tile_map(const int32_t* cu, int nseq, int rows, std::vector<TileDesc>& out) {
  cpu::AttnShape s;
  s.cu_seqlens = cu;
  s.nseq = nseq;
  return build_tile_map(cpu::attention_spans(s), rows, out);
}

// The device memory and the stream-ordered host -> device copy a TileMapCache uses.
class TileUploader {
 public:
  virtual ~TileUploader() = default;
  virtual void* alloc(size_t bytes) = 0;
  virtual void free(void* p) = 0;  // stream-ordered: after the work enqueued so far
  // Copies `bytes` from host memory the caller may reuse at once (stream-ordered).
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
};

class TileMapCache {
 public:
  static constexpr size_t kCachedLayouts = 8;  // per tile size
  explicit TileMapCache(TileUploader& up) : up_(up) {}
  ~TileMapCache() {
    for (Entry& e : entries_) up_.free(e.dev);
  }
  TileMapCache(const TileMapCache&) = delete;
  TileMapCache& operator=(const TileMapCache&) = delete;

  // The map of s's layout (read from its host copies) with tiles of `rows` rows.
  TileList get(const cpu::AttnShape& s, int rows) {
    layout_key(s);
    ++clock_;
    Entry* e = nullptr;  // this layout's entry, else the least recently used of this size
    size_t same_size = 0;
    for (Entry& x : entries_) {
      if (x.rows != rows) continue;
      ++same_size;
      if (x.key == key_) {
        x.used = clock_;
        return x.list;  // a layout seen lately: the map on the device is current
      }
      if (e == nullptr || x.used < e->used) e = &x;
    }
    const std::vector<cpu::AttnSpan> spans = cpu::attention_spans(s, true);  // may throw
    if (same_size < kCachedLayouts) {
      entries_.push_back(Entry{});
      e = &entries_.back();
      e->rows = rows;
    }
    e->key = key_;
    e->used = clock_;
    const int count = build_tile_map(spans, rows, host_);
    const size_t bytes = host_.size() * sizeof(TileDesc);
    if (bytes > e->cap) {
      up_.free(e->dev);
      e->cap = std::max(bytes, e->cap * 2);
      e->dev = up_.alloc(e->cap);
    }
    if (bytes > 0) up_.upload(e->dev, host_.data(), bytes);
    auto* dev = static_cast<TileDesc*>(e->dev);
    e->list = TileList{dev, dev + count, count, static_cast<int>(host_.size()) - count,
                       s.nseq > 0 ? s.cu_seqlens_host[s.nseq] : 0};
    ++builds_;
    return e->list;
  }
  // The same for plain causal attention over cu_host[0..nseq].
  TileList get(const int32_t* cu_host, int nseq, int rows) {
    cpu::AttnShape s;
    s.cu_seqlens = s.cu_seqlens_host = cu_host;
    s.nseq = nseq;
    return get(s, rows);
  }
  size_t builds() const { return builds_; }  // maps built and uploaded so far

 private:
  struct Entry {
    int rows = 0;
    std::vector<int32_t> key;  // the layout the device map was built from (layout_key)
    size_t used = 0;           // clock_ at the last get
    void* dev = nullptr;
    size_t cap = 0;
    TileList list;
  };
  // key_ = nseq, then each host array that s sets, each after a marker of which it is.
  void layout_key(const cpu::AttnShape& s) {
    key_.assign(1, s.nseq);
    const int n = std::max(s.nseq, 0) + 1;
    auto add = [&](int32_t marker, const int32_t* a, int count) {
      if (a == nullptr) return;
      key_.push_back(marker);
      key_.insert(key_.end(), a, a + count);
    };
    add(-1, s.cu_seqlens_host, n);
    if (s.cu_seqlens_k != nullptr) add(-2, s.cu_seqlens_k_host, n);
    if (s.causal_offset != nullptr) add(-3, s.causal_offset_host, n - 1);
  }
  TileUploader& up_;
  std::deque<Entry> entries_;   // stable addresses; at most kCachedLayouts per tile size
  std::vector<TileDesc> host_;  // reused
  std::vector<int32_t> key_;    // reused
  size_t builds_ = 0, clock_ = 0;
};

}  // namespace flexsp::cuda

// The tile map of the varlen attention kernels (attention.cu, attention_tc.cu): which rows
// of the packed stream each thread block takes. Host-side and CUDA-free (C++17, no CUDA
// type), so the CPU unit tests check it on every machine (tests/unit/test_attention_tiles).
//
// Design choices:
//  - A tile is `rows` consecutive rows of one sequence, aligned to multiples of `rows` from
//    the sequence start (so causality inside a key tile is "row i sees the first i + 1").
//    The map lists them twice, longest work first for better balance at the end of the
//    grid: for query-side kernels by the most keys seen (latest r1), for key-side ones by
//    the most queries after them (largest len - r0). Stable sorts: a layout gives one map.
//  - Built from the host's copy of cu_seqlens (AttnShape::cu_seqlens_host): the host made
//    the layout, so reading the device copy back -- a copy and a stream synchronization
//    per call -- is never needed.
//  - TileMapCache keeps the map of the last layout per tile size in device memory and
//    uploads a new one only when the layout changes: once per micro-batch, not once per
//    layer and pass. The upload goes through the owner's stream-ordered copy (the CUDA
//    backend's pinned ring), so the kernels of the previous layout, enqueued before it on
//    the same stream, still read the old map; the device buffer only grows.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace flexsp::cuda {

// One tile of one sequence: rows [seq + r0, seq + r1) of the packed stream; len = the
// sequence's length; r0 is relative to the sequence start (a multiple of the tile rows).
struct TileDesc {
  int seq, r0, r1, len;
};

// A tile map in device memory: `count` tiles in query order and the same in key order.
struct TileList {
  const TileDesc* by_query = nullptr;
  const TileDesc* by_key = nullptr;
  int count = 0;
  int64_t tokens = 0;  // cu_seqlens[nseq]
};

// The map of cu[0..nseq] with tiles of `rows` rows: `count` tiles in query order, then the
// same tiles in key order (2 * count entries). Returns count.
inline int build_tile_map(const int32_t* cu, int nseq, int rows, std::vector<TileDesc>& out) {
  out.clear();
  for (int i = 0; i < nseq; ++i) {
    const int b = cu[i], len = cu[i + 1] - b;
    for (int r0 = 0; r0 < len; r0 += rows) out.push_back({b, r0, std::min(len, r0 + rows), len});
  }
  const size_t n = out.size();
  out.insert(out.end(), out.begin(), out.end());
  std::stable_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n),
                   [](const TileDesc& a, const TileDesc& b) { return a.r1 > b.r1; });
  std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(n), out.end(),
                   [](const TileDesc& a, const TileDesc& b) { return a.len - a.r0 > b.len - b.r0; });
  return static_cast<int>(n);
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
  explicit TileMapCache(TileUploader& up) : up_(up) {}
  ~TileMapCache() {
    for (Entry& e : entries_) up_.free(e.dev);
  }
  TileMapCache(const TileMapCache&) = delete;
  TileMapCache& operator=(const TileMapCache&) = delete;

  // The map of cu_host[0..nseq] (host memory) with tiles of `rows` rows.
  TileList get(const int32_t* cu_host, int nseq, int rows) {
    Entry* e = nullptr;
    for (Entry& x : entries_)
      if (x.rows == rows) e = &x;
    if (e == nullptr) {
      entries_.push_back(Entry{});
      e = &entries_.back();
      e->rows = rows;
    } else if (static_cast<int>(e->cu.size()) == nseq + 1 &&
               std::equal(e->cu.begin(), e->cu.end(), cu_host)) {
      return e->list;  // the same layout: the map on the device is current
    }
    e->cu.assign(cu_host, cu_host + nseq + 1);
    const int count = build_tile_map(cu_host, nseq, rows, host_);
    const size_t bytes = host_.size() * sizeof(TileDesc);
    if (bytes > e->cap) {
      up_.free(e->dev);
      e->cap = std::max(bytes, e->cap * 2);
      e->dev = up_.alloc(e->cap);
    }
    if (bytes > 0) up_.upload(e->dev, host_.data(), bytes);
    auto* dev = static_cast<TileDesc*>(e->dev);
    e->list = TileList{dev, dev + count, count, nseq >= 0 ? cu_host[nseq] : 0};
    ++builds_;
    return e->list;
  }
  size_t builds() const { return builds_; }  // maps built and uploaded so far

 private:
  struct Entry {
    int rows = 0;
    std::vector<int32_t> cu;  // the layout the device map was built from
    void* dev = nullptr;
    size_t cap = 0;
    TileList list;
  };
  TileUploader& up_;
  std::vector<Entry> entries_;  // one per tile size (the simple and the tensor-core kernels)
  std::vector<TileDesc> host_;  // reused
  size_t builds_ = 0;
};

}  // namespace flexsp::cuda

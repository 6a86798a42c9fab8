// A caching allocator for device memory: size-class free lists over a raw allocator
// (cudaMalloc/cudaFree in the CUDA backend; a host fake in the tests, so this logic is
// tested on machines without a GPU).
//
// Design choices:
//  - Size classes: requests are rounded up to a class and a freed block goes to its
//    class's free list; a request of the same class reuses it. Below 1 MiB the classes are
//    multiples of 512 bytes; from 1 MiB on, four classes per power of two (2^k, 1.25 2^k,
//    1.5 2^k, 1.75 2^k), so at most 25% is lost to rounding. Blocks are never split or
//    merged: a training step that asks for the same sizes every step reaches a steady
//    state after the first one (no cudaMalloc once warm, no fragmentation growth).
//  - When the raw allocator fails, every cached block is returned to it and the request
//    is tried once more before the error (the caller synchronizes first: see release_cached).
//  - allocated_bytes / peak_allocated_bytes count the class bytes of live blocks (what the
//    model holds); reserved_bytes adds the cached ones (what the device holds).
//  - Stream semantics belong to the caller: the CUDA backend uses one stream, so a block
//    freed after work was enqueued on it may be handed out again for later work on it.
//  - Single-threaded use per backend instance is the contract; a mutex keeps accidental
//    concurrent use safe anyway. No globals: one allocator per backend.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace flexsp::cuda {

// The class a request of `bytes` is served from (0 for 0).
inline size_t size_class(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(1) << 20;
  if (bytes == 0) return 0;
  if (bytes < kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  size_t p = kLarge;
  while (p * 2 <= bytes) p *= 2;                 // p <= bytes < 2p
  const size_t step = p / 4;
  return (bytes + step - 1) / step * step;       // one of p, 1.25p, 1.5p, 1.75p, 2p
}

class CachingAllocator {
 public:
  // raw_alloc returns nullptr on failure; raw_free releases a block of raw_alloc.
  using RawAlloc = std::function<void*(size_t)>;
  using RawFree = std::function<void(void*)>;

  CachingAllocator(RawAlloc raw_alloc, RawFree raw_free)
      : raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}
  ~CachingAllocator() {
    release_cached();
    for (auto& [p, cls] : live_) raw_free_(p);
  }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (nullptr for 0); throws std::bad_alloc when even an empty
  // cache cannot satisfy it. Contents are undefined (the backend zero-fills).
  void* allocate(size_t bytes) {
    const size_t cls = size_class(bytes);
    if (cls == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    void* p = nullptr;
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= cls;
      ++hits_;
    } else {
      p = raw_alloc_(cls);
      if (p == nullptr) {
        release_cached_locked();
        p = raw_alloc_(cls);
      }
      if (p == nullptr) throw std::bad_alloc();
      ++raw_allocs_;
    }
    live_[p] = cls;
    current_ += cls;
    if (current_ > peak_) peak_ = current_;
    return p;
  }

  // Returns a block to its class's free list; false when p is not a live block.
  bool deallocate(void* p) {
    if (p == nullptr) return true;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    const size_t cls = it->second;
    live_.erase(it);
    current_ -= cls;
    free_[cls].push_back(p);
    cached_ += cls;
    return true;
  }

  // Hands every cached (free) block back to the raw allocator. The caller must make sure
  // no enqueued work still uses them (the CUDA backend synchronizes its stream first).
  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    release_cached_locked();
  }

  size_t allocated_bytes() const { std::lock_guard<std::mutex> l(mu_); return current_; }
  size_t peak_allocated_bytes() const { std::lock_guard<std::mutex> l(mu_); return peak_; }
  void reset_peak() { std::lock_guard<std::mutex> l(mu_); peak_ = current_; }
  size_t cached_bytes() const { std::lock_guard<std::mutex> l(mu_); return cached_; }
  size_t reserved_bytes() const { std::lock_guard<std::mutex> l(mu_); return current_ + cached_; }
  // Calls of the raw allocator so far, and requests served from the cache.
  size_t raw_allocs() const { std::lock_guard<std::mutex> l(mu_); return raw_allocs_; }
  size_t cache_hits() const { std::lock_guard<std::mutex> l(mu_); return hits_; }
  // The class of a live block (0 when p is not one).
  size_t block_bytes(void* p) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.find(p);
    return it == live_.end() ? 0 : it->second;
  }

 private:
  void release_cached_locked() {
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) raw_free_(p);
    free_.clear();
    cached_ = 0;
  }

  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> live_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t current_ = 0, peak_ = 0, cached_ = 0, raw_allocs_ = 0, hits_ = 0;
};

}  // namespace flexsp::cuda

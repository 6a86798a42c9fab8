// Host-side logic of the CUDA backend, run on every machine (GPU or not): the caching
// allocator over a fake raw allocator (size classes, reuse, peak, retry after releasing
// the cache, steady state), and make_backend's choice (backend and activation type) and
// errors without a device.
#include <cstdlib>
#include <set>

#include "gpu_test_common.h"
#include "lib/util/error.h"

namespace flexsp::testing {
namespace {

using cuda::CachingAllocator;
using cuda::size_class;

// malloc-backed raw allocator that counts calls and can be told to fail above a budget.
struct FakeRaw {
  size_t budget = SIZE_MAX, held = 0, allocs = 0, frees = 0;
  std::set<void*> live;
  CachingAllocator make() {
    return CachingAllocator(
        [this](size_t n) -> void* {
          if (held + n > budget) return nullptr;
          void* p = std::malloc(n);
          held += n;
          ++allocs;
          live.insert(p);
          sizes[p] = n;
          return p;
        },
        [this](void* p) {
          held -= sizes[p];
          ++frees;
          live.erase(p);
          std::free(p);
        });
  }
  std::unordered_map<void*, size_t> sizes;
};

TEST(GpuHostAllocator, SizeClasses) {
  EXPECT_EQ(size_class(0), 0u);
  EXPECT_EQ(size_class(1), 512u);
  EXPECT_EQ(size_class(512), 512u);
  EXPECT_EQ(size_class(513), 1024u);
  EXPECT_EQ(size_class((1u << 20) - 1), 1u << 20);
  EXPECT_EQ(size_class(1u << 20), 1u << 20);
  EXPECT_EQ(size_class((1u << 20) + 1), (1u << 20) + (1u << 18));
  EXPECT_EQ(size_class(3u << 20), 3u << 20);
  for (size_t b = 1; b < (size_t(1) << 34); b = b * 3 + 7) {
    const size_t c = size_class(b);
    EXPECT_GE(c, b);
    EXPECT_LE(c, b < (1u << 20) ? b + 511 : b + b / 4) << b;  // <= 25% rounding
    EXPECT_EQ(size_class(c), c) << "a class maps to itself";
    EXPECT_EQ(c % 512, 0u);
  }
}

TEST(GpuHostAllocator, ReuseAndPeak) {
  FakeRaw raw;
  {
    CachingAllocator a = raw.make();
    EXPECT_EQ(a.allocate(0), nullptr);
    void* p = a.allocate(1000);
    void* q = a.allocate(3000);
    EXPECT_EQ(a.allocated_bytes(), 1024u + 3072u);
    EXPECT_EQ(a.block_bytes(p), 1024u);
    EXPECT_TRUE(a.deallocate(p));
    EXPECT_FALSE(a.deallocate(p));  // double free is reported
    EXPECT_EQ(a.allocated_bytes(), 3072u);
    EXPECT_EQ(a.cached_bytes(), 1024u);
    void* p2 = a.allocate(600);  // same class as 1000: the cached block
    EXPECT_EQ(p2, p);
    EXPECT_EQ(raw.allocs, 2u);
    EXPECT_EQ(a.cache_hits(), 1u);
    EXPECT_EQ(a.peak_allocated_bytes(), 1024u + 3072u);
    a.deallocate(q);
    a.deallocate(p2);
    EXPECT_EQ(a.allocated_bytes(), 0u);
    EXPECT_EQ(a.reserved_bytes(), 1024u + 3072u);
    a.release_cached();
    EXPECT_EQ(a.reserved_bytes(), 0u);
    EXPECT_EQ(raw.frees, 2u);
    a.allocate(5);  // live at destruction: freed by the destructor
  }
  EXPECT_TRUE(raw.live.empty());
}

TEST(GpuHostAllocator, SteadyStateOverSteps) {
  FakeRaw raw;
  CachingAllocator a = raw.make();
  const size_t sizes[] = {4096, 100, 1 << 22, 77777, 4096, 1 << 22, 12345678};
  size_t after_first = 0, reserved_first = 0;
  for (int step = 0; step < 10; ++step) {
    std::vector<void*> live;
    for (size_t s : sizes) {
      live.push_back(a.allocate(s));
      if (live.size() % 3 == 0) {  // interleaved frees, like temporaries
        a.deallocate(live.front());
        live.erase(live.begin());
      }
    }
    for (void* p : live) a.deallocate(p);
    if (step == 0) after_first = raw.allocs, reserved_first = a.reserved_bytes();
  }
  EXPECT_EQ(raw.allocs, after_first) << "raw allocations after the first step";
  EXPECT_EQ(a.reserved_bytes(), reserved_first) << "reserved memory grew over steps";
}

TEST(GpuHostAllocator, ReleasesCacheWhenRawAllocFails) {
  FakeRaw raw;
  raw.budget = 3 << 20;
  CachingAllocator a = raw.make();
  void* p = a.allocate(2 << 20);
  a.deallocate(p);  // cached, 2 MiB held
  void* q = a.allocate(3 << 20);  // fails once, cache released, retried
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(a.cached_bytes(), 0u);
  EXPECT_THROW(a.allocate(1 << 20), std::bad_alloc);  // over budget even with no cache
  a.deallocate(q);
}

TEST(GpuHostBackend, SelectionWithoutDevice) {
  // train.precision: auto is fp32 on the CPU, bf16 on a GPU; fp32 and bf16 are taken as said.
  EXPECT_EQ(make_backend({"cpu"})->act_dtype(), DType::f32);
  EXPECT_EQ(make_backend({"cpu", "bf16"})->act_dtype(), DType::bf16);
  EXPECT_THROW(make_backend({"cpu", "fp16"}), Error);
  if (cuda_device_count() > 0) {
    auto be = make_backend({"auto"});
    EXPECT_STREQ(be->name(), "cuda");
    EXPECT_EQ(be->act_dtype(), DType::bf16);
    EXPECT_STREQ(make_backend({"cuda"})->name(), "cuda");
    EXPECT_EQ(make_backend({"cuda", "fp32"})->act_dtype(), DType::f32);
    EXPECT_EQ(make_backend({"cuda", "bf16"})->act_dtype(), DType::bf16);
    EXPECT_STREQ(make_backend({"cuda", "bf16", true, "simple"})->name(), "cuda");
    // tc needs bf16 activations: an error naming the key.
    try {
      make_backend({"cuda", "fp32", false, "tc"});
      ADD_FAILURE() << "cuda_attention = tc with fp32 activations did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("train.cuda_attention"), std::string::npos) << e.what();
    }
    return;
  }
  EXPECT_EQ(make_backend({"auto"})->act_dtype(), DType::f32);
  EXPECT_STREQ(make_backend({"auto"})->name(), "cpu");
  try {
    make_backend({"cuda"});
    ADD_FAILURE() << "make_backend(\"cuda\") without a device did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.backend"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no GPU"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flexsp::testing

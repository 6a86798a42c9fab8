// The CUDA backend does not make the host wait where a training step does not need it:
//  - phase timers: marks are CUDA events; a phase around ~tens of ms of GPU work returns
//    to the host at once, and resolving after one synchronization gives each phase (and a
//    nested one) its GPU time;
//  - copy_from_host: returns while the GPU is busy; the host buffer can be reused at once
//    (the ring copied it), also for copies larger than the whole ring;
//  - attention: no readback of cu_seqlens and no synchronization; the tile map is built
//    once per layout and reused across calls (forward, backward, layers); cuDNN's
//    attention, once its graphs are built (the first call of a shape bucket), likewise,
//    and a new layout in the same bucket builds no graph;
//  - the memory pool keeps freed memory across synchronizations (release threshold).
// "Busy" is a queue of large fp32 GEMMs whose GPU time is measured first, so each check
// compares the host's time for a call with work the GPU demonstrably had queued.
#include <chrono>

#include "gpu_test_common.h"
#include "kernels/cuda/attention_cudnn.h"
#include "lib/util/error.h"

namespace flexsp::testing {
namespace {

using HostClock = std::chrono::steady_clock;

double host_ms(HostClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(HostClock::now() - t0).count();
}

class GpuOverlap : public ::testing::Test {
 protected:
  void SetUp() override {
    FLEXSP_REQUIRE_GPU();
    gpu = make_cuda_backend(DType::f32);
    cb = dynamic_cast<CudaBackend*>(gpu.get());
    a = Buffer<float>(*gpu, kN * kN);
    b = Buffer<float>(*gpu, kN * kN);
    c = Buffer<float>(*gpu, kN * kN);
    busy(1);  // warm-up (cuBLAS heuristics, clocks)
    gpu->synchronize();
    const auto t0 = HostClock::now();
    busy(kGemms);
    gpu->synchronize();
    busy_ms = host_ms(t0);
  }
  // Enqueues `n` GEMMs of kN^3 multiply-adds (no wait).
  void busy(int n) {
    for (int i = 0; i < n; ++i)
      gpu->gemm(false, false, kN, kN, kN, 1.0f, a.get(), kN, b.get(), kN, 0.0f, c.get(), kN);
  }

  static constexpr int64_t kN = 4096;
  static constexpr int kGemms = 20;
  std::unique_ptr<Backend> gpu;
  CudaBackend* cb = nullptr;
  Buffer<float> a, b, c;
  double busy_ms = 0;  // GPU time of busy(kGemms)
};

TEST_F(GpuOverlap, PhaseTimersRecordEventsAndNeverDrain) {
  ASSERT_GT(busy_ms, 20.0) << "the GEMM queue is too short to tell waiting from not";
  std::unique_ptr<EventClock> clock = gpu->make_event_clock();
  PhaseTimes t;
  t.clock = clock.get();
  for (int step = 0; step < 2; ++step) {
    t.clear();
    const auto t0 = HostClock::now();
    {
      ScopedPhase f(&t, Phase::forward);
      busy(kGemms / 2);
      ScopedPhase att(&t, Phase::attention);
      busy(kGemms / 2);
    }
    {
      ScopedPhase g(&t, Phase::grad_reduce);
      busy(kGemms / 4);
    }
    const double enqueue_ms = host_ms(t0);
    EXPECT_LT(enqueue_ms, 0.25 * busy_ms) << "a phase boundary waited for the device";
    gpu->synchronize();  // the step's one synchronization
    t.resolve();
    const double fwd = t.get(Phase::forward), att = t.get(Phase::attention);
    std::printf("[timers] step %d: forward %.2f ms, attention %.2f ms, grad_reduce %.2f ms "
                "(GEMM queue %.2f ms; host enqueued in %.2f ms)\n",
                step, fwd, att, t.get(Phase::grad_reduce), busy_ms, enqueue_ms);
    EXPECT_GT(att, 0.3 * busy_ms);
    EXPECT_GT(fwd, att + 0.3 * busy_ms) << "the outer phase includes the nested one";
    EXPECT_LT(fwd, 3.0 * busy_ms);
    EXPECT_GT(t.get(Phase::grad_reduce), 0.1 * busy_ms);
    EXPECT_EQ(t.get(Phase::backward), 0.0);
  }
}

TEST_F(GpuOverlap, CopyFromHostReturnsWhileTheGpuIsBusy) {
  const size_t n = size_t(1) << 18;  // 1 MiB, inside one ring slot
  std::vector<float> host(n, 1.5f);
  Buffer<float> dst(*gpu, n);
  busy(kGemms);
  const auto t0 = HostClock::now();
  gpu->copy_from_host(dst.get(), host.data(), n * sizeof(float));
  const double ms = host_ms(t0);
  std::fill(host.begin(), host.end(), -1.0f);  // reused at once: the ring holds the copy
  EXPECT_LT(ms, 0.25 * busy_ms) << "copy_from_host waited for the device";
  EXPECT_EQ(download(*gpu, dst), std::vector<float>(n, 1.5f));
  // Larger than the whole ring: it goes through the slots in turn, and stays right.
  const size_t big = size_t(40) << 18;  // 40 MiB
  std::vector<float> x(big);
  for (size_t i = 0; i < big; ++i) x[i] = static_cast<float>(i % 1000);
  Buffer<float> d2(*gpu, big);
  gpu->copy_from_host(d2.get(), x.data(), big * sizeof(float));
  EXPECT_EQ(download(*gpu, d2), x);
}

TEST_F(GpuOverlap, AttentionNeitherReadsBackNorWaits) {
  struct Kernels {
    DType act;
    const char* attention;
  };
  std::vector<Kernels> runs{{DType::f32, "auto"}, {DType::bf16, "tc"}};
  if (cuda::cudnn_attention_built()) runs.push_back({DType::bf16, "cudnn"});
  for (const auto& [act, attention] : runs) {
    SCOPED_TRACE(std::string(dtype_name(act)) + " " + attention);
    const bool cudnn = std::string(attention) == "cudnn";
    auto be = make_cuda_backend(act, false, *enum_parse<CudaAttention>(attention));
    auto* cbe = dynamic_cast<CudaBackend*>(be.get());
    const int heads = 4, kv = 2, hd = 64;
    std::vector<int32_t> cu{0, 100, 357, 1000};
    const int64_t T = cu.back();
    Rng r(3);
    auto q = upload_act(*be, random_bf16(r, T * heads * hd));
    auto k = upload_act(*be, random_bf16(r, T * kv * hd));
    auto v = upload_act(*be, random_bf16(r, T * kv * hd));
    auto out = upload_act(*be, std::vector<float>(T * heads * hd));
    auto dq = upload_act(*be, std::vector<float>(T * heads * hd));
    auto dk = upload_act(*be, std::vector<float>(T * kv * hd));
    auto dv = upload_act(*be, std::vector<float>(T * kv * hd));
    Buffer<float> lse(*be, T * heads);
    auto gcu = upload(*be, cu);
    AttnShape s{gcu.get(), 3, heads, kv, hd, 0.125, cu.data()};
    if (cudnn) {  // its graphs are built on first use, on the host: not what is timed here
      be->attention_forward(out.get(), lse.get(), q.get(), k.get(), v.get(), s);
      be->attention_backward(dq.get(), dk.get(), dv.get(), out.get(), q.get(), k.get(),
                             v.get(), out.get(), lse.get(), s);
      be->synchronize();
    }
    const size_t builds = cbe->tile_map_builds(), graphs = cbe->cudnn_graph_builds(),
                 calls = cbe->cudnn_attention_calls();
    // The backend's own queue: GEMMs on this backend's stream.
    Buffer<float> ga(*be, kN * kN), gb(*be, kN * kN), gc(*be, kN * kN);
    for (int i = 0; i < kGemms; ++i)
      be->gemm(false, false, kN, kN, kN, 1.0f, ga.get(), kN, gb.get(), kN, 0.0f, gc.get(), kN);
    const auto t0 = HostClock::now();
    for (int layer = 0; layer < 4; ++layer) {
      be->attention_forward(out.get(), lse.get(), q.get(), k.get(), v.get(), s);
      be->attention_backward(dq.get(), dk.get(), dv.get(), out.get(), q.get(), k.get(), v.get(),
                             out.get(), lse.get(), s);
    }
    const double ms = host_ms(t0);
    EXPECT_LT(ms, 0.25 * busy_ms) << "attention waited for the device";
    if (cudnn) {
      EXPECT_EQ(cbe->cudnn_attention_calls(), calls + 8) << "cuDNN did not run every call";
      EXPECT_EQ(cbe->cudnn_attention_fallbacks(), 0u);
    } else {
      EXPECT_EQ(cbe->tile_map_builds(), builds + 1) << "one layout, one tile map";
    }
    // A new layout (the next micro-batch): one more map; for cuDNN, the same graph.
    cu[1] = 64;
    be->attention_forward(out.get(), lse.get(), q.get(), k.get(), v.get(), s);
    if (cudnn)
      EXPECT_EQ(cbe->cudnn_graph_builds(), graphs) << "a layout in the same bucket built a graph";
    else
      EXPECT_EQ(cbe->tile_map_builds(), builds + 2);
    be->synchronize();
    // And without the host copy the CUDA backend refuses, naming it.
    s.cu_seqlens_host = nullptr;
    EXPECT_THROW(be->attention_forward(out.get(), lse.get(), q.get(), k.get(), v.get(), s), Error);
  }
}

TEST_F(GpuOverlap, PoolKeepsFreedMemoryAcrossSynchronizations) {
  const size_t before = cb->pool().reserved_bytes();
  {
    Buffer<float> t(*gpu, size_t(64) << 20);  // 256 MiB
  }
  gpu->synchronize();
  const size_t kept = cb->pool().reserved_bytes();
  EXPECT_GE(kept, before + (size_t(256) << 20)) << "freed memory went back to the driver";
  {
    Buffer<float> t(*gpu, size_t(64) << 20);
  }
  gpu->synchronize();
  EXPECT_EQ(cb->pool().reserved_bytes(), kept) << "the same request reserved more";
}

}  // namespace
}  // namespace flexsp::testing

// GPU benchmark (not a test): times the CUDA backend's attention forward/backward, an fp32
// GEMM and a whole model step (forward + backward) against the CPU backend, prints one
// table. Median of repeats after warm-up, with the stream synchronized around each
// timed region. Run by scripts/gpu/run_gpu_suite.sh; results go to bench/results/ by hand.
//   bench_gpu [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#include "lib/model/llama.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"

using namespace flexsp;

namespace {

double median_ms(Backend& be, int reps, const std::function<void()>& f) {
  f();  // warm-up
  be.synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    be.synchronize();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> randv(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed;
  for (auto& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-53 * 2 - 1);
  }
  return v;
}

template <class T>
Buffer<T> up(Backend& be, const std::vector<T>& v) {
  Buffer<T> b(be, v.size());
  be.copy_from_host(b.get(), v.data(), v.size() * sizeof(T));
  return b;
}

void bench_attention(Backend& be, int seqlen, int nseq, int heads, int kv, int d, int reps) {
  std::vector<int32_t> cu{0};
  for (int i = 0; i < nseq; ++i) cu.push_back(cu.back() + seqlen);
  const int64_t T = cu.back();
  auto q = up(be, randv(T * heads * d, 1)), k = up(be, randv(T * kv * d, 2));
  auto v = up(be, randv(T * kv * d, 3)), g = up(be, randv(T * heads * d, 4));
  auto cud = up(be, cu);
  Buffer<float> o(be, T * heads * d), lse(be, T * heads), dq(be, T * heads * d),
      dk(be, T * kv * d), dv(be, T * kv * d);
  AttnShape s;
  s.cu_seqlens = cud.get();
  s.nseq = nseq;
  s.heads = heads;
  s.kv_heads = kv;
  s.head_dim = d;
  s.scale = 1.0 / std::sqrt(double(d));
  const double fwd = median_ms(be, reps, [&] {
    be.attention_forward(o.get(), lse.get(), q.get(), k.get(), v.get(), s);
  });
  const double bwd = median_ms(be, reps, [&] {
    be.attention_backward(dq.get(), dk.get(), dv.get(), g.get(), q.get(), k.get(), v.get(),
                          o.get(), lse.get(), s);
  });
  // Model FLOPs as model_attention_flops counts them (and bench/gpu/torch_baseline.py):
  // forward 4 h d s(s+1)/2 per sequence (causal), backward twice that; no recompute.
  const double flops = 4.0 * nseq * heads * d * 0.5 * double(seqlen) * (seqlen + 1);
  std::printf("%-5s attention s=%-5d x%-3d h=%d/%d d=%-3d  fwd %9.3f ms %8.2f TFLOP/s   "
              "bwd %9.3f ms %8.2f TFLOP/s\n",
              be.name(), seqlen, nseq, heads, kv, d, fwd, flops / fwd * 1e-9, bwd,
              2.0 * flops / bwd * 1e-9);
}

void bench_gemm(Backend& be, int64_t m, int64_t n, int64_t k, int reps) {
  auto a = up(be, randv(m * k, 5)), b = up(be, randv(k * n, 6));
  Buffer<float> c(be, m * n);
  const double ms = median_ms(be, reps, [&] {
    be.gemm(false, true, m, n, k, 1.0f, a.get(), k, b.get(), k, 0.0f, c.get(), n);
  });
  std::printf("%-5s gemm %ldx%ldx%ld fp32: %9.3f ms %8.2f TFLOP/s\n", be.name(), long(m),
              long(n), long(k), ms, 2.0 * m * n * k / ms * 1e-9);
}

void bench_model(Backend& be, const std::string& preset, int64_t tokens, int seqlen, int reps) {
  ModelSection ms;
  ms.preset = preset;
  ms.vocab = 32000;
  const ModelConfig cfg = resolve_model_config(ms, {}, 0);
  Llama model(be, cfg, tokens);
  const ParamTable& t = model.params();
  std::vector<float> hp(static_cast<size_t>(t.total));
  init_params(cfg, t, 1, hp.data(), 0, t.total);
  auto p = up(be, hp);
  Buffer<float> g(be, hp.size());
  std::vector<int32_t> ids(tokens), pos(tokens), tgt(tokens), cu{0};
  for (int64_t i = 0; i < tokens; ++i) ids[i] = static_cast<int32_t>((i * 7919) % cfg.vocab);
  while (cu.back() < tokens) cu.push_back(std::min<int64_t>(tokens, cu.back() + seqlen));
  const int nseq = static_cast<int>(cu.size()) - 1;
  packed_positions(cu.data(), nseq, pos.data());
  packed_next_token_targets(ids.data(), cu.data(), nseq, tgt.data());
  MicroBatch mb{tokens, ids.data(), pos.data(), tgt.data(), nseq, cu.data()};
  double loss = 0;
  const double step = median_ms(be, reps, [&] {
    loss = model.forward(p.get(), mb).loss_sum;
    model.backward(p.get(), g.get(), 1.0 / double(tokens));
  });
  std::printf("%-5s model %-6s %6ld tokens (seq %5d): fwd+bwd %9.2f ms  %10.0f tokens/s  "
              "loss/token %.4f  peak %.1f MiB\n",
              be.name(), preset.c_str(), long(tokens), seqlen, step, tokens / step * 1e3,
              loss / tokens, be.peak_allocated_bytes() / 1048576.0);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (cuda_device_count() == 0) {
    std::printf("bench_gpu: no CUDA device, nothing to time\n");
    return 0;
  }
  try {
    auto gpu = make_cuda_backend();
    auto cpu = make_cpu_backend();
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("device: %s, %d SMs, %.0f GiB\n", prop.name, prop.multiProcessorCount,
                prop.totalGlobalMem / 1073741824.0);
    const int reps = quick ? 3 : 10;
    bench_gemm(*gpu, 4096, 4096, 4096, reps);
    bench_attention(*gpu, 1024, 8, 16, 4, 64, reps);
    bench_attention(*gpu, 4096, 2, 16, 4, 128, reps);
    bench_attention(*gpu, 64, 128, 16, 4, 128, reps);
    bench_attention(*cpu, 1024, 2, 8, 4, 64, 2);
    bench_model(*gpu, "small", 4096, 512, reps);
    bench_model(*cpu, "small", 4096, 512, 2);
    if (!quick) bench_model(*gpu, "125m", 8192, 2048, reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}

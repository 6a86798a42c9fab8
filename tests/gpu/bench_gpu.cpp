// GPU benchmark (not a test): times the CUDA backend's GEMM, attention forward/backward
// and a whole model step (forward + backward), in fp32 and in bf16 mixed precision,
// against the CPU backend (fp32), and prints one line per measurement, then a
// table of fp32 vs bf16 on this device with the ratio fp32 ms / bf16 ms (the speedup
// mixed precision buys; the PyTorch ratios of bench/gpu/NOTES.md come from the same
// lines). Median of repeats after warm-up, with the stream synchronized around each timed
// region. Run by scripts/gpu/run_gpu_suite.sh; results go to bench/results/ by hand.
// Where the build has cuDNN's attention, a table of it against flexsp's tensor-core kernels
// (bf16, causal, packed; a Wikipedia-like mix from $FLEXSP_LENGTHS when set); then the
// 1.3b's GEMMs through cuBLASLt against cublasGemmEx.
// With --vs-torch, the attention cases of the PyTorch baseline instead (vs_torch below).
//   bench_gpu [--quick] [--vs-torch torch_baseline.jsonl]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device.h"
#include "lib/model/llama.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"
#include "lib/util/error.h"

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

// n activations (be.act_dtype()) holding v: uploaded as fp32, cast on the device.
Buffer<char> up_act(Backend& be, const std::vector<float>& v) {
  Buffer<char> b(be, v.size() * be.act_size());
  Buffer<float> f = up(be, v);
  be.cast(b.get(), be.act_dtype(), f.get(), DType::f32, static_cast<int64_t>(v.size()));
  be.synchronize();
  return b;
}

Buffer<char> act_buffer(Backend& be, size_t n) { return Buffer<char>(be, n * be.act_size()); }

// "cuda bf16", "cuda f32", "cpu f32".
std::string label(Backend& be) {
  return std::string(be.name()) + " " + dtype_name(be.act_dtype());
}

struct Times {
  double fwd = 0, bwd = 0;
};

// Model FLOPs as model_attention_flops counts them (and bench/gpu/torch_baseline.py):
// forward 4 h d s(s+1)/2 per sequence (causal), backward twice that; no recompute.
double attention_fwd_flops(const std::vector<int64_t>& seqlens, int heads, int d) {
  double f = 0;
  for (int64_t s : seqlens) f += 4.0 * heads * d * 0.5 * double(s) * double(s + 1);
  return f;
}

// Forward and backward of causal attention over packed sequences of the given lengths.
Times time_attention(Backend& be, const std::vector<int64_t>& seqlens, int heads, int kv, int d,
                     int reps) {
  std::vector<int32_t> cu{0};
  for (int64_t l : seqlens) cu.push_back(cu.back() + static_cast<int32_t>(l));
  const int64_t T = cu.back();
  const int nseq = static_cast<int>(seqlens.size());
  auto q = up_act(be, randv(T * heads * d, 1)), k = up_act(be, randv(T * kv * d, 2));
  auto v = up_act(be, randv(T * kv * d, 3)), g = up_act(be, randv(T * heads * d, 4));
  auto cud = up(be, cu);
  auto o = act_buffer(be, T * heads * d), dq = act_buffer(be, T * heads * d);
  auto dk = act_buffer(be, T * kv * d), dv = act_buffer(be, T * kv * d);
  Buffer<float> lse(be, T * heads);
  AttnShape s;
  s.cu_seqlens = cud.get();
  s.cu_seqlens_host = cu.data();
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
  return {fwd, bwd};
}

Times bench_attention(Backend& be, int seqlen, int nseq, int heads, int kv, int d, int reps) {
  const std::vector<int64_t> seqlens(static_cast<size_t>(nseq), seqlen);
  const auto [fwd, bwd] = time_attention(be, seqlens, heads, kv, d, reps);
  const double flops = attention_fwd_flops(seqlens, heads, d);
  std::printf("%-9s attention s=%-5d x%-3d h=%d/%d d=%-3d  fwd %9.3f ms %8.2f TFLOP/s   "
              "bwd %9.3f ms %8.2f TFLOP/s\n",
              label(be).c_str(), seqlen, nseq, heads, kv, d, fwd, flops / fwd * 1e-9, bwd,
              2.0 * flops / bwd * 1e-9);
  return {fwd, bwd};
}

// `tokens` tokens of documents drawn from $FLEXSP_LENGTHS (one length per line), else from
// a fixed spread of Wikipedia-like lengths; the last document is cut to fit.
std::vector<int64_t> mixed_lengths(int64_t tokens, uint64_t seed) {
  std::vector<int64_t> pool{90, 180, 300, 450, 650, 900, 1300, 2000, 3200, 6000};
  if (const char* path = std::getenv("FLEXSP_LENGTHS")) {
    std::ifstream in(path);
    std::vector<int64_t> file;
    for (int64_t x; in >> x;)
      if (x > 0) file.push_back(x);
    if (!file.empty()) pool.swap(file);
  }
  std::vector<int64_t> out;
  uint64_t r = seed;
  for (int64_t left = tokens; left > 0;) {
    r = r * 6364136223846793005ULL + 1442695040888963407ULL;
    const int64_t l = std::min(left, pool[static_cast<size_t>((r >> 33) % pool.size())]);
    out.push_back(l);
    left -= l;
  }
  return out;
}

// cuDNN's fused attention against flexsp's tensor-core kernels, bf16, causal, packed.
void cudnn_vs_tc(bool quick, int reps) {
  auto tc = make_cuda_backend(DType::bf16, false, CudaAttention::tc);
  auto dnn = make_cuda_backend(DType::bf16, false, CudaAttention::cudnn);
  struct Case {
    const char* name;
    std::vector<int64_t> seqlens;
    int heads, kv, d;
  };
  std::vector<Case> cases{{"1x16K", {16384}, 32, 8, 128},
                          {"mix 16K", mixed_lengths(16384, 7), 32, 8, 128},
                          {"16x1K", std::vector<int64_t>(16, 1024), 32, 32, 64},
                          {"mix 16K", mixed_lengths(16384, 7), 32, 32, 64},
                          // The 1.3b's shape: one document of exactly a bucket's length, and
                          // one of 12,636 tokens under the same 16K bucket (in the 1.3b run
                          // its attention ran at about half the benchmark's rate).
                          {"1x16K", {16384}, 32, 32, 64},
                          {"1x12636", {12636}, 32, 32, 64}};
  if (!quick) cases.push_back({"1x64K", {65536}, 32, 8, 128});
  std::printf("\nattention, bf16, causal, packed: cuDNN against flexsp's tensor-core kernels "
              "(ratio = tc ms / cudnn ms)\n%-8s %4s %6s %5s  %9s %9s %7s  %9s %9s %7s\n", "case",
              "hd", "H/KV", "seqs", "tc fwd", "cudnn fwd", "ratio", "tc bwd", "cudnn bwd",
              "ratio");
  for (const Case& c : cases) {
    const Times a = time_attention(*tc, c.seqlens, c.heads, c.kv, c.d, reps);
    const Times b = time_attention(*dnn, c.seqlens, c.heads, c.kv, c.d, reps);
    const double f = attention_fwd_flops(c.seqlens, c.heads, c.d) * 1e-9;
    std::printf("%-8s %4d %3d/%-2d %5zu  %9.3f %9.3f %7.2f  %9.3f %9.3f %7.2f   cudnn %.0f / "
                "%.0f TFLOP/s\n", c.name, c.d, c.heads, c.kv, c.seqlens.size(), a.fwd, b.fwd,
                a.fwd / b.fwd, a.bwd, b.bwd, a.bwd / b.bwd, f / b.fwd, 2 * f / b.bwd);
  }
}

// C = A B^T (the layout of the model's forward GEMMs): fp32 gemm on an fp32 backend,
// gemm_act with a C of the activation type on a bf16 one.
double bench_gemm(Backend& be, int64_t m, int64_t n, int64_t k, int reps) {
  auto a = up_act(be, randv(m * k, 5)), b = up_act(be, randv(k * n, 6));
  auto c = act_buffer(be, m * n);
  const bool f32 = be.act_dtype() == DType::f32;
  const double ms = median_ms(be, reps, [&] {
    if (f32)
      be.gemm(false, true, m, n, k, 1.0f, reinterpret_cast<const float*>(a.get()), k,
              reinterpret_cast<const float*>(b.get()), k, 0.0f,
              reinterpret_cast<float*>(c.get()), n);
    else
      be.gemm_act(false, true, m, n, k, 1.0f, a.get(), k, b.get(), k, 0.0f, c.get(),
                  be.act_dtype(), n);
  });
  std::printf("%-9s gemm %ldx%ldx%ld: %9.3f ms %8.2f TFLOP/s\n", label(be).c_str(), long(m),
              long(n), long(k), ms, 2.0 * m * n * k / ms * 1e-9);
  return ms;
}

// cuBLASLt (FLEXSP_CUDA_GEMM=lt) against cublasGemmEx on the 1.3b's GEMMs at 16K tokens,
// bf16: the forward projections, an input gradient and a weight gradient (fp32 C).
void gemm_lt_vs_cublas(int reps) {
  auto ex = make_cuda_backend(DType::bf16);
  auto lt = make_cuda_backend(DType::bf16, false, CudaAttention::automatic, true);
  struct Case {
    const char* name;
    bool ta, tb;
    int64_t m, n, k;
    DType c;
  };
  const int64_t T = 16384, H = 2048, F = 5632, V = 32000;
  const Case cases[] = {{"q/k/v/o proj", false, true, T, H, H, DType::bf16},
                        {"gate/up proj", false, true, T, F, H, DType::bf16},
                        {"down proj", false, true, T, H, F, DType::bf16},
                        {"lm head", false, true, T, V, H, DType::bf16},
                        {"down input grad", false, false, T, F, H, DType::bf16},
                        {"up weight grad", true, false, F, H, T, DType::f32}};
  std::printf("\nGEMMs of the 1.3b at 16K tokens, bf16: cuBLASLt against cublasGemmEx "
              "(ratio = GemmEx ms / Lt ms)\n%-16s %22s %10s %10s %7s %9s\n", "what",
              "m x n x k", "GemmEx ms", "Lt ms", "ratio", "Lt TFLOP/s");
  for (const Case& c : cases) {
    auto time = [&](Backend& be) {
      auto a = up_act(be, randv(c.m * c.k, 5)), b = up_act(be, randv(c.k * c.n, 6));
      Buffer<char> out(be, static_cast<size_t>(c.m * c.n) * dtype_size(c.c));
      const int64_t lda = c.ta ? c.m : c.k, ldb = c.tb ? c.k : c.n;
      return median_ms(be, reps, [&] {
        be.gemm_act(c.ta, c.tb, c.m, c.n, c.k, 1.0f, a.get(), lda, b.get(), ldb, 0.0f,
                    out.get(), c.c, c.n);
      });
    };
    const double a = time(*ex), b = time(*lt);
    std::printf("%-16s %8ldx%6ldx%6ld %10.3f %10.3f %7.2f %9.1f\n", c.name, long(c.m), long(c.n),
                long(c.k), a, b, a / b, 2.0 * c.m * c.n * c.k / b * 1e-9);
  }
}

double bench_model(Backend& be, const std::string& preset, int64_t tokens, int seqlen, int reps) {
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
  std::printf("%-9s model %-6s %6ld tokens (seq %5d): fwd+bwd %9.2f ms  %10.0f tokens/s  "
              "loss/token %.4f  peak %.1f MiB\n",
              label(be).c_str(), preset.c_str(), long(tokens), seqlen, step,
              tokens / step * 1e3, loss / tokens, be.peak_allocated_bytes() / 1048576.0);
  return step;
}

// One row of the fp32 vs bf16 table.
struct Row {
  std::string what;
  double fp32_ms, bf16_ms;
};

void print_table(const std::vector<Row>& rows) {
  std::printf("\nfp32 vs bf16 on this device (ratio = fp32 ms / bf16 ms, > 1: bf16 faster)\n");
  std::printf("%-44s %11s %11s %7s\n", "what", "fp32 ms", "bf16 ms", "ratio");
  for (const Row& r : rows)
    std::printf("%-44s %11.3f %11.3f %7.2f\n", r.what.c_str(), r.fp32_ms, r.bf16_ms,
                r.fp32_ms / r.bf16_ms);
}

// --vs-torch FILE: the attention cases of bench/gpu/torch_baseline.py's JSON lines, timed
// here in bf16 on the very same sequence lengths (its "attention" lines carry them),
// against the fastest PyTorch implementation of each case and pass ("attention_best"):
// ratio = PyTorch ms / flexsp ms (>= 1: flexsp as fast or faster).
std::string case_key(const nlohmann::json& j) {
  return j.value("case", "") + "/" + std::to_string(j.value("head_dim", 0)) + "/" +
         std::to_string(j.value("heads", 0)) + "/" + std::to_string(j.value("kv_heads", 0));
}

struct TorchCases {
  std::map<std::string, std::vector<int64_t>> seqlens;  // case_key -> lengths
  std::vector<nlohmann::json> best;                       // "attention_best" lines
};

TorchCases read_torch_cases(const std::string& path) {
  std::ifstream in(path);
  FLEXSP_CHECK(in.good(), "cannot read {}", path);
  TorchCases c;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    const std::string kind = j.value("kind", "");
    if (kind == "attention" && j.contains("seqlens") && j["seqlens"].is_array())
      c.seqlens[case_key(j)] = j["seqlens"].get<std::vector<int64_t>>();
    if (kind == "attention_best") c.best.push_back(j);
  }
  std::printf("%s: %zu PyTorch attention bests, %zu cases with sequence lengths\n", path.c_str(),
              c.best.size(), c.seqlens.size());
  return c;
}

void vs_torch(const TorchCases& cases, int reps) {
  const auto& [seqlens, best] = cases;
  auto be = make_cuda_backend(DType::bf16);  // auto: cuDNN's attention where built
  auto tc = make_cuda_backend(DType::bf16, false, CudaAttention::tc);
  std::map<std::string, Times> timed, timed_tc;  // each case once, for both passes
  std::printf("\nattention, bf16, flexsp against the fastest PyTorch on the same sequences "
              "(ratio = PyTorch ms / flexsp ms)\n");
  std::printf("flexsp: %s; tc: flexsp's tensor-core kernels\n",
              cuda::cudnn_attention_built() ? "cuDNN's fused attention" : "tc (no cuDNN)");
  std::printf("%-10s %4s %6s %-8s %10s %8s   %-12s %10s %8s %7s %8s\n", "case", "hd", "H/KV",
              "pass", "flexsp ms", "TFLOP/s", "PyTorch", "ms", "TFLOP/s", "ratio", "tc ratio");
  for (const nlohmann::json& b : best) {
    const std::string key = case_key(b);
    const auto it = seqlens.find(key);
    if (it == seqlens.end()) {
      std::printf("%-10s: no \"attention\" line gives its sequence lengths\n", key.c_str());
      continue;
    }
    const int hd = b.value("head_dim", 0), heads = b.value("heads", 0), kv = b.value("kv_heads", 0);
    if (!timed.count(key)) {
      timed[key] = time_attention(*be, it->second, heads, kv, hd, reps);
      timed_tc[key] = time_attention(*tc, it->second, heads, kv, hd, reps);
    }
    const bool both = b.value("pass", "") == "fwd+bwd";
    const Times& t = timed[key];
    const double ms = both ? t.fwd + t.bwd : t.fwd;
    const Times& u = timed_tc[key];
    const double tc_ms = both ? u.fwd + u.bwd : u.fwd;
    const double flops = attention_fwd_flops(it->second, heads, hd) * (both ? 3.0 : 1.0);
    const double torch_ms = b.value("ms", 0.0);
    std::printf("%-10s %4d %3d/%-2d %-8s %10.3f %8.1f   %-12s %10.3f %8.1f %7.2f %8.2f\n",
                b.value("case", "").c_str(), hd, heads, kv, b.value("pass", "").c_str(), ms,
                flops / ms * 1e-9, b.value("impl", "").c_str(), torch_ms,
                b.value("tflops", 0.0), torch_ms / ms, torch_ms / tc_ms);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string torch_jsonl;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--vs-torch") == 0 && i + 1 < argc) {
      torch_jsonl = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_gpu [--quick] [--vs-torch torch_baseline.jsonl]\n");
      return 2;
    }
  }
  try {
    TorchCases cases;
    if (!torch_jsonl.empty()) cases = read_torch_cases(torch_jsonl);
    if (cuda_device_count() == 0) {
      std::printf("bench_gpu: no CUDA device, nothing to time\n");
      return 0;
    }
    if (!torch_jsonl.empty()) {
      vs_torch(cases, quick ? 2 : 5);
      return 0;
    }
    auto f32 = make_cuda_backend(DType::f32);
    auto bf16 = make_cuda_backend(DType::bf16);
    auto cpu = make_cpu_backend();
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("device: %s, %d SMs, %.0f GiB\n", prop.name, prop.multiProcessorCount,
                prop.totalGlobalMem / 1073741824.0);
    const int reps = quick ? 3 : 10;
    std::vector<Row> rows;
    rows.push_back({"gemm 4096x4096x4096", bench_gemm(*f32, 4096, 4096, 4096, reps),
                    bench_gemm(*bf16, 4096, 4096, 4096, reps)});
    struct AttnCase {
      int seqlen, nseq, heads, kv, d;
    };
    for (const AttnCase& c : {AttnCase{1024, 8, 16, 4, 64}, AttnCase{4096, 2, 16, 4, 128},
                              AttnCase{64, 128, 16, 4, 128}}) {
      const Times a = bench_attention(*f32, c.seqlen, c.nseq, c.heads, c.kv, c.d, reps);
      const Times b = bench_attention(*bf16, c.seqlen, c.nseq, c.heads, c.kv, c.d, reps);
      const std::string what = "attention s=" + std::to_string(c.seqlen) + " x" +
                               std::to_string(c.nseq) + " d=" + std::to_string(c.d);
      rows.push_back({what + " fwd", a.fwd, b.fwd});
      rows.push_back({what + " fwd+bwd", a.fwd + a.bwd, b.fwd + b.bwd});
    }
    bench_attention(*cpu, 1024, 2, 8, 4, 64, 2);
    rows.push_back({"model small 4096 tokens fwd+bwd", bench_model(*f32, "small", 4096, 512, reps),
                    bench_model(*bf16, "small", 4096, 512, reps)});
    bench_model(*cpu, "small", 4096, 512, 2);
    if (!quick)
      rows.push_back({"model 125m 8192 tokens fwd+bwd",
                      bench_model(*f32, "125m", 8192, 2048, reps),
                      bench_model(*bf16, "125m", 8192, 2048, reps)});
    print_table(rows);
    if (cuda::cudnn_attention_built()) cudnn_vs_tc(quick, reps);
    gemm_lt_vs_cublas(reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}

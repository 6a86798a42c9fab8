// bench_model_cpu: tokens/s of one forward + backward of a model on the CPU backend at
// several micro-batch sizes (packed sequences of --seq-len tokens), and peak memory.
//
//   bench_model_cpu [--preset small] [--vocab 32000] [--seq-len 1024]
//                   [--tokens 1024,4096,16384] [--iters 3] [--checkpoint]
//
// Sizes run in increasing order in one process, so "peak RSS" is the process peak up to
// and including that size; "model MB" is what the backend allocated (parameters,
// gradients, workspace). GFLOP/s counts model FLOPs (6N per token + causal attention),
// not the recomputation of activation checkpointing. The baseline, measured in the same
// run, is OpenBLAS sgemm on the shape of the MLP's gate projection at 4096 tokens: the
// "of sgemm" column is the model's FLOP rate as a fraction of it.
// Threads: OMP_NUM_THREADS for flexsp's kernels, OPENBLAS_NUM_THREADS for the GEMMs; on
// few cores set OMP_WAIT_POLICY=passive so idle OpenMP threads do not spin against BLAS.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "lib/backend/backend.h"
#include "lib/model/llama.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"
#include "lib/util/error.h"

namespace {

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> v;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t end = s.find(',', pos);
    v.push_back(std::stoll(s.substr(pos, end == std::string::npos ? std::string::npos : end - pos)));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace flexsp;
  std::string preset = "small";
  int vocab = 32000, seq_len = 1024, iters = 3;
  bool checkpoint = false;
  std::vector<int64_t> sizes = {1024, 4096, 16384};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--preset") preset = next();
    else if (a == "--vocab") vocab = std::stoi(next());
    else if (a == "--seq-len") seq_len = std::stoi(next());
    else if (a == "--tokens") sizes = parse_list(next());
    else if (a == "--iters") iters = std::stoi(next());
    else if (a == "--checkpoint") checkpoint = true;
    else {
      std::fprintf(stderr, "unknown argument %s (see the comment at the top of bench_model_cpu.cpp)\n", a.c_str());
      return 2;
    }
  }
  try {
    // Baseline: sgemm of the gate projection's shape, [4096, hidden] x [hidden, ffn].
    double sgemm_gflops = 0;
    {
      ModelSection bm;
      bm.preset = preset;
      bm.vocab = vocab;
      const ModelConfig bc = resolve_model_config(bm, {}, 0);
      const int64_t M = 4096, N = bc.ffn, K = bc.hidden;
      std::vector<float> a(M * K, 0.5f), b(N * K, 0.25f), c(M * N);
      cpu::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
      const int reps = 10;
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r)
        cpu::gemm(false, true, M, N, K, 1.0f, a.data(), K, b.data(), K, 0.0f, c.data(), N);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      sgemm_gflops = 2.0 * M * N * K * reps / s / 1e9;
      std::printf("baseline: sgemm %lldx%lldx%lld: %.1f GFLOP/s\n", static_cast<long long>(M),
                  static_cast<long long>(N), static_cast<long long>(K), sgemm_gflops);
    }
    ModelSection m;
    m.preset = preset;
    m.vocab = vocab;
    m.checkpoint_activations = checkpoint;
    const ModelConfig cfg = resolve_model_config(m, {}, 0);
    std::printf("model %s%s\n", model_config_summary(cfg).c_str(),
                checkpoint ? ", activation checkpointing" : "");
    auto env = [](const char* k) {
      const char* v = std::getenv(k);
      return v != nullptr ? v : "(unset)";
    };
    std::printf("threads %d (OpenMP), OMP_WAIT_POLICY %s, OPENBLAS_NUM_THREADS %s, attention "
                "kernels: %s, sequences of %d tokens\n\n",
                omp_get_max_threads(), env("OMP_WAIT_POLICY"), env("OPENBLAS_NUM_THREADS"),
                cpu::attention_isa(), seq_len);
    std::printf("| tokens | seqs | fwd ms | bwd ms | fwd+bwd ms | tokens/s | GFLOP/s | of sgemm | model MB | peak RSS MB |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    std::sort(sizes.begin(), sizes.end());
    for (int64_t T : sizes) {
      auto be = make_cpu_backend();
      Llama model(*be, cfg, T);
      const ParamTable& t = model.params();
      Buffer<float> params(*be, static_cast<size_t>(t.total)), grads(*be, static_cast<size_t>(t.total));
      init_params(cfg, t, 1, params.get(), 0, t.total);
      std::vector<int32_t> ids(T), pos(T), tgt(T), cu(1, 0);
      std::vector<int64_t> lens;
      while (cu.back() < T) {
        const int32_t n = static_cast<int32_t>(std::min<int64_t>(seq_len, T - cu.back()));
        cu.push_back(cu.back() + n);
        lens.push_back(n);
      }
      uint64_t x = 88172645463325252ULL;
      for (auto& id : ids) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        id = static_cast<int32_t>(x % static_cast<uint64_t>(cfg.vocab));
      }
      const int nseq = static_cast<int>(cu.size()) - 1;
      packed_positions(cu.data(), nseq, pos.data());
      packed_next_token_targets(ids.data(), cu.data(), nseq, tgt.data());
      const MicroBatch mb{T, ids.data(), pos.data(), tgt.data(), nseq, cu.data()};
      double fwd = 0, bwd = 0;
      for (int it = 0; it <= iters; ++it) {  // iteration 0 warms up
        const auto t0 = std::chrono::steady_clock::now();
        const ForwardResult r = model.forward(params.get(), mb);
        const auto t1 = std::chrono::steady_clock::now();
        model.backward(params.get(), grads.get(), 1.0 / static_cast<double>(r.predictions));
        const auto t2 = std::chrono::steady_clock::now();
        if (it > 0) {
          fwd += std::chrono::duration<double, std::milli>(t1 - t0).count();
          bwd += std::chrono::duration<double, std::milli>(t2 - t1).count();
        }
      }
      fwd /= iters;
      bwd /= iters;
      const double ms = fwd + bwd;
      const double flops = model_train_flops(cfg, lens);
      const double gflops = flops / (ms / 1e3) / 1e9;
      std::printf("| %lld | %d | %.0f | %.0f | %.0f | %.0f | %.1f | %.2f | %.0f | %.0f |\n",
                  static_cast<long long>(T), nseq, fwd, bwd, ms, T / (ms / 1e3), gflops,
                  gflops / sgemm_gflops, be->peak_allocated_bytes() / 1e6, peak_rss_mb());
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_model_cpu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

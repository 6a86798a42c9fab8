// bench_tp_memory: per-rank memory of model states and activations under tensor
// parallelism, tp = 1, 2, 4 (and 8 with 8 ranks), at a fixed micro-batch of one device.
//
//   mpirun -np 4 bench_tp_memory [--preset small] [--vocab 32000] [--tokens 8192]
//                                [--seq-len 1024] [--layers N] [--checkpoint]
//
// Every size runs on groups of tp consecutive ranks (all ranks busy, each group the same
// device micro-batch). "states" are what ZeRO 0 keeps per rank for this rank's block of
// every tensor: fp32 parameters, gradients and the two AdamW moments (16 bytes per
// element). "activations" is the backend allocator's peak over one forward + backward
// (the model's workspace, sized for the micro-batch, plus what the pass allocates),
// counted through the CPU backend's allocator. Ratios are to tp = 1 in the same run; the
// ideal is 1/tp (the norms and replicated kv heads are held whole on every rank, and the
// vocabulary is padded up to a multiple of tp), and the exchange buffers around the
// tensor-parallel GEMMs (the gathered rows and the fp32 partial sums of the whole
// micro-batch, shared by the layers) do not shrink: the ratio nears 1/tp as layers grow.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "lib/backend/backend.h"
#include "lib/comm/comm.h"
#include "lib/config/config.h"
#include "lib/model/llama.h"
#include "lib/model/model_config.h"
#include "lib/model/params.h"
#include "lib/model/tensor_parallel.h"
#include "lib/util/error.h"

namespace {

using namespace flexsp;

struct Row {
  int tp = 1;
  double states_mb = 0, act_mb = 0, ms = 0;
};

Row measure(const ModelConfig& c, int tp, int64_t T, int64_t seq) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm split;
  MPI_Comm_split(MPI_COMM_WORLD, rank / tp, rank, &split);
  std::unique_ptr<Comm> comm = make_mpi_comm(split, /*owned=*/true);
  auto be = make_cpu_backend();
  const size_t before = be->allocated_bytes();
  be->reset_peak_allocated_bytes();
  Llama m(*be, c, T, TpGroup{tp > 1 ? comm.get() : nullptr, tp, rank % tp});
  const ParamTable& t = m.params();
  std::vector<float> p(static_cast<size_t>(t.total)), g(p.size(), 0.f);
  init_params(c, t, 7, p.data(), 0, t.total);
  // Packed sequences of `seq` tokens; ids from a fixed pattern (the values do not matter).
  std::vector<int32_t> ids(T), pos(T), tgt(T), cu;
  for (int64_t i = 0; i < T; ++i) ids[i] = static_cast<int32_t>((i * 7919) % c.vocab);
  for (int64_t s = 0; s <= T; s += seq) cu.push_back(static_cast<int32_t>(s));
  if (cu.back() != T) cu.push_back(static_cast<int32_t>(T));
  const int nseq = static_cast<int>(cu.size()) - 1;
  packed_positions(cu.data(), nseq, pos.data());
  packed_next_token_targets(ids.data(), cu.data(), nseq, tgt.data());
  MicroBatch mb{T, ids.data(), pos.data(), tgt.data(), nseq, cu.data()};
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  m.forward(p.data(), mb);
  m.backward(p.data(), g.data(), 1.0 / static_cast<double>(T));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  Row r;
  r.tp = tp;
  r.states_mb = 16.0 * static_cast<double>(t.total) / 1e6;
  r.act_mb = static_cast<double>(be->peak_allocated_bytes() - before) / 1e6;
  r.ms = ms;
  double v[3] = {r.states_mb, r.act_mb, r.ms};
  MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  r.states_mb = v[0], r.act_mb = v[1], r.ms = v[2];
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::string preset = "small";
  int vocab = 32000, layers = 0;
  int64_t tokens = 8192, seq = 1024;
  bool ckpt = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--preset") preset = next();
    else if (a == "--vocab") vocab = std::atoi(next().c_str());
    else if (a == "--tokens") tokens = std::atoll(next().c_str());
    else if (a == "--seq-len") seq = std::atoll(next().c_str());
    else if (a == "--layers") layers = std::atoi(next().c_str());
    else if (a == "--checkpoint") ckpt = true;
    else {
      if (rank == 0) std::fprintf(stderr, "bench_tp_memory: unknown option %s\n", a.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  try {
    ModelSection ms;
    ms.preset = preset;
    ms.vocab = vocab;
    ms.checkpoint_activations = ckpt;
    ms.layers = layers;
    const ModelConfig c = resolve_model_config(ms, {"model.checkpoint_activations"}, 0);
    if (rank == 0)
      std::printf("bench_tp_memory: %s, %lld tokens per device (sequences of %lld), activation "
                  "checkpointing %s, %d ranks\n\n%4s %14s %8s %16s %8s %10s\n",
                  model_config_summary(c).c_str(), static_cast<long long>(tokens),
                  static_cast<long long>(seq), ckpt ? "on" : "off", world, "tp", "states MB/rank",
                  "ratio", "activations MB", "ratio", "fwd+bwd ms");
    Row base;
    for (int tp = 1; tp <= world && tp <= 8; tp *= 2) {
      if (world % tp != 0) break;
      const Row r = measure(c, tp, tokens, seq);
      if (tp == 1) base = r;
      if (rank == 0)
        std::printf("%4d %14.1f %8.3f %16.1f %8.3f %10.1f\n", r.tp, r.states_mb,
                    r.states_mb / base.states_mb, r.act_mb, r.act_mb / base.act_mb, r.ms);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_tp_memory: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}

// bench_ring_usp: what ring attention buys over Ulysses alone, on CPU ranks.
//
//   mpirun -np 8 bench_ring_usp [--budget-mb 40] [--hidden 256] [--layers 4] [--reps 2]
//                               [--time-tokens 8192] [--doc 1024]
//
// 1. The longest single document that trains within a fixed memory per rank. The model
//    has 2 heads, so Ulysses alone caps an SP group at 2 ranks; USP runs the document on
//    all ranks (u = 2, r = world / 2). Memory per rank = model states (ZeRO 0: fp32
//    parameters, gradients and two AdamW moments, 16 bytes per parameter) + the backend
//    allocator's peak over one forward + backward of the rank's share of the document
//    (the model's workspace and the attention op's buffers included). The peak is linear
//    in the document length; it is measured at two lengths, the longest length within the
//    budget is solved for, and that length is then run and measured again.
// 2. Step time (forward + backward, median of reps) of packed documents at equal group
//    size where both apply: d = 2 on the 2-head model (Ulysses vs ring), and d = world on
//    an 8-head model (Ulysses vs ring vs USP u = 2).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/model/llama.h"
#include "lib/model/params.h"
#include "lib/runtime/ring_attention.h"
#include "lib/util/error.h"

namespace {

using namespace flexsp;

ModelConfig model(int hidden, int layers, int heads) {
  ModelConfig c;
  c.hidden = hidden;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = heads;
  c.head_dim = hidden / heads;
  c.ffn = 3 * hidden;
  c.vocab = 1000;
  return c;
}

struct Measure {
  double act_mb = 0, ms = 0;  // max over ranks; ms: median over reps
};

// One group of d ranks (the first d; the others idle) runs a stream of documents `cu` as
// u x r (u = d: Ulysses).
Measure measure(Groups& groups, const ModelConfig& c, int d, int u, const std::vector<int32_t>& cu,
                int reps) {
  const int rank = groups.world->rank();
  const int nseq = static_cast<int>(cu.size()) - 1;
  const int64_t T = cu.back();
  std::vector<int32_t> ids(static_cast<size_t>(T)), pos(ids.size()), tgt(ids.size());
  for (int64_t i = 0; i < T; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % c.vocab);
  packed_positions(cu.data(), nseq, pos.data());
  packed_next_token_targets(ids.data(), cu.data(), nseq, tgt.data());
  Measure m;
  std::vector<double> times;
  if (rank < d) {
    Comm& group = groups.block(d);
    auto be = make_cpu_backend();
    const ParamTable t = make_param_table(c);
    std::vector<float> p(static_cast<size_t>(t.total)), g(p.size(), 0.f);
    init_params(c, t, 7, p.data(), 0, t.total);
    std::vector<int32_t> li, lp, lt;
    const size_t before = be->allocated_bytes();
    be->reset_peak_allocated_bytes();
    {
      std::unique_ptr<UlyssesAttention> uly;
      std::unique_ptr<RingAttention> ring;
      AttentionOp* op = nullptr;
      if (u == d) {
        const auto off = shard_offsets(T, d);
        const int j = group.rank();
        li.assign(ids.begin() + off[j], ids.begin() + off[j + 1]);
        lp.assign(pos.begin() + off[j], pos.begin() + off[j + 1]);
        lt.assign(tgt.begin() + off[j], tgt.begin() + off[j + 1]);
        uly = std::make_unique<UlyssesAttention>(*be, c, T);
        uly->set_layout(group, cu.data(), nseq, off);
        op = uly.get();
      } else {
        const ZigzagLayout z = zigzag_layout(cu.data(), nseq, d / u);
        const auto padded = cp_padded_tokens(z, u);
        cp_local_tokens(ids.data(), pos.data(), tgt.data(), z, padded, u, group.rank(), li, lp, lt);
        ring = std::make_unique<RingAttention>(*be, c, T + d);
        ring->set_layout(group, groups.block(u), z, padded);
        op = ring.get();
      }
      const int64_t n = static_cast<int64_t>(li.size());
      Llama model(*be, c, std::max<int64_t>(n, 1));
      MicroBatch mb{n, li.data(), lp.data(), lt.data(), 0, nullptr};
      for (int k = 0; k < reps; ++k) {
        group.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        model.forward(p.data(), mb, op);
        model.backward(p.data(), g.data(), 1.0 / static_cast<double>(T));
        times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    m.act_mb = static_cast<double>(be->peak_allocated_bytes() - before) / 1e6;
    std::sort(times.begin(), times.end());
    m.ms = times[times.size() / 2];
  }
  double v[2] = {m.act_mb, m.ms};
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return {v[0], v[1]};
}

std::vector<int32_t> docs(int64_t total, int64_t doc) {
  std::vector<int32_t> cu{0};
  while (cu.back() < total) cu.push_back(static_cast<int32_t>(std::min<int64_t>(cu.back() + doc, total)));
  return cu;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  double budget_mb = 40;
  int hidden = 256, layers = 4, reps = 2;
  int64_t time_tokens = 8192, doc = 1024;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--budget-mb") budget_mb = std::atof(next().c_str());
    else if (a == "--hidden") hidden = std::atoi(next().c_str());
    else if (a == "--layers") layers = std::atoi(next().c_str());
    else if (a == "--reps") reps = std::atoi(next().c_str());
    else if (a == "--time-tokens") time_tokens = std::atoll(next().c_str());
    else if (a == "--doc") doc = std::atoll(next().c_str());
    else {
      if (rank == 0) std::fprintf(stderr, "bench_ring_usp: unknown option %s\n", a.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  try {
    Grid grid = grid_create(MPI_COMM_WORLD, 0);
    Groups groups = groups_create(grid);
    const ModelConfig c2 = model(hidden, layers, 2);
    const double states_mb = 16.0 * static_cast<double>(make_param_table(c2).total) / 1e6;
    if (rank == 0)
      std::printf("bench_ring_usp: %d ranks; model hidden %d, layers %d, heads 2, vocab %d; "
                  "states %.1f MB/rank; budget %.1f MB/rank\n\n%-22s %10s %14s %12s\n",
                  world, hidden, layers, c2.vocab, states_mb, budget_mb, "longest document",
                  "tokens", "measured MB", "fwd+bwd ms");
    struct Mode { const char* name; int d, u; };
    const Mode modes[] = {{"ulysses d=2", 2, 2}, {"usp d=world u=2", world, 2}};
    for (const Mode& md : modes) {
      const int64_t s1 = 512 * md.d, s2 = 1024 * md.d;
      const Measure a = measure(groups, c2, md.d, md.u, {0, static_cast<int32_t>(s1)}, 1);
      const Measure b = measure(groups, c2, md.d, md.u, {0, static_cast<int32_t>(s2)}, 1);
      const double slope = (b.act_mb - a.act_mb) / static_cast<double>(s2 - s1);
      const double fixed = a.act_mb - slope * static_cast<double>(s1);
      int64_t s = static_cast<int64_t>((budget_mb - states_mb - fixed) / slope);
      s = s / (2 * md.d) * (2 * md.d);
      const Measure m = measure(groups, c2, md.d, md.u, {0, static_cast<int32_t>(s)}, 1);
      if (rank == 0)
        std::printf("%-22s %10lld %14.1f %12.0f\n", md.name, static_cast<long long>(s),
                    states_mb + m.act_mb, m.ms);
    }
    if (rank == 0)
      std::printf("\nstep time, packed documents of %lld tokens\n%-28s %10s %12s %10s\n",
                  static_cast<long long>(doc), "layout", "tokens", "fwd+bwd ms", "vs ulysses");
    const ModelConfig c8 = model(hidden, layers, 8);
    struct Timed { const char* name; const ModelConfig* c; int d, u; int64_t tokens; };
    const int64_t t2 = time_tokens / std::max(1, world / 2);
    const Timed runs[] = {{"heads 2, d=2 ulysses", &c2, 2, 2, t2},
                          {"heads 2, d=2 ring", &c2, 2, 1, t2},
                          {"heads 8, d=world ulysses", &c8, world, world, time_tokens},
                          {"heads 8, d=world ring", &c8, world, 1, time_tokens},
                          {"heads 8, d=world usp u=2", &c8, world, 2, time_tokens}};
    double base = 0;
    for (const Timed& t : runs) {
      if (t.d > world || (t.c->heads % t.u) != 0) continue;
      const bool usp = std::string(t.name).find("usp") != std::string::npos;
      if (usp && t.u >= t.d) continue;  // no ring left: that is the Ulysses row
      const Measure m = measure(groups, *t.c, t.d, t.u, docs(t.tokens, doc), reps);
      if (t.u == t.d) base = m.ms;
      if (rank == 0)
        std::printf("%-28s %10lld %12.0f %10.2f\n", t.name, static_cast<long long>(t.tokens), m.ms,
                    m.ms / base);
    }
    groups = Groups{};
    grid_destroy(grid);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_ring_usp: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}

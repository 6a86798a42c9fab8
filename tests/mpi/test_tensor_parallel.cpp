// The tensor-parallel model against one process: a packed micro-batch of sequences of
// many lengths through the model split over tp ranks (sequence-sharded activations,
// column/row-parallel layers, vocabulary-parallel embedding, lm_head and cross-entropy),
// alone and under Ulysses across d such groups, gives the loss and the gradients of the
// whole model on one rank (fp32: 1e-5 relative). Cases: tp 1, 2, 4; d 1, 2; kv heads split
// and replicated over tp; a vocabulary of 257 (padded to a multiple of tp); tied and untied
// embeddings; with and without activation checkpointing.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <numeric>
#include <string>

#include "lib/backend/backend.h"
#include "lib/comm/comm.h"
#include "lib/model/llama.h"
#include "lib/model/params.h"
#include "lib/model/tensor_parallel.h"
#include "lib/runtime/ulysses.h"
#include "support/rel_err.h"

namespace flexsp {
namespace {

ModelConfig model(int kv_heads, bool tied, bool ckpt) {
  ModelConfig c;
  c.hidden = 64;
  c.layers = 2;
  c.heads = 8;
  c.kv_heads = kv_heads;
  c.head_dim = 8;
  c.ffn = 96;
  c.vocab = 257;
  c.tie_embeddings = tied;
  c.checkpoint_activations = ckpt;
  return c;
}

std::unique_ptr<Comm> split(int color, int key) {
  MPI_Comm c;
  MPI_Comm_split(MPI_COMM_WORLD, color, key, &c);
  return make_mpi_comm(c, true);
}

struct Batch {
  std::vector<int32_t> ids, pos, tgt, cu;
};

// Sequences of lengths 1, 2, odd and long, packed to T tokens.
Batch make_batch(int64_t T, int vocab) {
  Batch b;
  b.cu = {0};
  const int32_t lens[] = {1, 37, 2, 90, 5, 13};
  for (int i = 0; b.cu.back() < T; ++i)
    b.cu.push_back(static_cast<int32_t>(std::min<int64_t>(b.cu.back() + lens[i % 6], T)));
  const int nseq = static_cast<int>(b.cu.size()) - 1;
  b.ids.resize(T), b.pos.resize(T), b.tgt.resize(T);
  for (int64_t t = 0; t < T; ++t) b.ids[t] = static_cast<int32_t>((t * 7919 + 13) % vocab);
  packed_positions(b.cu.data(), nseq, b.pos.data());
  packed_next_token_targets(b.ids.data(), b.cu.data(), nseq, b.tgt.data());
  return b;
}

// tp ranks per group, d groups under Ulysses (ranks [0, d tp) take part; rank = device *
// tp + tp index). Compares loss and gradients with one process.
void check_case(const ModelConfig& c, int tp, int d) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const bool in = rank < d * tp;
  // Communicators: the tp group (consecutive ranks) and the Ulysses group (same tp index).
  auto tpc = split(in ? rank / tp : world + rank, rank);
  auto spc = split(in ? rank % tp : world + rank, rank);
  auto all = split(in ? 0 : 1, rank);  // the ranks of the case
  // Replicas of a block are aligned sub-blocks of the tp group: 2 ranks (kv heads shared
  // by 2) or the whole group (norms).
  auto pairs = split(in ? rank / 2 : world + rank, rank);
  if (!in) return;
  const int64_t T = 120 * d * tp;  // a multiple of d * tp: equal shards
  const Batch b = make_batch(T, c.vocab);
  const int nseq = static_cast<int>(b.cu.size()) - 1;
  auto be = make_cpu_backend();
  const ParamTable full = make_param_table(c);
  std::vector<float> params(static_cast<size_t>(full.total));
  init_params(c, full, 11, params.data(), 0, full.total);
  const double scale = 1.0 / 500;
  // One process.
  std::vector<float> want_g(params.size(), 0.f);
  double want_loss = 0;
  {
    Llama m(*be, c, T);
    MicroBatch mb{T, b.ids.data(), b.pos.data(), b.tgt.data(), nseq, b.cu.data()};
    want_loss = m.forward(params.data(), mb).loss_sum;
    m.backward(params.data(), want_g.data(), scale);
  }
  // tp x d.
  const TpGroup g{tpc.get(), tp, rank % tp};
  Llama m(*be, c, T / d, g);
  const ParamTable& blk = m.params();
  std::vector<float> p(static_cast<size_t>(blk.total)), gr(p.size(), 0.f);
  tp_extract(full, params.data(), blk, p.data());
  const int dev = rank / tp;
  const int64_t lo = dev * (T / d), n = T / d;
  MicroBatch mb{n, b.ids.data() + lo, b.pos.data() + lo, b.tgt.data() + lo, nseq, b.cu.data()};
  UlyssesAttention u(*be, m.local_config(), T);
  if (d > 1) u.set_layout(*spc, b.cu.data(), nseq, shard_offsets(T, d));
  double loss = m.forward(p.data(), mb, d > 1 ? &u : nullptr).loss_sum;
  m.backward(p.data(), gr.data(), scale);
  // Sum partial gradients of replicated blocks over their replicas, then assemble the full
  // gradient: each block once (replica 0), summed over all ranks of the case.
  for (const TpReplicated& r : tp_replicated_ranges(blk))
    (r.replicas == tp ? *tpc : *pairs).all_reduce(gr.data() + r.begin, gr.data() + r.begin, static_cast<size_t>(r.end - r.begin),
                    DType::f32, ReduceOp::sum);
  for (const ParamView& v : blk.views)
    if (v.tp_replica != 0) std::fill(gr.begin() + v.offset, gr.begin() + v.offset + v.numel(), 0.f);
  std::vector<float> got_g(params.size(), 0.f);
  tp_insert(blk, gr.data(), full, got_g.data());
  all->all_reduce(got_g.data(), got_g.data(), got_g.size(), DType::f32, ReduceOp::sum);
  all->all_reduce(&loss, &loss, 1, DType::f64, ReduceOp::sum);
  const std::string what = "tp " + std::to_string(tp) + " d " + std::to_string(d) + " kv " +
                           std::to_string(c.kv_heads) + (c.tie_embeddings ? " tied" : "") +
                           (c.checkpoint_activations ? " ckpt" : "");
  EXPECT_NEAR(loss, want_loss, 1e-5 * std::abs(want_loss)) << what;
  for (const ParamView& v : full.views)
    EXPECT_LT(norm_rel_err(got_g.data() + v.offset, want_g.data() + v.offset, static_cast<size_t>(v.numel())), 1e-5)
        << what << ": " << v.name;
  if (rank == 0) std::printf("ok: %s\n", what.c_str());
}

TEST(TensorParallelModel, EqualsOneProcess) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (const ModelConfig& c : {model(4, false, false), model(2, true, false), model(2, false, true)})
    for (int tp : {1, 2, 4})
      for (int d : {1, 2}) {
        if (tp * d > world || (d > 1 && c.heads / tp % d != 0)) continue;
        check_case(c, tp, d);
        MPI_Barrier(MPI_COMM_WORLD);
      }
}

}  // namespace
}  // namespace flexsp

// The planner's activation figure against the bytes a step really holds. `flexsp profile`
// measures activation bytes per token (profile_activation_memory: one sequence, slope over
// two lengths); the planner turns that into its tokens-per-rank bound
// (cost_activation_bytes_per_token). Here the backend's allocator counts what a packed
// micro-batch of many sequences holds, set up as PlanExecutor sets it up (the model sized
// for E local tokens, Ulysses for the group's stream of d E tokens), for every group size
// the grid can run, with and without activation checkpointing: bytes / E must stay within
// 10% of the planner's figure (never above it by more), and meet it within 10% for the
// widest group, which the figure is taken from.
//
// That comparison cannot see how many layers' Ulysses buffers are kept: the profile runs
// the same code. So the growth of the held bytes from 2 to 8 layers is also checked
// against a bound written from the model's shapes alone: under activation checkpointing
// each added layer keeps its input (E x hidden) and nothing else that scales with layers
// (one head-layout slot serves every layer); without it, each added layer keeps at least
// its own slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/model/llama.h"
#include "lib/model/params.h"
#include "lib/plan/plan.h"
#include "lib/planner/cost/cost_model.h"
#include "lib/runtime/sequence_probe.h"
#include "lib/runtime/ulysses.h"

namespace flexsp {
namespace {

ModelConfig tiny(bool ckpt) {
  ModelConfig c;
  c.preset = "tiny";
  c.hidden = 64;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.ffn = 176;
  c.vocab = 300;
  c.checkpoint_activations = ckpt;
  return c;
}

// Sequence lengths (varied, 1-token ones included) that add up to `total`.
std::vector<int32_t> packed_cu(int64_t total) {
  const int32_t pattern[] = {1, 37, 200, 5, 411, 2, 96, 1, 150};
  std::vector<int32_t> cu{0};
  for (size_t i = 0; cu.back() < total; ++i)
    cu.push_back(static_cast<int32_t>(std::min<int64_t>(cu.back() + pattern[i % 9], total)));
  return cu;
}

// Bytes held by a forward + backward of a micro-batch of d * E tokens on this rank's group
// of d, counted from before the model and attention are built.
double held_bytes(Backend& be, const ModelConfig& c, Comm* group, int64_t E, ProbeWeights& w) {
  const int d = group == nullptr ? 1 : group->size();
  const int64_t T = E * d;
  const std::vector<int32_t> cu = packed_cu(T);
  const int nseq = static_cast<int>(cu.size()) - 1;
  std::vector<int32_t> ids(static_cast<size_t>(T)), pos(ids.size()), tgt(ids.size());
  for (int64_t i = 0; i < T; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 31) % c.vocab);
  packed_positions(cu.data(), nseq, pos.data());
  packed_next_token_targets(ids.data(), cu.data(), nseq, tgt.data());
  const std::vector<int64_t> off = shard_offsets(T, d);
  const int j = group == nullptr ? 0 : group->rank();
  const int64_t lo = off[static_cast<size_t>(j)];
  const size_t before = be.allocated_bytes();
  be.reset_peak_allocated_bytes();
  {
    Llama model(be, c, E);
    UlyssesAttention ulysses(be, c, T);
    MicroBatch mb{E, ids.data() + lo, pos.data() + lo, tgt.data() + lo, nseq, cu.data()};
    if (group != nullptr) ulysses.set_layout(*group, cu.data(), nseq, off);
    model.forward(w.params(), mb, group != nullptr ? &ulysses : nullptr);
    model.backward(w.params(), w.grads(), 1.0 / static_cast<double>(T));
  }
  return static_cast<double>(be.peak_allocated_bytes() - before);
}

TEST(ActivationMemory, PlannerFigureMatchesTheAllocator) {
  Grid g = grid_create(MPI_COMM_WORLD, 0);
  Groups groups = groups_create(g);
  auto be = make_cpu_backend();
  constexpr int64_t E = 1200;  // local tokens per rank, as the planner's bound would set them
  for (const bool ckpt : {false, true}) {
    const ModelConfig c = tiny(ckpt);
    const ActivationProfile prof = profile_activation_memory(g, groups, *be, c, 64, 512);
    CostModel cm;
    cm.model_hidden = c.hidden;
    cm.model_layers = c.layers;
    cm.activation_mb_per_token = prof.bytes_per_token / 1e6;
    cm.activation_mb_per_token_ckpt = prof.bytes_per_token_ckpt / 1e6;
    const double planned = cost_activation_bytes_per_token(cm, c);
    ProbeWeights w(*be, c);
    for (int d = 1; d <= g.size; d *= 2) {
      if (!sp_group_runnable(c.heads, c.kv_heads, d) || g.size % d != 0) continue;
      const double per_token =
          held_bytes(*be, c, d == 1 ? nullptr : &groups.block(d), E, w) / static_cast<double>(E);
      if (g.rank == 0)
        std::printf("checkpointing %-3s d=%d: held %.1f bytes/token, planner %.1f (%+.1f%%)\n",
                    ckpt ? "on" : "off", d, per_token, planned, 100 * (per_token / planned - 1));
      EXPECT_LT(per_token, 1.10 * planned) << "ckpt " << ckpt << " d=" << d;
      if (d == prof.widest) {
        EXPECT_GT(per_token, 0.90 * planned) << "ckpt " << ckpt << " d=" << d;
      }
    }
  }
  grid_destroy(g);
}

// Bytes of one layer's head-layout attention slot on a rank of a d-wide Ulysses group
// over T tokens: q and o over heads / d heads, k and v over kv_heads / d (one kv head each
// when d exceeds kv_heads), fp32, and the fp32 log-sum-exp per query head.
double slot_bytes(const ModelConfig& c, int d, int64_t T) {
  const double hq = c.heads / d, hkv = d <= c.kv_heads ? c.kv_heads / d : 1;
  return 4.0 * static_cast<double>(T) * (c.head_dim * (2 * hq + 2 * hkv) + hq);
}

TEST(ActivationMemory, UlyssesKeepsOneSlotUnderCheckpointing) {
  Grid g = grid_create(MPI_COMM_WORLD, 0);
  Groups groups = groups_create(g);
  auto be = make_cpu_backend();
  constexpr int64_t E = 1200;
  int d = 1;  // the widest Ulysses group this grid runs
  for (int k = 2; k <= g.size; k *= 2)
    if (g.size % k == 0 && sp_group_runnable(4, 2, k)) d = k;
  if (d == 1) GTEST_SKIP() << "needs a group of 2 or more ranks";
  auto held = [&](bool ckpt, int layers) {
    ModelConfig c = tiny(ckpt);
    c.layers = layers;
    ProbeWeights w(*be, c);
    return held_bytes(*be, c, &groups.block(d), E, w);
  };
  const ModelConfig c = tiny(true);
  const double slot = slot_bytes(c, d, E * d), input = 4.0 * E * c.hidden;
  const double grow_ckpt = held(true, 8) - held(true, 2), grow_all = held(false, 8) - held(false, 2);
  if (g.rank == 0)
    std::printf("d=%d, 2 -> 8 layers: held +%.0f bytes with checkpointing (6 inputs %.0f, one slot %.0f), "
                "+%.0f without (6 slots %.0f)\n", d, grow_ckpt, 6 * input, slot, grow_all, 6 * slot);
  // Six more layers' inputs, and at most part of one slot for everything else.
  EXPECT_LE(grow_ckpt, 6 * input + 0.5 * slot);
  // Without checkpointing every layer keeps its slot, and more (its other activations).
  EXPECT_GE(grow_all, 6 * slot);
  grid_destroy(g);
}

}  // namespace
}  // namespace flexsp

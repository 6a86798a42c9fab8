// ZeRO in isolation: every stage and supported (param, grad, optim) shard-group
// combination, on emulated nodes. Each rank feeds its own random gradients (two
// micro-batches, through the full buffers or, at stage 3, unit by unit through the
// provider); after each of two steps the parameters (gathered back) equal a
// single-process AdamW on the summed gradient, and so does the returned (clipped) norm.
// Stage 3 must also serve its current full weights per unit, and its peak backend
// memory must be well below stage 0's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "lib/backend/backend.h"
#include "lib/comm/groups.h"
#include "lib/grid/grid.h"
#include "lib/model/llama.h"
#include "lib/optim/optim.h"
#include "lib/runtime/zero.h"
#include "lib/util/error.h"
#include "support/rel_err.h"

namespace flexsp {
namespace {

ModelConfig small_model(bool tied) {
  ModelConfig c;
  c.hidden = 32;
  c.layers = 12;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.ffn = 72;
  c.vocab = 61;
  c.tie_embeddings = tied;
  return c;
}

// Random gradient of `rank` for micro-batch `mb` of step `step`; zero in the padding.
std::vector<float> rand_grads(const ParamTable& t, int rank, int step, int mb) {
  std::mt19937_64 g(1000003ull * rank + 7919ull * step + mb);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(t.total), 0.f);
  for (const ParamView& pv : t.views)
    for (int64_t i = 0; i < pv.numel(); ++i) v[static_cast<size_t>(pv.offset + i)] = d(g);
  return v;
}


struct Case {
  int stage;
  const char* param;
  const char* grad;
  const char* optim;
};

// Runs one case; returns this rank's peak backend bytes.
size_t run_case(const Grid& grid, Groups& groups, const ModelConfig& c, const Case& k) {
  const std::string what = "stage " + std::to_string(k.stage) + " (" + k.param + ", " + k.grad +
                           ", " + k.optim + ") np " + std::to_string(grid.size) + " rpn " +
                           std::to_string(grid.ranks_per_node);
  const ParamTable t = make_param_table(c);
  ParallelSection p;
  p.zero = k.stage;
  p.zero_param_group = *enum_parse<ZeroGroup>(k.param);
  p.zero_grad_group = *enum_parse<ZeroGroup>(k.grad);
  p.zero_optim_group = *enum_parse<ZeroGroup>(k.optim);
  OptimSection o;
  o.grad_clip = 5.0;  // random gradients exceed it: the global norm must be right

  std::vector<float> init(static_cast<size_t>(t.total));
  init_params(c, t, 42, init.data(), 0, t.total);
  auto ref_be = make_cpu_backend();  // the single process
  Buffer<float> rp(*ref_be, init.size()), rg(*ref_be, init.size());
  ref_be->copy_from_host(rp.get(), init.data(), init.size() * sizeof(float));
  AdamW ref(*ref_be, t);

  auto be = make_cpu_backend();
  size_t peak = 0;
  {
    const std::unique_ptr<ZeroOptimizer> zp = make_zero_optimizer(*be, t, p, ZeroPeers{&groups});
    ZeroOptimizer& z = *zp;
    z.set_params(init.data());
    std::vector<float> cur = init, held = init, got(init.size()), unit;
    for (int step = 1; step <= 2; ++step) {
      z.zero_grads();
      std::vector<float> sum(init.size(), 0.f);
      for (int mb = 0; mb < 2; ++mb) {
        for (int r = 0; r < grid.size; ++r) {
          const std::vector<float> gr = rand_grads(t, r, step, mb);
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += gr[i];
        }
        const std::vector<float> mine = rand_grads(t, grid.rank, step, mb);
        ParamProvider& pp = z.provider();
        if (k.stage < 3) {
          // The model accumulates into the full buffer, unit by unit (none done: the
          // step reduces the whole buffer).
          for (int u = 0; u < param_units(t); ++u) {
            const int64_t b = param_unit_begin(t, u), n = param_unit_end(t, u) - b;
            unit.resize(static_cast<size_t>(n));
            float* g = pp.unit_grads(u);
            be->copy_to_host(unit.data(), g, unit.size() * sizeof(float));
            for (int64_t i = 0; i < n; ++i) unit[static_cast<size_t>(i)] += mine[static_cast<size_t>(b + i)];
            be->copy_from_host(g, unit.data(), unit.size() * sizeof(float));
          }
          continue;
        }
        for (int u = param_units(t) - 1; u >= 0; --u) {
          const int64_t b = param_unit_begin(t, u), n = param_unit_end(t, u) - b;
          unit.resize(static_cast<size_t>(n));
          be->copy_to_host(unit.data(), pp.unit_params(u), unit.size() * sizeof(float));
          int64_t bad = 0;
          for (int64_t i = 0; i < n; ++i) bad += unit[static_cast<size_t>(i)] != held[static_cast<size_t>(b + i)];
          EXPECT_EQ(bad, 0) << what << ": unit " << u << " does not hold the current weights";
          float* g = pp.unit_grads(u);
          be->copy_to_host(unit.data(), g, unit.size() * sizeof(float));
          for (int64_t i = 0; i < n; ++i) unit[static_cast<size_t>(i)] += mine[static_cast<size_t>(b + i)];
          be->copy_from_host(g, unit.data(), unit.size() * sizeof(float));
          pp.unit_done(u, true);
        }
      }
      const double norm = z.step(o, 1e-2, nullptr);
      // Reference: one process, the summed gradient.
      ref_be->copy_from_host(rg.get(), sum.data(), sum.size() * sizeof(float));
      const double sumsq = ref_be->sum_squares(rg.get(), t.total);
      ref.step(rp.get(), rg.get(), o, 1e-2, clip_scale(sumsq, o.grad_clip));
      ref_be->copy_to_host(cur.data(), rp.get(), cur.size() * sizeof(float));
      z.get_params(got.data());
      held = got;
      EXPECT_LT(norm_rel_err(got, cur), 1e-6) << what << " step " << step;
      EXPECT_NEAR(norm, std::sqrt(sumsq), 1e-6 * std::sqrt(sumsq)) << what << " step " << step;
    }
    peak = be->peak_allocated_bytes();
  }
  EXPECT_EQ(be->allocated_bytes(), 0u) << what;
  return peak;
}

TEST(Zero, EveryStageAndGroupEqualsOneProcess) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::vector<int> rpns{world >= 2 ? world / 2 : 1};
  if (world >= 8) rpns.push_back(2);
  const Case cases[] = {
      {0, "world", "world", "world"}, {1, "world", "world", "world"},
      {1, "world", "world", "node"},  {2, "world", "world", "world"},
      {2, "world", "node", "node"},   {3, "world", "world", "world"},
      {3, "node", "world", "world"},  {3, "node", "node", "world"},
      {3, "node", "node", "node"},
  };
  for (int rpn : rpns) {
    Grid grid = grid_create(MPI_COMM_WORLD, rpn);
    Groups groups = groups_create(grid);
    for (bool tied : {false, true}) {
      const ModelConfig c = small_model(tied);
      size_t peak0 = 0;
      for (const Case& k : cases) {
        const size_t peak = run_case(grid, groups, c, k);
        if (k.stage == 0) peak0 = peak;
        if (grid.rank == 0 && !tied && (k.stage == 0 || k.stage == 3))
          std::printf("np %d rpn %d stage %d (%s, %s, %s): peak %zu bytes per rank (%.2fx stage 0)\n",
                      grid.size, rpn, k.stage, k.param, k.grad, k.optim, peak,
                      static_cast<double>(peak) / static_cast<double>(peak0));
        // Stage 0 keeps params, grads and two moments in full; stage 3 keeps at most
        // 1/(param group) of them plus a couple of units.
        const int param_group = std::string(k.param) == "node" ? rpn : grid.size;
        if (k.stage == 3 && param_group >= 2) {
          EXPECT_LT(static_cast<double>(peak), 0.6 * static_cast<double>(peak0))
              << "stage 3 peak memory not well below stage 0's";
        }
      }
    }
    groups = Groups{};
    grid_destroy(grid);
  }
}

TEST(Zero, RejectsUnsupportedGroups) {
  auto rejects = [](int stage, const char* pg, const char* gg, const char* og, const char* key) {
    ParallelSection p;
    p.zero = stage;
    p.zero_param_group = *enum_parse<ZeroGroup>(pg);
    p.zero_grad_group = *enum_parse<ZeroGroup>(gg);
    p.zero_optim_group = *enum_parse<ZeroGroup>(og);
    try {
      zero_check(p);
      ADD_FAILURE() << "accepted stage " << stage << " " << pg << " " << gg << " " << og;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  rejects(3, "world", "node", "node", "parallel.zero_grad_group");
  rejects(3, "world", "world", "node", "parallel.zero_optim_group");
  rejects(3, "node", "world", "node", "parallel.zero_optim_group");
  rejects(2, "world", "world", "node", "parallel.zero_grad_group");
  rejects(4, "world", "world", "world", "parallel.zero");
  ParallelSection ok;
  ok.zero = 3;
  ok.zero_param_group = ZeroGroup::node;
  EXPECT_NO_THROW(zero_check(ok));
}

}  // namespace
}  // namespace flexsp

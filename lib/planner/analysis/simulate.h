// flexsp simulate (docs/commands.md): the planner and the cost model projected
// over node counts past the hardware at hand -- step time, tokens/s, MFU, flexsp vs the
// baselines, weak- and strong-scaling efficiency.
//
// Per node count n (G = n x GPUs per node) and per sampled step, the step's batch is
// planned for flexsp, static and batch_adaptive (lib/planner/planner.h) on G GPUs, and
//
//   step(G) = sum over micro-batches of (fixed(G) + makespan)   the planner's prediction
//           + sync(G)                                           once-per-step ZeRO traffic
//
// fixed(G) and sync(G) as lib/planner/cost/sim_price.h prices them.
//
// Batches: the BatchSampler of training, seeded. Weak scaling: the base batch (sequences
// or tokens) at the first node count, grown in proportion to G; strong: the base batch
// at every G. Per node count the figures are over all sampled steps: mean step time,
// tokens/s = tokens / time, MFU = training FLOPs (model_train_flops: dense 6 x params per
// token + causal attention from the sum of s^2, forward + backward) / (time x G x peak),
// speedup = mean baseline time / mean flexsp time. Scaling efficiency = flexsp tokens/s
// per GPU at G / that at the first node count (weak rows and strong rows each against
// their own first row that fits; a node count whose batch does not fit is a row saying why).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lib/config/config.h"
#include "lib/data/sampler.h"
#include "lib/model/model_config.h"
#include "lib/planner/cost/cost_model.h"
#include "lib/planner/cost/sim_price.h"
#include "lib/planner/planner.h"

namespace flexsp {

// Predicted figures of one sampled step on G GPUs (ms include the per-step sync).
struct SimStep {
  double flexsp_ms = 0, static_ms = 0, batch_adaptive_ms = 0;
  int64_t seqs = 0, tokens = 0;
  double flops = 0;
  int micro_batches = 0;  // flexsp's
};

// One node count under one kind of scaling, over its steps.
struct SimPoint {
  int nodes = 0, gpus = 0;
  double seqs = 0, tokens = 0, micro_batches = 0;  // means per step
  double flexsp_ms = 0, static_ms = 0, batch_adaptive_ms = 0;  // mean step times
  double speedup_vs_static = 0, speedup_vs_batch_adaptive = 0;
  double tokens_per_s = 0, mfu = 0;
  double efficiency = 0;  // flexsp tokens/s per GPU over the first node count's
};
SimPoint sim_point(int nodes, int gpus, const std::vector<SimStep>& steps, double peak_tflops);
// base's per-GPU tokens/s relative: p.efficiency = (p.tps / p.gpus) / (base.tps / base.gpus).
double sim_efficiency(const SimPoint& p, const SimPoint& base);

// The base batch grown by gpus / base_gpus (weak scaling), at least one sequence.
SamplerOptions sim_weak_batch(const SamplerOptions& base, int gpus, int base_gpus);

struct SimSetup {
  // The layout and the planner's settings as a config says them; each row's planner
  // context is planner_context(run, model, cost, its GPUs, gpus_per_node). ZeRO: shards over
  // a stage's GPUs (the zero_*_group spans "world").
  RunConfig run;
  ModelConfig model;
  CostModel cost;  // fabric-scaled (sim_scale_fabric)
  bool ring_only_when_needed = false;  // PlannerContext's: no config key holds it
  int gpus_per_node = 8;
  std::vector<int> nodes;  // ascending; the first is the baseline
  SimFabric fabric;
  SimFixedSplit fixed;
  SamplerOptions batch;    // the base batch (at nodes.front())
  int64_t steps = 5;
  double peak_tflops = 312;
  bool weak = true, strong = true;
};

struct SimRow {
  int nodes = 0, gpus = 0;
  double fixed_ms = 0, sync_ms = 0;  // per micro-batch, per step
  SimPoint weak, strong;             // filled as setup.weak / setup.strong ask
  std::string infeasible;            // non-empty: what does not fit (no figures)
};

// Plans every node count; on_row (optional) sees each row as it is done. A node count
// whose batch does not fit keeps going: its row says why (infeasible) and carries no
// figures; efficiencies are against the first row that has them. Throws Error when no
// node count fits.
std::vector<SimRow> sim_scaling(const SimSetup& s, const std::vector<int64_t>& docs,
                                const std::function<void(const SimRow&)>& on_row = {});

}  // namespace flexsp

// The price of a step beyond its micro-batches, as flexsp simulate, the layout search and
// the trainer's predicted step all take it (docs/planner.md): the ZeRO traffic and
// optimizer per step, and the share of ZeRO-3's traffic the cost model's fixed cost holds.
// One definition, so the timing report's predicted step compares like with like with the
// measured one, and `flexsp train` plans with the same fixed cost (sim_plan_context).
//
// Gradient reduction and ZeRO traffic (sim_zero_traffic), as lib/runtime/zero.h runs it
// (simulate: every shard group = all G GPUs, sim_zero_comm), as bandwidth-optimal rings:
// per GPU an all-reduce moves
// 2(G-1)/G of the buffer, a reduce-scatter or all-gather (G-1)/G. Stage 0: all-reduce of
// the gradients, once per step; 1: the same plus an all-gather of the updated parameters;
// 2: reduce-scatter plus all-gather; 3: per micro-batch (per pipeline unit under a
// pipeline: each Seq1F1B chunk, on the stage's layers), an all-gather of the parameters
// for forward and one for backward (a third for the re-forward under activation
// checkpointing) and a reduce-scatter of the gradients. Buffers: parameters x the cost
// model's param_bytes / grad_bytes. A ring spanning nodes runs at the inter-node ring
// bandwidth per GPU, else at the intra-node one. Shard groups of a node (the search,
// train) add the per-step reduction across nodes (one rank per node in a ring, its shard)
// and, for a node parameter group with wider optimizer states, the gather of the updated
// pieces across nodes.
//
// The sync, once per step (sim_sync_ms; predicted against measured): exposure x
// the ZeRO traffic per step + the optimizer over the rank's shard (the cost model's
// optimizer_ns_per_param x its parameters / tp / the optimizer group at stages >= 1),
// the pipeline stage's share of both. One definition for simulate, the search and the
// trainer's predicted step (sim_step_pricing), so the timing report's predicted step
// compares like with like with the measured one.
//
// Ring bandwidths (sim_fabric): the cost model's bw_zero_intra / bw_zero_inter when it has
// them (flexsp profile measures them); else, from the per-GPU all-to-all bandwidths by
// group size, a ring is taken to run at the figure of the widest group of its span --
// intra: the group of one whole node; inter: the largest listed inter-node group, where
// nearly all traffic leaves the node, so its figure is about a GPU's share of the
// network. --bw-intra-gbs / --bw-inter-gbs set those ring bandwidths and scale the whole
// all-to-all table of that span by the same factor (a faster fabric speeds both; the
// table keeps its shape; explicit per-d tables belong in a cost-model file).
//
// The fixed cost, and no double counting (sim_fixed_split): the cost model's fixed_ms is
// paid once per micro-batch. The published GPT-7B figure (629 ms, 64 GPUs) was measured
// with ZeRO-3 over those 64 GPUs, so it holds ZeRO-3's per-micro-batch gathers and
// reduce-scatters as far as they were not hidden behind compute. With fixed_ref_gpus = R
// > 0 ("the fixed cost was measured on R GPUs with ZeRO-3"), the modelled ZeRO-3 traffic
// per micro-batch T3(R) on the reference fabric is split out of it: exposure
// e = min(1, fixed / T3(R)) -- the fraction of the modelled traffic that shows -- and
// residual = fixed - e T3(R) (launches and the like, independent of G). Then
//   fixed(G) = residual + e x (this stage's per-micro-batch traffic at G),
//   sync(G)  = e x (this stage's per-step traffic at G),
// so G = R with ZeRO-3 gives back the cost model exactly (flexsp plan's figures), and the
// traffic is never counted twice. For the published figures T3(64) (40 GB per GPU at
// 4.9 GB/s, 8.1 s) is far above 629 ms: e = 0.078 and residual 0, i.e. most of the
// traffic overlaps with compute and the same fraction is assumed to show at every G and
// stage. With R = 0 (a `flexsp profile` file: it times forward + backward alone) the fixed
// cost holds no communication: residual = fixed, e = 1 (the CPU runtime does not overlap).
// The planner plans with fixed(G), so its micro-batch count trades against the right cost.
// Not modelled: data loading, the planner's own time, collective latency (alpha) terms;
// the optimizer only where the cost model has optimizer_ns_per_param.
//
#pragma once

#include <vector>

#include "lib/model/model_config.h"
#include "lib/plan/plan.h"
#include "lib/planner/context.h"
#include "lib/planner/cost/cost_model.h"
#include "lib/planner/cost/plan_costs.h"

namespace flexsp {

enum class SimCollective { all_reduce, reduce_scatter, all_gather };

// Bytes each of n GPUs sends in a ring collective over a buffer of `bytes`.
double sim_ring_bytes(SimCollective c, int n, double bytes);

// A cluster of `gpus` GPUs on `nodes` nodes, and its ring bandwidths per GPU.
struct SimCluster {
  int gpus = 1, nodes = 1;
  double bw_intra_gbs = 0, bw_inter_gbs = 0;
};
// gpus on nodes of gpus_per_node.
SimCluster sim_cluster_of(int gpus, int gpus_per_node, double intra_gbs, double inter_gbs);

// ms per step and per micro-batch of one ZeRO layout's collectives.
struct SimZeroComm {
  double per_step_ms = 0, per_micro_batch_ms = 0;
};
// z's shard groups in data-parallel ranks (as PlannerContext::zero holds them) over a
// pipeline stage of stage_gpus GPUs, gpus_per_node per node, tp ranks per device;
// checkpointing (m) adds the third parameter gather of stage 3. Rings at
// intra_gbs when the group stays in a node, else inter_gbs. The whole model's traffic:
// under a pipeline (pipe) the price takes the stage's share of it (PlanCosts::step_ms
// for the micro-batches, sim_sync_ms for the step). Stage 3 gathers and reduce-scatters
// once per pipeline unit: per_micro_batch_ms is a unit's, and the pipeline's price pays
// the fixed cost once per unit (a micro-batch, or each of its Seq1F1B chunks).
SimZeroComm sim_zero_traffic(const ModelConfig& m, const CostModel& cm, const ZeroLayout& z, int stage_gpus,
                             int gpus_per_node, int tp, double intra_gbs, double inter_gbs);
// Every shard group = all of c's GPUs (flexsp simulate).
// tp: ranks per device; each rank's share of the model is 1/tp, sharded over the
// c.gpus / tp ranks of its tp index.
SimZeroComm sim_zero_comm(const ModelConfig& m, const CostModel& cm, int stage, const SimCluster& c,
                          int tp = 1);

// The ring bandwidths: ref_* from the cost model, * after the overrides (<= 0: none).
struct SimFabric {
  double ref_intra_gbs = 0, ref_inter_gbs = 0, intra_gbs = 0, inter_gbs = 0;
};
SimFabric sim_fabric(const CostModel& cm, int gpus_per_node, double intra_override, double inter_override);
// The cost model with its all-to-all tables scaled by intra / ref_intra, inter / ref_inter.
CostModel sim_scale_fabric(CostModel cm, const SimFabric& f);

// The fixed cost split into residual + exposure x modelled traffic (see above).
struct SimFixedSplit {
  double residual_ms = 0, exposure = 1;
};
SimFixedSplit sim_fixed_split(const ModelConfig& m, const CostModel& cm, int gpus_per_node,
                              const SimFabric& f, int fixed_ref_gpus);
// The GPUs whose ZeRO-3 traffic the cost model's fixed cost holds: 64 for the published
// GPT-7B figures (built in, or a file with the same a1, a2 and fixed), else 0 (a `flexsp
// profile` fit times forward + backward alone).
int sim_default_fixed_ref_gpus(const CostModel& cm);

// The sync of one step (see above): traffic from sim_zero_traffic, share = the pipeline
// stage's part of the model (1 without a pipeline).
double sim_sync_ms(const ModelConfig& m, const CostModel& cm, const ZeroLayout& z, int tp,
                   const SimZeroComm& traffic, double exposure, double share);

// A training layout's step priced as simulate and the search price it: the plan's
// micro-batches at fixed(G) = residual + exposure x ZeRO traffic per micro-batch, plus
// the sync; the fabric of the cost model as it is (sim_fabric, no overrides), the fixed
// split at sim_default_fixed_ref_gpus. `flexsp train` plans with sim_plan_context, so its
// choice of the micro-batch count trades against the same fixed(G) (ZeRO-3's gathers).
struct SimStepPricing {
  PlanCosts costs;  // with fixed(G)
  double sync_ms = 0;
};
// ctx with cost.fixed_ms = fixed(G) of its layout.
PlannerContext sim_plan_context(const PlannerContext& ctx);
SimStepPricing sim_step_pricing(const PlannerContext& ctx);
double sim_step_ms(const SimStepPricing& p, const Plan& plan, const std::vector<int64_t>& lengths);

}  // namespace flexsp

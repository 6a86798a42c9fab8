// The planner's cost model (docs/planner.md): how long a sequence of s tokens takes on an
// SP group of d ranks, and how many tokens a rank can hold.
//
//   time(s, d)  = (a1 s^2 + a2 s) / d                         compute, per-GPU coefficients
//               + per_sequence                                paid by each rank of the group
//               + bytes(s) / (d * bw(d, span))                Ulysses all-to-all, d > 1 only
//   micro-batch = fixed + max over groups of sum of time(s, d) over the group's sequences
//
// per_sequence_ms is what a sequence costs whatever its length and group (per-sequence
// attention and loss work, kernel launches per sequence); FlexSP published none, so the
// default 0 keeps old files' meaning. flexsp profile times packed micro-batches (k
// sequences in one forward + backward) to tell it from fixed_ms.
//
// Interpretation of the published FlexSP GPT-7B figures (docs/planner.md; given "per
// micro-batch, 64 GPUs"): a1 and a2 are per-GPU coefficients -- a1 = 5.128e-6 ms/token^2 is
// what 7B's causal attention costs one A100 (6 L h s^2 FLOP at ~153 TFLOP/s), a2 = 0.184
// ms/token its dense layers -- so a group of d GPUs divides them by d. The fixed 629.36 ms
// is the cost every rank pays once per micro-batch whatever it computes (ZeRO-3 gathers and
// gradient reduce-scatters of the 7B model over the 64 GPUs, kernel launches); all groups
// pay it concurrently, so it adds once to a micro-batch's makespan and is what makes extra
// micro-batches expensive. These numbers hold only for the model they were measured with:
// the file records it (`model`), and the planner uses the file's coefficients for whatever
// model it is given (it warns when they differ).
// The all-to-all bytes are derived from the model: per layer, q, k, v and the attention
// output cross the group in forward and their gradients in backward (a third, forward
// pass again under activation checkpointing), bytes_per_element each (bf16 = 2 on GPU).
// bw(d, span) is the per-GPU all-to-all bandwidth: `bw_intra_D` when the group stays in a
// node (d <= ranks per node), `bw_inter_D` otherwise; a missing d takes the nearest listed
// d of that span (then of the other span).
//
// Tensor parallelism (tp ranks per device, the planner's unit): a sequence's compute splits
// over d tp GPUs; each rank moves cost_tp_bytes_per_token per token of its device at
// bw_tp; the Ulysses all-to-all of a group runs between the ranks of equal tp index, each
// with 1/tp of the payload; model states and activations per rank divide by tp.
//
// Ring attention (parallel.cp_mode ring/usp/auto, lib/plan/context_parallel.h): a group of
// d = u x r devices runs Ulysses over u and a ring over r. The ring's r - 1 steps each pass
// a block of keys and values (the device's tokens, its kv heads) to the next ring member
// over point-to-point links (bw_p2p_intra inside a node, bw_p2p_inter when the group spans
// nodes: the slowest link paces every step); a step's transfer overlaps the attention of
// the block in hand, so a step costs max(attention of a block, transfer of a block).
// Pipeline stages (parallel.pp_size) pass each micro-batch's activations forward and their
// gradients back at every stage boundary over the same point-to-point links.
//
// The step (predicted against measured): besides its micro-batches every step
// pays its ZeRO collectives -- all-reduce, reduce-scatter and all-gather rings over the
// shard groups (lib/planner/cost/sim_price.h: sim_zero_traffic), at bw_zero_intra inside a node
// and bw_zero_inter across nodes, GB/s per GPU as bytes a GPU moves in the ring / time --
// and the optimizer over the rank's shard: optimizer_ns_per_param per element (AdamW and
// the gradient norm). flexsp profile measures all three; a file without them (and the
// built-in figures) keeps 0: bw_zero_* then come from the all-to-all table (sim_fabric),
// and the optimizer is not priced.
//
// Memory: a rank holds its model states -- param/grad/optimizer bytes per parameter, each
// divided by its ZeRO shard group when the stage shards it -- plus activations per token
// (4.48 MB/token published for 7B without checkpointing, which is 34 h L bf16 bytes: every
// layer's activations with flash attention). E = (memory - reserve - states) / activations
// per token; a group of d ranks holds d E tokens. The activation figures belong to the
// file's model (`model_hidden`, `model_layers`) and are scaled to the planned model.
//
// The file is INI: `key = value` lines, `#` or `;` comments, an optional [cost_model]
// header; an unknown key is an Error naming the file, line and key.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "lib/model/model_config.h"

namespace flexsp {

struct CostModel {
  std::string source = "built-in (FlexSP GPT-7B, A100)";  // file it came from
  std::string model = "7b";        // preset the coefficients were measured with
  int model_hidden = 4096, model_layers = 32;  // its shape (0: unknown); scales activations
  double a1_ms = 5.128e-6;         // ms per token^2 per GPU
  double a2_ms = 0.18396;          // ms per token per GPU
  double fixed_ms = 629.36;        // per micro-batch
  double per_sequence_ms = 0;      // per sequence, on every rank of its group
  double activation_mb_per_token = 4.48;       // without activation checkpointing
  double activation_mb_per_token_ckpt = 0.40;  // with: 4.48 x (2L + 34) / (34 L), L = 32
  double bytes_per_element = 2;    // of the all-to-all payload (bf16)
  double param_bytes = 2, grad_bytes = 2, optim_bytes = 12;  // per parameter (mixed precision)
  double reserve_gb = 0;           // device memory kept free (workspace, fragmentation)
  std::map<int, double> bw_intra_gbs{{2, 119.5}, {4, 104.1}, {8, 96.5}};  // GB/s per GPU
  std::map<int, double> bw_inter_gbs{{16, 10.3}, {32, 5.9}, {64, 4.9}};
  // Tensor-parallel all-gather / reduce-scatter bandwidth per GPU inside a node, by tp.
  // FlexSP published none: the default takes the intra-node all-to-all figures (a lower
  // bound of what NVLink rings reach); flexsp profile measures them.
  std::map<int, double> bw_tp_gbs{{2, 119.5}, {4, 104.1}, {8, 96.5}};
  // Point-to-point bandwidth per GPU (ring shifts, pipeline stage boundaries), GB/s. FlexSP
  // published none: the defaults take the all-to-all figures at d = 2 (intra) and d = 16
  // (inter); flexsp profile measures them with send_recv between rank pairs.
  double bw_p2p_intra_gbs = 119.5, bw_p2p_inter_gbs = 10.3;
  // ZeRO's ring collectives per GPU (GB/s), inside a node / across nodes; 0: not measured,
  // the all-to-all table's figure (sim_fabric).
  double bw_zero_intra_gbs = 0, bw_zero_inter_gbs = 0;
  double optimizer_ns_per_param = 0;  // per element of the rank's optimizer shard, per step; 0: not priced
  // Copies between a GPU and pinned host memory (activation offload), GB/s per GPU with every
  // GPU of a node copying at once. Default: a PCIe 4.0 x16 link's practical rate; flexsp
  // profile measures it.
  double bw_h2d_gbs = 25;
};

// The published defaults (docs/planner.md).
CostModel cost_model_default();

// Reads a cost-model file; keys not in the file keep their defaults. Throws Error naming
// the file, line and key.
CostModel cost_model_load(const std::string& path);
CostModel cost_model_parse(const std::string& text, const std::string& source);

// INI text that cost_model_parse reads back (every key), with a comment header.
std::string cost_model_to_ini(const CostModel& cm, const std::string& header_comment);

// All-to-all bytes of one sequence of s tokens over a whole training step (all layers,
// forward + backward, + recompute under activation checkpointing), summed over the group.
double cost_comm_bytes(const CostModel& cm, const ModelConfig& m, int64_t s);

// Bytes one rank of a tp group moves per token of the group for tensor parallelism over a
// training step (all layers, forward, backward, recompute): its all-gathers and
// reduce-scatters of [hidden]-wide rows. 0 for tp = 1.
double cost_tp_bytes_per_token(const CostModel& cm, const ModelConfig& m, int tp);
// Per-GPU bandwidth of the tp collectives (bw_tp_D, the nearest listed tp; none listed:
// the intra-node all-to-all bandwidth of tp).
double cost_tp_bandwidth_gbs(const CostModel& cm, int tp);

// Key and value bytes a ring passes per token of a device over a training step (all
// layers; forward k, v; backward k, v and their gradients dk, dv; a recomputed forward
// under checkpointing again k, v), for kv_heads heads of the device.
double cost_ring_bytes_per_token(const CostModel& cm, const ModelConfig& m, int kv_heads);

// Bytes a pipeline stage boundary carries per token over a training step: the [hidden]
// activation forward and its gradient backward.
double cost_pp_bytes_per_token(const CostModel& cm, const ModelConfig& m);

// Per-GPU point-to-point bandwidth (inter: between nodes).
double cost_p2p_bandwidth_gbs(const CostModel& cm, bool inter);

// Per-GPU all-to-all bandwidth in GB/s for a group of d ranks (inter: spans nodes).
double cost_bandwidth_gbs(const CostModel& cm, int d, bool inter);

// ZeRO layout: stage 0-3 and the shard group size (ranks) of params, grads, optimizer.
struct ZeroLayout {
  int stage = 3;
  int param_group = 1, grad_group = 1, optim_group = 1;
};

// Bytes of model states per rank.
double cost_model_state_bytes(const CostModel& cm, const ModelConfig& m, const ZeroLayout& z);

// Activation bytes per token for the model's checkpointing setting: the file's figure,
// scaled from the file's model to m (a layer keeps ~34 hidden-wide bf16 values per token;
// under checkpointing 2 per layer input plus one layer recomputed: 2 h L + 34 h). The
// figure of a run without activation offload (the memory model subtracts what offload
// moves to the host).
double cost_activation_bytes_per_token(const CostModel& cm, const ModelConfig& m);

}  // namespace flexsp

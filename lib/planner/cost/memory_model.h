// The memory model of one rank: what a layout -- tensor parallelism, the ZeRO
// stage and its shard groups, activation checkpointing, tokens per rank -- holds on a GPU.
// The planner (its tokens-per-rank bound), `flexsp plan --search` and `flexsp train` (which
// refuses a layout that does not fit) all read it, so they cannot disagree.
//
// Design choice: it follows the buffers lib/runtime/zero.h really allocates, not a
// textbook ZeRO, with the element sizes of the cost model (param_bytes, grad_bytes,
// optim_bytes per parameter: 4, 4, 8 from `flexsp profile`, as the runtime's fp32 buffers;
// 2, 2, 12 in the published mixed-precision figures). Per rank, P = the parameters of this
// rank's tensor-parallel block (make_param_table(model, tp), padding included):
//   stage 0: params P, grads P, optimizer states P
//   stage 1: params P, grads P, optimizer states P / optim group, a scratch block
//   stage 2: the same as 1 -- the runtime accumulates gradients in the full buffer and
//            reduce-scatters at the step, so stage 2 saves traffic here, not memory
//   stage 3: params P / param group, grads P / grad group, optimizer P / optim group,
//            a scratch param piece and sub-piece, and the gathered-unit slots: up to four
//            units (five with tied embeddings) of the largest unit, padded to the
//            data-parallel size (weights being used and prefetched, gradients being made
//            and being reduced), each max(param_bytes, grad_bytes) per element; the
//            same inside a pipeline stage, whose units are gathered per pipeline unit.
// Shard sizes round up (every shard has the same length: the runtime pads).
// Activations per token: the cost model's figure (cost_activation_bytes_per_token, with
// or without checkpointing, scaled to the model) / tp per rank; tokens are the device's.
// Pipeline (pipeline.h): the rank's stage holds the parameters of its layers -- the table
// of a model of the largest stage's layers, embedding and head included (an upper bound of
// every stage) -- and in_flight micro-batches of that stage's activations (pipeline.h: pp
// for 1F1B; pp + chunks - 1 chunks of at most the largest chunk's share for Seq1F1B). Seq1F1B
// adds the chunk attention's own buffers (lib/runtime/seq_chunks.h): per layer of the
// stage and token of each held chunk, its keys, values and their gradient accumulators (4 x kv
// heads x head_dim x bytes_per_element) and softmax statistics (4 bytes x heads); and one
// prefix's keys, values and gradients shared by the stage (the same 4 x kv heads x head_dim
// x bytes_per_element per token of a micro-batch, one layer's). kv heads: the rank's, or
// the widest Ulysses group where it is wider (a rank then holds one replicated kv head).
// Ring attention: the block of keys and values in flight and, in backward, their
// gradients: 4 x kv heads x head_dim x bytes_per_element per token of the device
// (ring_kv_heads: the kv heads a device's block carries, max(kv per tp rank, u)). Seq1F1B
// with a ring (lib/runtime/ring_chunks.h) stays within these: its kept keys per layer are
// in head layout, max(kv per tp rank, u) heads per device token (u <= the widest group),
// and a chunk's block carries the earlier chunks' share behind it, at most a micro-batch's.
// Token chunks (ModelConfig::token_chunk, lib/model/chunked_layer.h): past the chunk a
// device's token no longer holds a layer's temporaries -- ln1, xmid, ln2 (3 x hidden),
// gate, up, their SwiGLU and its gradients (5 x ffn), q, the attention output and their
// gradients (4 x q width; kept whole where another AttentionOp than the local one can
// run: a group of 2 or more, Seq1F1B), the logits (vocab), two fp32 norm statistics --
// at bytes_per_element each; those of C tokens remain, with the chunk attention's buffers
// (its partial output, dq, dk, dv and two fp32 lse per head, per chunk token).
// Activation offload (model.offload, lib/model/offload.h): the host pool holds every layer's
// block (memory_offload_host_per_token), per micro-batch the stage holds; the activations
// are the figure without offload less the blocks beyond the device's ring.
// Not modelled: the ring buffers of a pipeline's held units beyond one (each slot sizes
// its own, though one ring runs at a time), the bf16 copy of the stage-3 param shard on GPUs (param_bytes/2 of it when
// activations are bf16), allocator fragmentation (the cost model's reserve_gb covers it),
// host staging buffers of the communication (host memory, not the device's).
#pragma once

#include <cstdint>
#include <string>

#include "lib/model/model_config.h"
#include "lib/planner/cost/cost_model.h"
#include "lib/planner/cost/pipeline.h"

namespace flexsp {

// A layout as the memory model sees it: dp = data-parallel ranks (world / (tp pp)), the
// ZeRO shard groups in ranks (each divides dp).
struct MemoryLayout {
  int tp = 1;
  int dp = 1;
  ZeroLayout zero;
};

// What else a rank's activations hold: its pipeline stage and a ring's block.
struct MemoryExtras {
  PipelineLayout pipeline;
  int ring_kv_heads = 0;  // kv heads per token of a device in a ring's block; 0: no ring
  int64_t longest = 0;    // the longest sequence (Seq1F1B's largest chunk); 0: unknown
  int chunk_kv_heads = 0; // Seq1F1B under Ulysses: the widest group (kv heads replicated past it)
  // Given (> 0): the micro-batches of activations the stage holds, in place of pp_in_flight
  // x share -- the trainer's replay of the slots over the chunks met (pp_slot_tokens / the
  // device's tokens). 0: the bound.
  double in_flight = 0;
  // Token chunks: another AttentionOp than the local one may run (q stays whole).
  bool whole_q = false;
};

// Bytes per rank.
struct MemoryEstimate {
  double params = 0, grads = 0, optim = 0;  // model states
  double buffers = 0;                       // ZeRO scratch and stage-3 unit slots
  double activation_per_token = 0;          // per token of the rank's device
  // Token chunks (0: off): each token past chunk_tokens holds chunk_saving_per_token less
  // (the chunk attention's buffers are in `buffers`).
  int64_t chunk_tokens = 0;
  double chunk_saving_per_token = 0;
  double host_per_token = 0;                // activation offload's host pool, per token (0: none)
  double fixed() const { return params + grads + optim + buffers; }
  double activations(int64_t tokens) const {
    const double past = chunk_tokens > 0 && tokens > chunk_tokens ? static_cast<double>(tokens - chunk_tokens) : 0;
    return activation_per_token * static_cast<double>(tokens) - chunk_saving_per_token * past;
  }
  double total(int64_t tokens) const { return fixed() + activations(tokens); }
};

MemoryEstimate memory_estimate(const CostModel& cm, const ModelConfig& m, const MemoryLayout& l,
                               const MemoryExtras& x = {});

// Host bytes per token of a rank's device that the activation offload keeps for m's layers
// (model.offload; 0 without): every layer's block -- its input rows, and without
// checkpointing its saved activations and norm statistics -- at cm.bytes_per_element.
double memory_offload_host_per_token(const CostModel& cm, const ModelConfig& m, int tp);

// Tokens per device a rank can hold in mem_gb (less the cost model's reserve); 0: none.
int64_t memory_tokens_per_rank(const MemoryEstimate& e, const CostModel& cm, double mem_gb);

// One line: "params A + grads B + optimizer C + ZeRO buffers D + activations E (N tokens x
// b bytes) = T GB per GPU, more than the M GB of planner.mem_per_gpu_gb (reserve R)".
std::string memory_describe(const MemoryEstimate& e, const CostModel& cm, int64_t tokens, double mem_gb);

}  // namespace flexsp

namespace flexsp {

struct PlannerContext;

// What `flexsp train` checks before it builds anything: the layout of ctx must hold its
// model states, ZeRO buffers and the activations of the longest sequence (ctx.max_seq_len)
// spread over the widest SP group it may use (static: ctx.static_sp_size when set).
// Throws Error with one line -- the layout and memory_describe's numbers -- when it does not.
// With ctx.offload_choice: the layout with offload (what fits either way).
void memory_require_fit(const PlannerContext& ctx);
// The same test without the error: whether ctx's layout holds its longest sequence.
bool memory_fits(const PlannerContext& ctx);
// The device peak, bytes, of a model whose workspace holds `tokens` per device: with
// ctx.offload_choice and a model that offloads (offload) the larger of its two layouts --
// offload at `tokens`, and without it at plain_tokens (ModelConfig::offload_plain_tokens,
// 0: none).
double memory_peak_bytes(const PlannerContext& ctx, int64_t tokens, bool offload, int64_t plain_tokens);

// The estimate of ctx's layout: a stage's devices, its pipeline, the ring block when the
// mode runs a ring on any group size; widest (optional) gets the widest group it runs;
// in_flight: MemoryExtras::in_flight.
MemoryEstimate memory_estimate_context(const PlannerContext& ctx, int* widest = nullptr, double in_flight = 0);

}  // namespace flexsp

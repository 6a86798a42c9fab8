// Ring attention and USP (Ulysses x ring) inside one SP group (docs/parallel.md, "Context
// parallelism"; USP: arXiv 2405.07719).
//
// A group of d = u x r members (member j is Ulysses index j % u at ring position j / u,
// lib/plan/context_parallel.h) runs its stream as follows. The stream's documents are
// dealt out over the r positions in zigzag chunks (lib/runtime/zigzag.h); position p's
// tokens, padded to a multiple of u x tp with tokens that attend nothing, are cut
// contiguously over its u Ulysses members. Around core attention, Ulysses' all-to-alls
// (UlyssesAttention, reused as is over the u members) turn a member's token shard into
// all of the position's tokens on heads/u heads; between them this class runs the ring on
// those heads over the r members of equal Ulysses index. With u = 1 the all-to-alls are
// copies.
//
// Forward, step k = 0 .. r-1: a member holds the keys/values of position src = p - k; it
// computes its queries against them (a few span-attention calls: chunk pairs are either
// fully visible, causal on the diagonal at step 0, or invisible and skipped) and merges
// the partial output into its running result by log-sum-exp (Backend::attention_merge),
// while the block moves on to the next member (start_send_recv): the next block's transfer
// overlaps the current block's compute. The merged output and lse are kept (Ulysses'
// saved slot). Backward: the keys/values go round again; each step's backward with the
// merged out/lse gives exactly that block's share of dq, dk, dv; dk/dv are summed into a
// buffer that travels with the block (sent after a step's compute, received while the
// next step computes) and reaches its owner after r shifts.
//
// Seq1F1B (lib/runtime/ring_chunks.h) adds a prefix: keys/values of earlier chunks of the
// same documents that every query of the stream sees. Each member holds its own share of
// them; they travel in the block behind the current keys/values (one more span call per
// half per step, all keys visible), and their gradients come back with the block's.
//
// Activations and the blocks that travel are act_dtype; lse stays fp32. Nothing of this
// layout outlives a micro-batch (checkpoints hold no trace of it). In the step report,
// the ring's compute counts as attention and its waits for shifts as all_to_all (the SP
// group's communication).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lib/runtime/ulysses.h"
#include "lib/runtime/zigzag.h"

namespace flexsp {

// Tokens of each position in the Ulysses stream: z.tokens rounded up to `multiple`.
std::vector<int64_t> cp_padded_tokens(const ZigzagLayout& z, int multiple);

// This member's tokens of the group stream (ids, positions, targets over the whole
// stream): position j / u's zigzag tokens padded to padded[p] (pad: id 0, position 0, no
// target), then Ulysses shard j % u of them (shard_offsets).
void cp_local_tokens(const int32_t* ids, const int32_t* positions, const int32_t* targets,
                     const ZigzagLayout& z, const std::vector<int64_t>& padded, int u,
                     int member, std::vector<int32_t>& ids_out,
                     std::vector<int32_t>& positions_out, std::vector<int32_t>& targets_out);

class RingAttention final : public AttentionOp, public HeadAttention {
 public:
  // max_group_tokens: the longest stream a group of this rank will hold.
  // reserve_tokens_per_rank (0: none): size the buffers for this many tokens per member
  // whatever the stream is (as UlyssesAttention's reserve), so that they are allocated
  // once per group shape, not again at every stream longer than any before.
  RingAttention(Backend& be, const ModelConfig& c, int64_t max_group_tokens,
                int64_t reserve_tokens_per_rank = 0);

  // The next micro-batch: the group (u x r members, this rank at group.rank()), my
  // Ulysses sub-group (the u consecutive members of my position), the stream's zigzag
  // layout over r positions and the positions' padded token counts (cp_padded_tokens).
  // prefix (Seq1F1B, else empty): [r * ndoc] rows of document s that position p holds of
  // earlier chunks. Makes this op Ulysses' core again.
  void set_layout(Comm& group, Comm& ulysses, const ZigzagLayout& z,
                  const std::vector<int64_t>& padded, const std::vector<int32_t>& prefix = {});
  // Before each core call with a prefix: my position's prefix keys/values (rows of each
  // document contiguous, documents in order) and where backward writes their gradients.
  void bind_prefix(const act_t* k, const act_t* v, act_t* dk, act_t* dv);

  void forward(int layer, const act_t* q, const act_t* k, const act_t* v, act_t* out) override;
  void backward(int layer, const act_t* dout, const act_t* q, const act_t* k, const act_t* v,
                const act_t* out, act_t* dq, act_t* dk, act_t* dv) override;
  // The core in head layout (my position's padded rows, my heads).
  void forward(act_t* o, float* lse, const act_t* q, const act_t* k, const act_t* v) override;
  void backward(act_t* dq, act_t* dk, act_t* dv, const act_t* dout, const act_t* q,
                const act_t* k, const act_t* v, const act_t* o, const float* lse) override;

  void set_timers(PhaseTimes* t);
  UlyssesAttention& ulysses() { return ulysses_; }

 private:
  // One span-attention call of a ring step: query rows [q0, q0 + qrows) of my position
  // against key rows [k0, k0 + krows) of the block's position, per document (spans_ at
  // `at`: cu_q [n + 1], cu_k [n + 1], causal offsets [n]).
  struct Call {
    int64_t q0 = 0, k0 = 0, qrows = 0, krows = 0;
    size_t at = 0;
  };
  enum class Half { early, late };
  // kh: the source's early or late half, or (prefix) its prefix, all keys visible.
  void add_call(int src, Half qh, Half kh, bool diagonal, bool prefix = false);
  AttnShape shape(const Call& c) const;

  // Key rows of position src's block: its tokens, then its prefix.
  int64_t block_rows(int src) const { return z_.tokens[src] + prefix_rows_[src]; }
  // Block of position src: 2 * block_rows(src) rows of kv width (k rows, then v rows).
  size_t block_elems(int src) const;
  // Sends block src (or its gradients) to the next member and receives the previous
  // member's block into recv.
  std::unique_ptr<CommRequest> pass_on(int src, const act_t* send, act_t* recv);
  void pack_block(act_t* blk, const act_t* k, const act_t* v);
  act_t* at(act_t* p, int64_t i) const { return act_at(p, i, es_); }
  const act_t* at(const act_t* p, int64_t i) const { return act_at(p, i, es_); }

  Backend& be_;
  ModelConfig cfg_;
  size_t es_ = 4;
  int64_t max_tokens_ = 0, reserve_per_rank_ = 0;
  UlyssesAttention ulysses_;
  Comm* group_ = nullptr;
  ZigzagLayout z_;
  std::vector<int64_t> padded_;
  std::vector<int32_t> prefix_;       // [r * ndoc] or empty
  std::vector<int64_t> prefix_rows_;  // [r]
  const act_t *pk_ = nullptr, *pv_ = nullptr;
  act_t *pdk_ = nullptr, *pdv_ = nullptr;
  int u_ = 1, r_ = 1, p_ = 0, next_ = 0, prev_ = 0;  // ring neighbours: group ranks
  int hq_ = 0, hkv_ = 0;
  std::vector<Call> calls_;
  std::vector<size_t> step_calls_;  // calls of step k: [step_calls_[k], step_calls_[k + 1])
  std::vector<int32_t> spans_host_;
  Buffer<int32_t> spans_;
  Buffer<float> neg_inf_, lse_part_;
  Buffer<unsigned char> kv_[2], o_part_, dq_part_, dkv_part_, dkv_acc_[2], dkv_in_;
  PhaseTimes* timers_ = nullptr;
};

}  // namespace flexsp

// What one member of an SP group runs of its group's tokens: the one packing both plan
// executors (executor.h, pipeline.h) use.
//
// A group packs its sequences of the global batch into one token stream (every member
// reads the same tokens, micro_batch.h), then each member takes its share:
//  - one device: the whole stream;
//  - Ulysses (no ring): a contiguous shard (shard_offsets), the stream first padded to a
//    multiple of d * tp tokens under tensor parallelism, so every rank holds an equal
//    slice of it;
//  - with a ring (USP, cp_split's r > 1): the member's zigzag share, each ring position
//    padded to u * tp tokens (ring_attention.h).
// The member's attention op (Ulysses, the ring) takes the layout the share returns.
#pragma once

#include <cstdint>
#include <vector>

#include "io/dataset/token_dataset.h"
#include "lib/data/sampler.h"
#include "lib/model/llama.h"
#include "lib/plan/context_parallel.h"
#include "lib/plan/plan.h"
#include "lib/runtime/micro_batch.h"
#include "lib/runtime/zigzag.h"

namespace flexsp {

// A member's share of its group's stream (host).
struct MemberTokens {
  std::vector<int32_t> ids, positions, targets;
  MicroBatch view() const;  // tokens, ids, positions, targets (sequences: the op's layout)
};

// Group g's sequences of `batch`, packed. seqs: scratch.
void load_group(const TokenDataset& ds, const std::vector<SeqRef>& batch, const PlanGroup& g,
                int vocab, std::vector<SeqRef>& seqs, HostMicroBatch& out);
// The stream group g runs as cp: load_group's, padded for Ulysses under tensor parallelism
// (tp > 1, no ring).
void load_group_stream(const TokenDataset& ds, const std::vector<SeqRef>& batch, const PlanGroup& g,
                       int vocab, int tp, const CpSplit& cp, std::vector<SeqRef>& seqs,
                       HostMicroBatch& out);

// Ulysses: member j's contiguous shard of the stream of a group of d. Returns the shard
// offsets (d + 1) UlyssesAttention::set_layout takes.
std::vector<int64_t> ulysses_share(const HostMicroBatch& stream, int d, int j, MemberTokens& out);

// Ring (USP): member j's zigzag share of the stream, each ring position padded to u * tp
// tokens; the layout and the positions' padded counts RingAttention::set_layout takes.
struct RingShare {
  ZigzagLayout layout;
  std::vector<int64_t> padded;
};
RingShare ring_share(const HostMicroBatch& stream, const CpSplit& cp, int tp, int j,
                     MemberTokens& out);

}  // namespace flexsp

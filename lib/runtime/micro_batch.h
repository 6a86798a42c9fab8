// From the sequences of a global batch (SeqRefs) that a plan puts together to one packed
// token stream in host memory: ids, per-sequence positions, next-token targets.
#pragma once

#include <cstdint>
#include <vector>

#include "io/dataset/token_dataset.h"
#include "lib/data/sampler.h"
#include "lib/model/llama.h"

namespace flexsp {

// Next-token predictions of a list of sequences: sum of (length - 1).
int64_t count_predictions(const std::vector<SeqRef>& seqs);

// Host buffers of one packed micro-batch; view() points a MicroBatch at them.
struct HostMicroBatch {
  std::vector<int32_t> ids, positions, targets, cu_seqlens;
  MicroBatch view() const;
};

// Reads the sequences' tokens and fills ids, cu_seqlens, positions and targets. Throws
// Error if a token is outside [0, vocab).
void load_micro_batch(const TokenDataset& ds, const std::vector<SeqRef>& seqs, int vocab,
                      HostMicroBatch& out);

// Appends a sequence of padding tokens (token 0, no targets: they predict nothing and
// receive no gradient) so that the token count is a multiple of `multiple` -- the ranks
// of a tensor-parallel SP group each hold an equal slice of the stream. Its own sequence:
// no real token attends to it.
void pad_micro_batch(HostMicroBatch& mb, int64_t multiple);

}  // namespace flexsp
